"""Idle steps: where the policy gives every row ``k = 0``, the loop leaves a drafter that has a
``skip`` method out of the step (``DecodeLoop.idle_skip``): no proposal, no update, the
drafter records the committed token (the EAGLE head defers its pass). Outputs equal plain
decoding, and every draft equals the one of the loop that proposes and updates each step
(same acceptances by position, row for row). The EAGLE head's cache after every idle step is
checked in tests/test_eagle.py (``chain-idle``)."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from spec_helpers import IdlePolicy, mixed_prompts, sharp_tiny_pair

from specjax import drafters
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
         pytest.param("hydra", dict(k=3), id="hydra", marks=pytest.mark.long),
         # the draft model catches up on the tokens of its idle steps when it next drafts;
         # the self-speculative drafters read the target cache: their skip records nothing
         pytest.param("draft_model", dict(k=3), id="draft_model"),
         pytest.param("draft_model", dict(k=3, tree="topk:width=2"), id="draft_model-tree",
                      marks=pytest.mark.long),
         pytest.param("early_exit", dict(k=3, exit_layer=1), id="early_exit"),
         pytest.param("layer_skip", dict(k=3), id="layer_skip", marks=pytest.mark.long)]


@pytest.mark.parametrize("name, kw", CASES)
def test_idle_steps_keep_outputs_and_drafts(target, prompts, plain, monkeypatch, name, kw):
    d = drafters.make(name, target, **kw)
    assert callable(getattr(d, "skip", None))
    pol = IdlePolicy(d.max_k)
    on = generate(target, prompts, max_new_tokens=24, drafter=d, policy=pol, batch_size=4)
    monkeypatch.setenv("SPECJAX_IDLE_STEPS", "off")
    off = generate(target, prompts, max_new_tokens=24, drafter=d, policy=pol, batch_size=4)
    assert on.tokens == plain and off.tokens == plain
    assert on.extra["drafted"] == off.extra["drafted"]
    assert on.extra["accepted_at"] == off.extra["accepted_at"]
    assert on.target_forwards == off.target_forwards
    assert sum(on.extra["accepted"]) > 0  # the drafts were good enough to compare


def test_draft_model_catch_up_fills_the_cache_as_a_prefill():
    """``catch_up`` brings each row's draft cache from its own ``lengths`` to ``need`` in
    chunks (rows 40 and 3 tokens behind, one already there: several forwards, overlapping
    rewrites): the entries before ``need`` equal a prefill of the sequence."""
    from specjax.config import tiny_config
    from specjax.drafters.draft_model import CATCH_UP, catch_up
    from specjax.models.loaders import random_model

    m = random_model(tiny_config(vocab_size=32, num_layers=2), seed=3)
    B, S = 3, 64
    seq = jax.random.randint(jax.random.key(0), (B, S), 0, 32, dtype=jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32)[None], (B, S))
    full = m(seq, pos, m.init_cache(B, S), compute_logits=False, prefix_empty=True).cache
    need = jnp.array([50, 30, 20], jnp.int32)
    have = jnp.array([10, 27, 20], jnp.int32)
    assert int(jnp.max(need - have)) > 2 * CATCH_UP  # several chunks for row 0
    part = m(seq, pos, m.init_cache(B, S), compute_logits=False, prefix_empty=True).cache
    part = part.with_lengths(have)
    # entries past each row's `have` hold garbage that catch_up must overwrite
    junk = lambda a: jnp.where(jnp.arange(S)[None, None, :, None] >= have[:, None, None, None],
                               7.0, a)
    part = dataclasses.replace(part, k=tuple(map(junk, part.k)), v=tuple(map(junk, part.v)))
    out = jax.jit(lambda c: catch_up(m, c, seq, need))(part)
    assert out.lengths.tolist() == need.tolist()
    for b in range(B):
        n = int(need[b])
        for a, f in zip(out.k + out.v, full.k + full.v):
            np.testing.assert_allclose(a[b, :, :n], f[b, :, :n], rtol=1e-5, atol=1e-5)


def test_draft_model_of_the_target_layers_takes_their_cache():
    """The default draft model (the target's first blocks) runs no prefill: a row more than
    ``CATCH_UP`` tokens behind takes those layers of the target cache, whose entries equal
    the draft model's own prefill; rows all within ``CATCH_UP`` are fed as before (a junk
    target cache is then not read). In the loop its drafts are those of the drafter that
    prefills its own cache, and the outputs plain decoding's."""
    from specjax.config import tiny_config
    from specjax.drafters.draft_model import CATCH_UP, catch_up, truncated_copy
    from specjax.models.loaders import random_model

    t = random_model(tiny_config(vocab_size=32, num_layers=3), seed=4)
    m = truncated_copy(t, 2)
    B, S = 2, 64
    seq = jax.random.randint(jax.random.key(1), (B, S), 0, 32, dtype=jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32)[None], (B, S))
    tc = t(seq, pos, t.init_cache(B, S), compute_logits=False, prefix_empty=True).cache
    own = m(seq, pos, m.init_cache(B, S), compute_logits=False, prefix_empty=True).cache
    need = jnp.array([40, 12], jnp.int32)
    tc = tc.with_lengths(need + 1)  # the committed tokens, up to the pending one
    run = jax.jit(lambda c, tcache: catch_up(m, c, seq, need, tcache))
    out = run(m.init_cache(B, S), tc)
    assert out.lengths.tolist() == need.tolist()
    for b in range(B):
        n = int(need[b])
        for a, f in zip(out.k + out.v, own.k + own.v):
            np.testing.assert_allclose(a[b, :, :n], f[b, :, :n], rtol=1e-5, atol=1e-5)
    # every row within CATCH_UP: fed through the draft model, the target cache not read
    near = dataclasses.replace(tc, k=tuple(jnp.full_like(a, 7.0) for a in tc.k),
                               v=tuple(jnp.full_like(a, 7.0) for a in tc.v))
    have = need - CATCH_UP + 1
    out = run(own.with_lengths(have), near)
    for b in range(B):
        n = int(need[b])
        for a, f in zip(out.k + out.v, own.k + own.v):
            np.testing.assert_allclose(a[b, :, :n], f[b, :, :n], rtol=1e-5, atol=1e-5)
    # in the loop
    target = sharp_tiny_pair()[0]
    prompts = [[x % 8 for x in p] for p in mixed_prompts(3, seed=2)]
    d = drafters.make("draft_model", target, k=3, layers=1)
    assert d.target_layers == 1
    shared = generate(target, prompts, max_new_tokens=24, drafter=d, batch_size=3)
    own_prefill = generate(target, prompts, max_new_tokens=24, batch_size=3,
                           drafter=dataclasses.replace(d, target_layers=0))
    assert shared.tokens == generate(target, prompts, max_new_tokens=24).tokens
    assert shared.tokens == own_prefill.tokens
    assert shared.extra["accepted_at"] == own_prefill.extra["accepted_at"]
    assert sum(shared.extra["drafted"]) > 0


