"""The EAGLE drafter (EAGLE-1 and EAGLE-3 heads) on tiny random targets with random heads:
greedy identity, the head cache and pending features after every step, lossless sampling,
and head files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from spec_helpers import IdlePolicy, chi_square_check, make_target, mixed_prompts, \
    sharp_tiny_pair, three_token_law

from specjax import drafters
from specjax.engine import generate, make_loop
from specjax.errors import CheckpointError, DrafterError
from specjax.heads.eagle import EagleHeadConfig, default_feature_layers, init_head
from specjax.heads.io import load_eagle_head, save_eagle_head
from specjax.loop import prefill_jit, run_jit
from specjax.sampling import SamplingParams
from specjax.verifiers import SamplingArrays


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(8, seed=13)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return [generate(target, [p], max_new_tokens=9).tokens[0] for p in prompts]


# the fixed-tree case runs under -m long (the suite's time): trees are checked by the dynamic one;
# so does EAGLE-3's chain (EAGLE-1's chain runs, EAGLE-3's chain under every policy in
# tests/test_extension_points.py's every-pair test, and the shipped EAGLE-3 head's on the real
# model in tests/test_shipped_heads.py)
CASES = [pytest.param(dict(), id="eagle3-chain", marks=pytest.mark.long),
         pytest.param(dict(variant="eagle1"), id="eagle1-chain"),
         pytest.param(dict(tree="dynamic:width=2,nodes=6"), id="eagle3-dynamic"),
         pytest.param(dict(tree="fixed:0,1,0.0,1.0", variant="eagle1"), id="eagle1-fixed",
                      marks=pytest.mark.long)]


@pytest.mark.parametrize("kw", CASES)
def test_eagle_is_greedy_identical(target, prompts, plain, kw):
    """Batch 1, 3 and 8 with mixed prompt lengths and budgets that end rows mid-step."""
    d = drafters.make("eagle", target, k=3, draft_vocab=48, **kw)
    assert generate(target, prompts[:1], max_new_tokens=9, drafter=d).tokens == plain[:1]
    r3 = generate(target, prompts[:3], max_new_tokens=9, drafter=d, batch_size=3)
    assert r3.tokens == plain[:3]
    r8 = generate(target, prompts, max_new_tokens=9, drafter=d, batch_size=8)
    assert r8.tokens == plain and sum(r8.extra["drafted"]) > 0


def test_w8a8_head_drafts_with_int8_matrices_and_stays_exact(target, prompts, plain):
    """quantize=w8a8: all six matrices int8 with row scales, logits close to the float
    head's (not equal: the products really run in int8), outputs still plain decoding's."""
    d = drafters.make("eagle", target, k=3, draft_vocab=48, quantize="w8a8")
    f = drafters.make("eagle", target, k=3, draft_vocab=48, quantize="none")
    assert sum(x.dtype == jnp.int8 for x in jax.tree.leaves(d.params()["head"])) == 6
    assert not any(x.dtype == jnp.int8 for x in jax.tree.leaves(f.params()["head"]))
    auto = drafters.make("eagle", target, k=3, draft_vocab=48)  # auto: w8a8 on a CPU only
    assert ("w8a8" in auto.description) == (jax.default_backend() == "cpu")
    assert "w8a8" in d.description
    r = generate(target, prompts[:3], max_new_tokens=9, drafter=d, batch_size=3)
    assert r.tokens == plain[:3] and sum(r.extra["drafted"]) > 0
    hq = nnx.merge(d.graphdef, d.params()["head"])
    hf = nnx.merge(f.graphdef, f.params()["head"])
    x = jax.random.normal(jax.random.key(0), (2, hf.cfg.hidden_size))
    lq, lf = np.asarray(hq.logits(x)), np.asarray(hf.logits(x))
    assert 0 < np.max(np.abs(lq - lf)) < 0.05 * np.max(np.abs(lf))
    with pytest.raises(DrafterError, match="quantize"):
        drafters.make("eagle", target, quantize="int4")


def test_default_feature_layers():
    assert default_feature_layers(30) == (1, 14, 26)  # the inputs of layers 2, L/2, L - 3
    assert default_feature_layers(4) == (0, 2, 3)
    with pytest.raises(DrafterError, match="fuses 3 target layers"):
        EagleHeadConfig.for_target(make_target().cfg, "eagle3", feature_layers=(1, 2))


@pytest.mark.parametrize("tree, idle, method", [
    (None, False, "eagle"), ("dynamic:width=2,nodes=5", False, "eagle"), (None, True, "eagle"),
    (None, False, "eagle_lookup")], ids=["chain", "tree", "chain-idle", "eagle_lookup"])
def test_head_cache_and_pending_features_after_every_step(target, tree, idle, method):
    """After every step the head's committed cache equals one head forward over all committed
    pairs (g_t, x_{t+1}) built from a plain target forward, and the pending features are the
    target's features of the last committed positions: the head drafts exactly what a head
    run from scratch on the committed text would. ``idle``: under a policy with runs of six
    steps where no row drafts (``skip``: pending pairs pile up, the buffer is flushed into
    the head cache when full). ``eagle_lookup``: steps where prompt lookup drafts instead of
    the head (its chains commit up to 9 tokens a step) keep the head exact too."""
    if method == "eagle":
        d = drafters.make("eagle", target, k=3, tree=tree)
        hd, of = d, (lambda s: s)
    else:
        d = drafters.make("eagle_lookup", target, k=3, lookup_k=8, prior_lookup=0.9)
        hd, of = d.eagle, (lambda s: s["eagle"])
    head = nnx.merge(hd.graphdef, d.params()["head"])
    loop = make_loop(target, drafter=d, policy=IdlePolicy(d.max_k) if idle else None)
    _, params = nnx.split(target)
    ps = mixed_prompts(3, seed=2)
    B, P, S = 3, 32, 64
    toks = np.zeros((B, P), np.int32)
    for i, p in enumerate(ps):
        toks[i, :len(p)] = p
    lens = np.array([len(p) for p in ps], np.int32)
    arrays = SamplingArrays(jnp.float32(1.0), jnp.int32(0), jnp.float32(1.0))
    st = prefill_jit(loop, params, d.params(), toks, lens, jnp.full((B,), 14),
                     jnp.zeros((B, 2), jnp.uint32), arrays, cache_len=S)
    layers = hd.head_cfg.feature_layers

    @jax.jit
    def reference(seq):  # a plain target forward, then the head over every pair from scratch
        o = target(seq, jnp.broadcast_to(jnp.arange(S)[None], (B, S)), target.init_cache(B, S),
                   hidden_layers=layers)
        g = head.fuse(jnp.concatenate(o.hidden, -1))
        nxt = jnp.concatenate([seq[:, 1:], jnp.zeros((B, 1), jnp.int32)], 1)
        emb = jnp.take(target.embed[...], nxt, axis=0)
        _, _, ref = head(emb, g, jnp.broadcast_to(jnp.arange(S)[None], (B, S)),
                         head.init_cache(B, S), prefix_empty=True, compute_logits=False)
        return g, ref

    steps, flushed, prev = 0, False, np.zeros(B, np.int32)
    while not bool(np.asarray(st.done).all()):
        st = run_jit(loop, params, d.params(), st, arrays, jnp.int32(int(st.step) + 1))
        steps += 1
        seq, seq_len = np.asarray(st.seq), np.asarray(st.seq_len)
        g, ref = reference(jnp.asarray(seq[:, :S]))
        ds = of(st.draft_state)
        start, npend = np.asarray(ds.pend_start), np.asarray(ds.pend_n)
        for b in range(B):
            if bool(np.asarray(st.done)[b]):
                continue
            n = seq_len[b] - 1
            assert start[b] + npend[b] == n, (b, start[b], npend[b], n)
            np.testing.assert_allclose(np.asarray(ds.cache.k[0][b, :, :start[b]]),
                                       np.asarray(ref.k[0][b, :, :start[b]]), atol=2e-5)
            np.testing.assert_allclose(np.asarray(ds.cache.v[0][b, :, :start[b]]),
                                       np.asarray(ref.v[0][b, :, :start[b]]), atol=2e-5)
            np.testing.assert_allclose(np.asarray(ds.pend_feat[b, :npend[b]]),
                                       np.asarray(g[b, start[b]:n]), atol=2e-5)
            flushed |= bool(prev[b] == 4 and npend[b] == 1)  # a full buffer written
        prev = npend
    assert steps >= (10 if idle else 3)
    assert flushed or not idle
    if method == "eagle_lookup":  # both sources drafted
        chosen = np.asarray(st.draft_state["chosen"]).sum(0)
        assert chosen[0] > 0 and chosen[1:].sum() > 0, chosen


@pytest.mark.parametrize("kw", [dict(k=2), dict(k=2, tree="fixed:0,1,0.0"),
                                dict(k=2, draft_vocab=6)],
                         ids=["chain", "fixed-tree", "chain-draft-vocab-6-of-8"])
def test_eagle_sampling_matches_the_target_distribution(kw):
    """Chi-square of the first three sampled tokens against the exact law (8-token
    vocabulary); the random head's drafts are accepted often enough to exercise the rule."""
    target, _ = sharp_tiny_pair()
    prompt = [1, 2, 3]
    want = three_token_law(target, prompt)
    n = 8000
    d = drafters.make("eagle", target, seed=4, **kw)
    res = generate(target, [prompt] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=5))
    at = res.extra["accepted_at"]
    assert sum(a[0] for a in at) > 0.05 * n and sum(a[1] for a in at) > 0.01 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_head_files_round_trip_and_errors(target, prompts, plain, tmp_path):
    cfg = EagleHeadConfig.for_target(target.cfg, "eagle3", draft_vocab=40)
    ids = np.random.default_rng(0).permutation(64)[:40]
    graphdef, state, draft_ids = init_head(cfg, target, ids, seed=3)
    path = save_eagle_head(tmp_path / "head", cfg, state, draft_ids, meta={"step": 7})
    d = drafters.make("eagle", target, k=3, head=str(path), quantize="none")
    assert d.description.endswith("(step 7)")
    assert np.array_equal(np.asarray(d.params()["draft_ids"]), ids)
    saved = dict(nnx.to_flat_state(state))
    for key, leaf in nnx.to_flat_state(d.params()["head"]):  # the weights that were saved
        assert np.array_equal(np.asarray(leaf.get_value()), np.asarray(saved[key].get_value()))
    r1 = generate(target, prompts[:3], max_new_tokens=9, drafter=d, batch_size=3)
    assert r1.tokens == plain[:3]
    # a head for another target
    from specjax.config import tiny_config
    from specjax.models.loaders import random_model

    bigger = random_model(tiny_config(vocab_size=64, num_layers=6), seed=1)
    with pytest.raises(CheckpointError, match="num_layers = 4; the loaded target has 6"):
        load_eagle_head(path, bigger)
    # a truncated weights file
    w = path / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="model.safetensors: unreadable or truncated"):
        load_eagle_head(path, target)
    # a draft map outside the vocabulary
    save_eagle_head(tmp_path / "bad", cfg, state, draft_ids)
    from safetensors.numpy import load_file, save_file

    t = load_file(str(tmp_path / "bad" / "model.safetensors"))
    t["draft_ids"] = np.full((40,), 99, np.int32)
    save_file(t, str(tmp_path / "bad" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="draft_ids must hold 40 distinct target ids"):
        load_eagle_head(tmp_path / "bad", target)
    conf = tmp_path / "bad" / "config.json"
    conf.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CheckpointError, match="not a specjax EAGLE head"):
        load_eagle_head(tmp_path / "bad", target)
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_eagle_head(tmp_path / "nothing", target)
