"""``eagle_lookup`` (issue 21): the EAGLE head and prompt lookup side by side. Greedy identity
(batch 1, 3 and 8, mixed lengths, rows ending mid-step), lossless sampling (chi-square against
the exact law of an 8-token vocabulary), the per-row source choice, bad options. The head's
cache staying exact across lookup steps is checked in tests/test_eagle.py."""

import jax.numpy as jnp
import numpy as np
import pytest

from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law
from specjax import drafters, methods
from specjax.engine import generate
from specjax.errors import DrafterError
from specjax.sampling import SamplingParams


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(8, seed=13)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return generate(target, prompts, max_new_tokens=11, batch_size=8).tokens


def test_greedy_identical_with_both_sources_drafting(target, prompts, plain):
    d = drafters.make("eagle_lookup", target, k=3, lookup_k=6, draft_vocab=48)
    assert d.max_k == 6 and d.eagle_k == 3 and d.eagle.max_k == 6
    assert generate(target, prompts[:1], max_new_tokens=11, drafter=d).tokens == plain[:1]
    assert generate(target, prompts[:3], max_new_tokens=11, drafter=d,
                    batch_size=3).tokens == plain[:3]
    r8 = generate(target, prompts, max_new_tokens=11, drafter=d, batch_size=8)
    assert r8.tokens == plain
    head, look = r8.extra["eagle_lookup_head"], r8.extra["eagle_lookup_lookup"]
    assert sum(head) > 0 and sum(look) > 0  # repetitive prompts take lookup's chains
    # one source per match order, counted apart
    assert [a + b for a, b in zip(r8.extra["eagle_lookup_3gram"],
                                  r8.extra["eagle_lookup_2gram"])] == look
    # rows whose prompt repeats (odd rows) draft from lookup more than the others
    assert sum(look[1::2]) > sum(look[0::2])


def test_the_source_follows_the_estimates(target, prompts, plain):
    """A lookup prior near 0 with a large margin: the head alone drafts (the same drafts as the
    eagle method with the same head); a margin far below 0: lookup wherever it has a match."""
    only_head = drafters.make("eagle_lookup", target, k=3, prior_lookup=0.01, margin=5.0)
    r = generate(target, prompts, max_new_tokens=11, drafter=only_head, batch_size=8)
    assert r.tokens == plain and sum(r.extra["eagle_lookup_lookup"]) == 0
    eagle = drafters.make("eagle", target, k=3)
    e = generate(target, prompts, max_new_tokens=11, drafter=eagle, batch_size=8)
    assert [a[:3] for a in r.extra["accepted_at"]] == e.extra["accepted_at"]
    assert all(not any(a[3:]) for a in r.extra["accepted_at"])
    assert r.extra["drafted"] == e.extra["drafted"]
    lookup_first = drafters.make("eagle_lookup", target, k=3, margin=-100.0, min_gain=0.0)
    r = generate(target, prompts, max_new_tokens=11, drafter=lookup_first, batch_size=8)
    assert r.tokens == plain
    by_gain = generate(target, prompts, max_new_tokens=11, batch_size=8,
                       drafter=drafters.make("eagle_lookup", target, k=3, prior_lookup=0.2))
    assert sum(r.extra["eagle_lookup_lookup"]) > sum(by_gain.extra["eagle_lookup_lookup"])


@pytest.mark.parametrize("margin", [0.0, -100.0], ids=["by-gain", "lookup-first"])
def test_sampling_matches_the_target_distribution(margin):
    """Chi-square of the first three sampled tokens against the exact law (8-token
    vocabulary); the prompt repeats so lookup's one-hot drafts are verified next to the
    head's sampled ones."""
    target, _ = sharp_tiny_pair()
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    want = three_token_law(target, prompt)
    n = 6000
    d = drafters.make("eagle_lookup", target, k=2, lookup_k=3, margin=margin, seed=4,
                      prior_lookup=0.8)
    res = generate(target, [prompt] * n, max_new_tokens=4, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=5))
    assert sum(res.extra["eagle_lookup_lookup"]) > 0.05 * n
    if margin == 0.0:
        assert sum(res.extra["eagle_lookup_head"]) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_method_defaults_and_bad_options(target):
    m = methods.build("eagle_lookup", target, {})
    assert m.drafter.name == "eagle_lookup" and m.policy.name == "fixed"
    assert m.drafter.max_k == 8 and m.drafter.eagle_k == 3
    for bad, match in [(dict(k=0), "k"), (dict(min_ngram=3, max_ngram=2), "min_ngram"),
                       (dict(prior_lookup=1.0), "prior_lookup"), (dict(decay=0.0), "decay"),
                       (dict(min_gain=1.0), "min_gain"), (dict(quantize="int4"), "quantize")]:
        with pytest.raises(DrafterError, match=match):
            drafters.make("eagle_lookup", target, **bad)