@pytest.mark.parametrize("name, kw", [
    pytest.param("prompt_lookup", dict(k=3, policy="fixed"), id="prompt_lookup-fixed"),
    pytest.param("ngram", dict(k=3, sources="prompt_lookup,token_recycling",
                               cost="1,1.2,1.4,1.6"), id="ngram")])
def test_drafter_plan_turns_steps_without_a_draft_into_idle_steps(
        target, prompts, plain, monkeypatch, name, kw):
    """A drafter with ``plan`` looks before the step: where no row finds a draft, the step is
    an idle step even under ``fixed`` (which never gives k = 0 itself). Same outputs, drafts
    and forwards as the loop that verifies the pending token alone; idle steps counted."""
    from specjax import methods

    args = {key: str(v) for key, v in kw.items()}
    m = methods.build(name, target, args)
    assert callable(getattr(m.drafter, "plan", None))
    run = dict(max_new_tokens=24, drafter=m.drafter, policy=m.policy, batch_size=1)
    # batch 1: every step without a match is idle; with several rows all must miss
    on = generate(target, prompts, **run)
    monkeypatch.setenv("SPECJAX_IDLE_STEPS", "off")
    off = generate(target, prompts, **run)
    assert on.tokens == plain and off.tokens == plain
    assert on.extra["drafted"] == off.extra["drafted"]
    assert on.extra["accepted_at"] == off.extra["accepted_at"]
    assert on.target_forwards == off.target_forwards
    assert sum(on.extra["accepted"]) > 0
    assert sum(on.extra["idle_steps"]) > 0 and sum(off.extra["idle_steps"]) == 0


def test_idle_steps_setting(target, monkeypatch):
    """``SPECJAX_IDLE_STEPS`` sets the loop's ``idle_skip``; ``engine.idle_steps`` sets it
    within a block and restores it; another value is an error naming the variable."""
    from specjax.engine import idle_steps, make_loop
    from specjax.errors import GenerationError

    d = drafters.make("prompt_lookup", target, k=3)
    monkeypatch.delenv("SPECJAX_IDLE_STEPS", raising=False)
    assert make_loop(target, drafter=d).idle_skip
    with idle_steps(False):
        assert not make_loop(target, drafter=d).idle_skip
    assert "SPECJAX_IDLE_STEPS" not in os.environ
    monkeypatch.setenv("SPECJAX_IDLE_STEPS", "off")
    with idle_steps(True):
        assert make_loop(target, drafter=d).idle_skip
    assert not make_loop(target, drafter=d).idle_skip
    monkeypatch.setenv("SPECJAX_IDLE_STEPS", "sometimes")
    with pytest.raises(GenerationError, match="SPECJAX_IDLE_STEPS must be on or off"):
        make_loop(target, drafter=d)
