"""Speculative decoding: output equivalence with plain decoding, losslessness, cache invariants."""

import itertools
import types

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import drafters
from specjax.config import tiny_config
from specjax.drafters.base import DrafterError
from specjax.drafters.prompt_lookup import ngram_lookup
from specjax.engine import GenerationError, generate
from specjax.models.loaders import random_model
from specjax.sampling import SamplingParams
from specjax.verify import acceptance_probs, correction_dist, greedy_verify
from spec_helpers import (
    chi_square_check,
    check_cache_after_every_step,
    long_selected,
    make_target,
    mixed_prompts,
    noisy_copy,
    sharp_tiny_pair,
    three_token_law,
)


@pytest.fixture(scope="module")
def target():
    return make_target()


DRAFTERS = {
    "prompt_lookup": [dict(k=1), dict(k=4), dict(k=12, max_ngram=4, min_ngram=2)],
    "early_exit": [dict(k=1, exit_layer=1), dict(k=3, exit_layer=3)],
    "layer_skip": [dict(k=2), dict(k=5, skip_attn="1-2", skip_mlp="2")],
    "draft_model": [dict(k=8, layers=1), dict(k=3, layers=2)],
}
# the default run keeps the draft model's last option set (budget mid-step, several layers);
# the others run under -m long (the suite's time: each case compiles three batch sizes).
# Prompt lookup's greedy identity runs by default elsewhere (its adaptive pair in
# tests/test_extension_points.py, the mesh check, the exact-numerics checks); early exit's and
# layer skip's as trees (tests/test_tree.py::test_greedy_tree_decoding_equals_plain), DEL's
# per-row exits in tests/test_dynamic_exit.py
CASES = [pytest.param(name, kw, id=f"{name}-{kw}",
                      marks=() if i == len(kws) - 1 and name == "draft_model"
                      else pytest.mark.long)
         for name, kws in DRAFTERS.items() for i, kw in enumerate(kws)]


@pytest.mark.parametrize("name, kw", CASES)
def test_greedy_equals_plain_decoding(target, name, kw, request):
    ps = mixed_prompts(8, seed=1)
    # budget 16 with k up to 12: rows hit the budget in the middle of a step
    ref = generate(target, ps, max_new_tokens=16).tokens
    d = drafters.make(name, target, **kw)
    # batch 1 and 3 (a ragged last batch) by default; all 8 rows at once too under -m long
    for bs in ((1, 3, 8) if long_selected(request) else (1, 3)):
        res = generate(target, ps, max_new_tokens=16, drafter=d, batch_size=bs)
        assert res.tokens == ref, f"batch size {bs}"
        for toks, fw, acc in zip(res.tokens, res.target_forwards, res.extra["accepted"]):
            assert fw + acc == len(toks)  # every forward emits 1 + accepted tokens


# suite time: EOS and a full cache are the loop's, not the drafter's: prompt lookup by default,
# the draft model and the self-speculative drafters under -m long
@pytest.mark.parametrize("name", [n if n == "prompt_lookup" else  # the engine's EOS/cache logic
                                  pytest.param(n, marks=pytest.mark.long)
                                  for n in sorted(DRAFTERS)])
def test_eos_mid_step_and_cache_full(target, name):
    ps = mixed_prompts(4, seed=2)
    free = generate(target, ps, max_new_tokens=24).tokens
    eos = free[1][5]  # a token that appears mid-generation of row 1
    d = drafters.make(name, target, **DRAFTERS[name][-1])
    ref = generate(target, ps, max_new_tokens=24, eos_ids=[eos])
    got = generate(target, ps, max_new_tokens=24, eos_ids=[eos], drafter=d, batch_size=4)
    assert got.tokens == ref.tokens and got.stop_reason == ref.stop_reason
    # a cache too small for the budget: both stop at the same token
    ref = generate(target, ps, max_new_tokens=40, cache_len=48)
    got = generate(target, ps, max_new_tokens=40, cache_len=48, drafter=d, batch_size=2)
    assert got.tokens == ref.tokens and got.stop_reason == ref.stop_reason
    assert "cache_full" in got.stop_reason


def test_real_acceptance_happens(target):
    """Guard against a vacuous pass: the self-drafters accept tokens on repetitive text."""
    ps = [([5, 6, 7, 8] * 8)[:30]]
    res = generate(target, ps, max_new_tokens=24, drafter=drafters.make(
        "prompt_lookup", target, k=4))
    assert sum(res.extra["accepted"]) > 0
    # a draft model identical to the target accepts everything it drafts
    same = drafters.make("draft_model", target, k=3, draft_model=target)
    # a LoadedModel (what specjax.load returns) is taken as it is, not loaded again
    loaded = types.SimpleNamespace(model=target, tokenizer=None, source="in memory")
    assert drafters.make("draft_model", target, k=3, draft_model=loaded).description == \
        "given model (in memory)"
    res = generate(target, ps, max_new_tokens=24, drafter=same)
    assert res.extra["accepted"] == res.extra["drafted"]
    assert res.target_forwards[0] <= 24 // 4 + 1


