"""Idle steps: where the policy gives every row ``k = 0``, the loop leaves a drafter that has a
``skip`` method out of the step (``DecodeLoop.idle_skip``): no proposal, no update, the
drafter records the committed token (the EAGLE head defers its pass). Outputs equal plain
decoding, and every draft equals the one of the loop that proposes and updates each step
(same acceptances by position, row for row). The EAGLE head's cache after every idle step is
checked in tests/test_eagle.py (``chain-idle``)."""

import dataclasses

import pytest
from spec_helpers import IdlePolicy, mixed_prompts, sharp_tiny_pair

from specjax import drafters, engine
from specjax.engine import generate


@pytest.fixture(scope="module")
def target():  # 8 tokens, sharp: random heads' drafts are accepted now and then
    return sharp_tiny_pair()[0]


@pytest.fixture(scope="module")
def prompts():
    return [[t % 8 for t in p] for p in mixed_prompts(4, seed=5)]


@pytest.fixture(scope="module")
def plain(target, prompts):
    return generate(target, prompts, max_new_tokens=24).tokens


CASES = [pytest.param("eagle", dict(k=3), id="eagle3-chain"),
         # prompt lookup's idle steps also run by default in the quick mesh check and the
         # drafter x policy pairs of tests/test_extension_points.py (adaptive is its default)
         pytest.param("prompt_lookup", dict(k=3), id="prompt_lookup", marks=pytest.mark.long),
         pytest.param("eagle", dict(k=3, tree="dynamic:width=2,nodes=6"), id="eagle3-tree",
                      marks=pytest.mark.long),
         pytest.param("medusa", dict(k=3), id="medusa", marks=pytest.mark.long),
         pytest.param("hydra", dict(k=3), id="hydra", marks=pytest.mark.long)]


@pytest.mark.parametrize("name, kw", CASES)
def test_idle_steps_keep_outputs_and_drafts(target, prompts, plain, monkeypatch, name, kw):
    d = drafters.make(name, target, **kw)
    assert callable(getattr(d, "skip", None))
    pol = IdlePolicy(d.max_k)
    on = generate(target, prompts, max_new_tokens=24, drafter=d, policy=pol, batch_size=4)
    make_loop = engine.make_loop
    monkeypatch.setattr(engine, "make_loop", lambda *a, **k: dataclasses.replace(
        make_loop(*a, **k), idle_skip=False))
    off = generate(target, prompts, max_new_tokens=24, drafter=d, policy=pol, batch_size=4)
    assert on.tokens == plain and off.tokens == plain
    assert on.extra["drafted"] == off.extra["drafted"]
    assert on.extra["accepted_at"] == off.extra["accepted_at"]
    assert on.target_forwards == off.target_forwards
    assert sum(on.extra["accepted"]) > 0  # the drafts were good enough to compare