def test_verify_buckets_dispatch_is_exact(target, monkeypatch):
    """The bucketed verify (a block of 1, 2, 4 or k + 1 tokens per step: the users' default)
    and one block of every node (the suite's SPECJAX_VERIFY_BUCKETS=max) give plain decoding's
    tokens with the same drafts and acceptances; a bad setting is a clear error."""
    from specjax import methods
    from specjax.engine import make_loop

    ps = [([5, 6, 7, 8] * 8)[:30], mixed_prompts(1, seed=3)[0], ([9, 4] * 9)[:17]]
    ref = generate(target, ps, max_new_tokens=20).tokens
    m = methods.build("prompt_lookup", target, {"k": "6"})  # adaptive: k varies per step
    runs = {}
    for mode in ("all", "max"):
        monkeypatch.setenv("SPECJAX_VERIFY_BUCKETS", mode)
        assert make_loop(target, drafter=m.drafter, policy=m.policy).verify_buckets == mode
        runs[mode] = generate(target, ps, max_new_tokens=20, drafter=m.drafter,
                              policy=m.policy, batch_size=3)
        assert runs[mode].tokens == ref, mode
    assert sum(runs["all"].extra["accepted"]) > 0
    for key in ("drafted_at", "accepted_at"):
        assert runs["all"].extra[key] == runs["max"].extra[key]
    monkeypatch.setenv("SPECJAX_VERIFY_BUCKETS", "some")
    with pytest.raises(GenerationError, match="SPECJAX_VERIFY_BUCKETS must be all or max"):
        make_loop(target, drafter=m.drafter, policy=m.policy)


# exact: until 2026-11-27 the exact numerics attended over a written copy of each layer's
# cache in every verify branch (docs/benchmarks_notes.md); they now read the block's own keys
@pytest.mark.parametrize("numerics", ["fast", "exact"])
def test_verify_step_copies_no_cache(numerics, monkeypatch):
    """The verify forward runs under a switch over block sizes: no layer's cache may be copied
    into or out of it. Counted in the compiled decode loop (the verify branches of a
    lax.switch copied every layer's keys and values on every step)."""
    import re

    from specjax import engine, methods

    monkeypatch.setenv("SPECJAX_VERIFY_BUCKETS", "all")
    t = make_target()
    t.set_numerics(numerics)
    m = methods.build("prompt_lookup", t, {"k": "6", "policy": "fixed"})
    S = 160  # a cache length no other buffer of the tiny model has
    r = generate(t, [[5, 6, 7, 8] * 4], max_new_tokens=6, cache_len=S, drafter=m.drafter,
                 policy=m.policy)
    assert r.tokens == generate(t, [[5, 6, 7, 8] * 4], max_new_tokens=6, cache_len=S).tokens
    progs = [c for key, c in engine.COMPILED._cache.items()
             if key[0] == id(engine._run_jit) and key[1].drafter is m.drafter]
    assert len(progs) == 1
    txt = progs[0].as_text()
    layer = rf"f32\[1,{t.cfg.num_kv_heads},{S},{t.cfg.head_dim}\]"  # [B, KVH, S, Dh]
    assert re.search(layer, txt)  # the pattern does name the cache's buffers
    assert re.findall(layer + r"\{[^}]*\} copy\(", txt) == []


# ----------------------------------------------------------------------------- cache invariant


CACHE_CASES = [("prompt_lookup", DRAFTERS["prompt_lookup"][-1]),
               ("early_exit", DRAFTERS["early_exit"][-1]),
               ("draft_model", DRAFTERS["draft_model"][-1]),
               ("layer_skip", DRAFTERS["layer_skip"][-1]),
               ("early_exit", dict(k=3, exit_layer=2, tree="dynamic")),
               ("draft_model", dict(k=2, layers=2, tree="topk")),
               # a draft model close to the target: full-depth acceptances, so the tree commit
               # has to move accepted nodes' draft-cache entries (skipping that move fails here)
               ("draft_model", dict(k=3, draft_model="noisy copy", tree="topk"))]


# suite time: by default one chain (prompt lookup), the dynamic tree and the noisy draft
# model's top-k tree (the commit's moves); the other chains and the plain top-k tree under long
_CACHE_DEFAULT = (0, 4, 6)
@pytest.mark.parametrize("name, kw", [
    pytest.param(n, kw, marks=() if i in _CACHE_DEFAULT else pytest.mark.long,
                 id=f"{n}-{kw.get('tree', 'chain')}" + ("-noisy" if "draft_model" in kw else ""))
    for i, (n, kw) in enumerate(CACHE_CASES)])
def test_cache_matches_plain_prefix_after_every_step(target, name, kw):
    """After every committed step (and at budgets that stop rows mid-step), every row's
    committed target cache equals the cache plain decoding builds (chains commit a prefix,
    trees gather the accepted path); a draft model's own cache is checked too."""
    budgets = (1, 2, 9) if "tree" not in kw else (7,)
    if kw.get("draft_model") == "noisy copy":  # accepts 3 of 3 about every other step
        kw, budgets = {**kw, "draft_model": noisy_copy(target, 0.01)}, (12,)
    check_cache_after_every_step(target, drafters.make(name, target, **kw), budgets)


# ----------------------------------------------------------------------------- verify rules


def test_greedy_verify_rule():
    draft = jnp.array([[3, 4, 5], [3, 9, 5], [1, 1, 1]])
    target_argmax = jnp.array([[3, 4, 5, 6], [3, 4, 5, 6], [2, 2, 2, 2]])
    n_acc, nxt = greedy_verify(draft, jnp.array([3, 3, 3]), target_argmax)
    assert n_acc.tolist() == [3, 1, 0] and nxt.tolist() == [6, 4, 2]
    n_acc, nxt = greedy_verify(draft, jnp.array([2, 3, 0]), target_argmax)
    assert n_acc.tolist() == [2, 1, 0] and nxt.tolist() == [5, 4, 2]


def _rand_dist(rng, shape):
    x = rng.gamma(0.5, size=shape)
    x[..., 0] = 0.0 if len(shape) and rng.random() < 0.5 else x[..., 0]  # some zero mass
    return x / x.sum(-1, keepdims=True)


@pytest.mark.parametrize("deterministic", [False, True])
def test_lossless_by_exact_enumeration(deterministic):
    """One speculative step with K=2 on an 8-token vocabulary, enumerated exactly.

    Target conditionals p(x1), p(x2|x1), p(x3|x1,x2) and draft conditionals q(.|.) are random
    tables. Summing over every draft and accept/reject outcome (acceptance probabilities and
    correction distributions from specjax.verify) gives the distribution of the first two output
    tokens, which must equal p(x1) p(x2|x1) (when the step emits one token the next step samples
    x2 from the target).
    """
    V, K = 8, 2
    rng = np.random.default_rng(0)
    p1 = _rand_dist(rng, (V,))
    p2 = _rand_dist(rng, (V, V))
    p3 = _rand_dist(rng, (V, V, V))
    q1 = _rand_dist(rng, (V,))
    q2 = _rand_dist(rng, (V, V))
    want = p1[:, None] * p2
    got = np.zeros((V, V))
    for d1, d2 in itertools.product(range(V), range(V)):
        if deterministic:  # a deterministic drafter proposes one fixed chain
            if (d1, d2) != (3, 5):
                continue
            pd, qarr = 1.0, None
        else:
            pd = q1[d1] * q2[d1, d2]
            if pd == 0:
                continue
            qarr = jnp.asarray(np.stack([q1, q2[d1]])[None], jnp.float32)
        draft = jnp.array([[d1, d2]], jnp.int32)
        p = jnp.asarray(np.stack([p1, p2[d1], p3[d1, d2]])[None], jnp.float32)
        a = np.asarray(acceptance_probs(draft, p, qarr))[0].astype(np.float64)
        nd = jnp.array([K])
        # n_acc = 0: reject d1 -> x1 ~ residual, then x2 from the target
        r0 = np.asarray(correction_dist(draft, nd, jnp.array([0]), p, qarr))[0]
        got += pd * (1 - a[0]) * r0[:, None] * p2
        # n_acc = 1: accept d1, reject d2 -> x2 ~ residual
        r1 = np.asarray(correction_dist(draft, nd, jnp.array([1]), p, qarr))[0]
        got[d1] += pd * a[0] * (1 - a[1]) * r1
        # n_acc = 2: both accepted; the first two tokens are (d1, d2)
        got[d1, d2] += pd * a[0] * a[1]
    np.testing.assert_allclose(got, want, atol=1e-6)


SAMPLING_CASES = [dict(k=3), dict(k=1), dict(k=2, tree="fixed:0,1,2,0.0,1.0"),
                  dict(k=2, tree="levels:2.2:iid"), dict(k=2, tree="topk")]


# suite time: chain k=1, independent siblings and the top-k tree under -m long (a chain and a
# tree drawn without replacement run; every multi-draft rule is enumerated exactly in
# tests/test_tree.py::test_multi_draft_rule_exact_by_enumeration)
@pytest.mark.parametrize("kw", [
    pytest.param(kw, id=kw.get("tree", "chain") + f"-k{kw['k']}",
                 marks=pytest.mark.long if kw in (dict(k=1), dict(k=2, tree="levels:2.2:iid"),
                                                  dict(k=2, tree="topk")) else ())
    for kw in SAMPLING_CASES])
def test_sampled_sequences_match_target_distribution(kw):
    """Chi-square of the first three sampled tokens (spec vs the exact target law): a chain,
    a fixed tree with siblings drawn without replacement, one with independent siblings
    (SpecInfer) and a top-k tree (deterministic candidates).

    The first token comes from the prefill, the next two from the first speculative step.
    With 5 new tokens that step drafts k (<= 3) tokens, so tokens 2 and 3 go through
    acceptance or correction at draft positions 1 and 2; with k = 1 and 3 new tokens, token 3
    is the bonus token drawn after an accepted draft."""
    target, draft = sharp_tiny_pair()
    prompt = [1, 2, 3]
    want = three_token_law(target, prompt)
    n = 12000 if "tree" not in kw else 8000
    d = drafters.make("draft_model", target, draft_model=draft, **kw)
    res = generate(target, [prompt] * n, max_new_tokens=3 if kw["k"] == 1 else 5,
                   batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=3 if "tree" not in kw else 11))
    at = res.extra["accepted_at"]  # per row, accepted tokens by draft position
    assert sum(a[0] for a in at) > 0.1 * n  # the spec path really accepted drafts
    if kw["k"] > 1:
        assert sum(a[1] for a in at) > 0.02 * n  # ... at the second position too
    chi_square_check([t[:3] for t in res.tokens], want)


def test_sampling_with_prompt_lookup_is_seeded(target):
    ps = mixed_prompts(3, seed=4)
    d = drafters.make("prompt_lookup", target, k=4)
    sp = SamplingParams(temperature=0.8, top_k=20, seed=9)
    a = generate(target, ps, max_new_tokens=12, drafter=d, sampling=sp).tokens
    b = generate(target, ps, max_new_tokens=12, drafter=d, sampling=sp).tokens
    assert a == b


# ----------------------------------------------------------------------------- prompt lookup


def test_ngram_lookup_finds_latest_longest_match():
    seq = jnp.array([[1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3, 0, 0]])
    toks, n = ngram_lookup(seq, jnp.array([12]), K=3, max_ngram=3, min_ngram=1)
    # suffix (1, 2, 3): latest earlier occurrence at 4 -> continuation 7, 8, 1
    assert n.tolist() == [3] and toks[0].tolist() == [7, 8, 1]
    toks, n = ngram_lookup(jnp.array([[5, 6, 7, 0]]), jnp.array([3]), K=2, max_ngram=2,
                           min_ngram=1)
    assert n.tolist() == [0]
    # a match near the end offers fewer than K tokens
    toks, n = ngram_lookup(jnp.array([[4, 5, 4, 0]]), jnp.array([3]), K=4, max_ngram=1,
                           min_ngram=1)
    assert n.tolist() == [2] and toks[0, :2].tolist() == [5, 4]


# ----------------------------------------------------------------------------- bad inputs


def test_bad_drafter_configs(target):
    other = random_model(tiny_config(vocab_size=32, num_layers=2), seed=1)
    with pytest.raises(DrafterError, match="vocabulary .*32.* differs .*64"):
        drafters.make("draft_model", target, draft_model=other)
    with pytest.raises(DrafterError, match="k .* must be an integer >= 1"):
        drafters.make("prompt_lookup", target, k=0)
    with pytest.raises(DrafterError, match="exit_layer must be an integer in \\[1, 3\\]"):
        drafters.make("early_exit", target, exit_layer=4)
    with pytest.raises(DrafterError, match="exit_layer"):
        drafters.make("early_exit", target, exit_layer=0)
    with pytest.raises(DrafterError, match="skips every sublayer"):
        drafters.make("layer_skip", target, skip_attn="0-3", skip_mlp="0-3")
    with pytest.raises(DrafterError, match="outside"):
        drafters.make("layer_skip", target, skip_attn="7")
    with pytest.raises(DrafterError, match="unknown drafter 'telepathy'"):
        drafters.make("telepathy", target)
    with pytest.raises(GenerationError, match="unknown verifier"):
        generate(target, [[1, 2]], max_new_tokens=2, verifier="psychic",
                 drafter=drafters.make("prompt_lookup", target))
