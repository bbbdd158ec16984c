"""Invariant ("exact") numerics: a token's logits do not depend on how many tokens or rows share
its forward, in float32, bfloat16 and w8a8 (specjax.models.numerics).

Every check is bit-for-bit (``np.array_equal``), against one-token decoding of the same model in
the same numerics."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from spec_helpers import mixed_prompts

from specjax import methods
from specjax.config import tiny_config
from specjax.engine import generate
from specjax.models import numerics
from specjax.models.loaders import random_model
from specjax.models.quant import quantize
from specjax.tree import ancestor_mask

PRECISIONS = ("float32", "bfloat16", "w8a8")
LONG = pytest.mark.long


def grid(cases, quick):
    """``cases`` as parameters, those not in ``quick`` marked ``long`` (the default run keeps
    a few minutes; ``pytest -m long`` runs the rest)."""
    return [c if c in quick else pytest.param(*c if isinstance(c, tuple) else (c,),
                                              marks=LONG) for c in cases]


def exact_model(precision: str, seed: int = 1, **cfg):
    cfg = tiny_config(**{"vocab_size": 96, "num_layers": 2, **cfg})
    model = random_model(cfg, seed=seed,
                         dtype=jnp.bfloat16 if precision == "bfloat16" else jnp.float32)
    if precision == "w8a8":
        model = quantize(model)
    model.set_numerics("exact")
    return model


# ----------------------------------------------------------------------------- pieces


def test_fixed_sum_order_does_not_depend_on_other_dimensions():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((7, 5, 576)), jnp.float32)
    full = np.asarray(numerics.fixed_sum(x, -1))
    for i in range(7):  # each row alone, and in a batch of two
        assert np.array_equal(np.asarray(numerics.fixed_sum(x[i:i + 1], -1))[0], full[i])
        assert np.array_equal(np.asarray(numerics.fixed_sum(x[i, :1], -1))[0], full[i, 0])
    np.testing.assert_allclose(full, np.asarray(x).sum(-1), rtol=1e-5, atol=1e-5)
    assert numerics.fixed_sum(jnp.ones((3, 1)), -1).shape == (3,)


def test_cache_axis_sum_does_not_depend_on_the_cache_length():
    """The softmax sum over a cache row: zeros appended to the axis (the same row in a longer
    cache) leave its bits as they are, at any length; ``fixed_sum``'s tree is not like that
    (its halving pairs entry i with i + n/2), which made a row's logits depend on the cache
    length its batch chose until 2026-12-02."""
    rng = np.random.default_rng(3)
    x = rng.random((4, 3, 200)).astype(np.float32)  # positive, as softmax terms
    ref = np.asarray(numerics.cache_axis_sum(jnp.asarray(x), -1))
    differs = False
    for n in (200, 256, 320, 384, 512, 896, 1000):
        padded = jnp.asarray(np.pad(x, ((0, 0), (0, 0), (0, n - 200))))
        assert np.array_equal(np.asarray(numerics.cache_axis_sum(padded, -1)), ref), n
        differs |= not np.array_equal(np.asarray(numerics.fixed_sum(padded, -1)), ref)
    assert differs  # the check can fail: fixed_sum's bits move with the length
    np.testing.assert_allclose(ref, x.sum(-1), rtol=1e-5)


# float32 in the default run: on this tiny model it is the precision where the old sum moved
# logits (bfloat16 rounded the difference away; w8a8 moved 14 rows)
@pytest.mark.parametrize("precision", grid(PRECISIONS, quick=["float32"]))
def test_a_rows_logits_do_not_depend_on_the_cache_length(precision):
    """A 200-token prefill's logits, bit for bit, in caches of 256, 320, 384, 512 and 896
    positions (a batch sizes the cache for its longest prompt; the row's attention reads past
    position 128, where a length-dependent sum tree pairs other entries)."""
    model = exact_model(precision, num_layers=2)
    T = 200
    toks = jnp.asarray(np.random.default_rng(4).integers(0, 96, (1, T)), jnp.int32)
    pos = jnp.arange(T, dtype=jnp.int32)[None]
    fwd = jax.jit(lambda t, c: model(t, pos, c, prefix_empty=True).logits,
                  compiler_options=numerics.EXACT_COMPILER_OPTIONS)
    ref = np.asarray(fwd(toks, model.init_cache(1, 256)), np.float32)
    for S in (320, 384, 512, 896):
        got = np.asarray(fwd(toks, model.init_cache(1, S)), np.float32)
        assert np.array_equal(got, ref), (precision, S, int((got != ref).any(-1).sum()))


def test_prefill_attention_is_the_same_in_every_prefill():
    """The prefill's attention (``prefill=True``: every key through the product over the
    cache row, no tail) gives a prompt row the same bits in a longer padded prompt, another
    cache length and a batch, and agrees with the general form to rounding."""
    rng = np.random.default_rng(11)
    kvh, G, hd = 2, 2, 16
    f = jax.jit(numerics.exact_attention, static_argnames=("dtype", "prefill"))

    def attend(q, k, v, S, B):
        T = q.shape[1]
        pad = ((0, 0), (0, S - T), (0, 0), (0, 0))
        mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool))[None], (B, T, T))
        # the cache is [B, KVH, S, Dh]
        kc, vc = (jnp.swapaxes(jnp.pad(a, pad), 1, 2) for a in (k, v))
        L = jnp.zeros((B,), jnp.int32)
        return (np.asarray(f(q, kc, vc, L, mask, dtype=jnp.float32, prefill=True)),
                np.asarray(f(q, kc, vc, L, mask, dtype=jnp.float32)))

    q, k, v = (jnp.asarray(rng.standard_normal((2, 8, n, hd)), jnp.float32)
               for n in (kvh * G, kvh, kvh))
    ref, general = attend(q[:1, :6], k[:1, :6], v[:1, :6], 24, 1)  # row 0 alone, 6 tokens
    np.testing.assert_allclose(ref, general, rtol=1e-5, atol=1e-6)
    for S in (24, 40):  # batched with a longer row (8 tokens), in two cache lengths
        got, _ = attend(q, k, v, S, 2)
        assert np.array_equal(got[0, :6], ref[0]), S
    with pytest.raises(ValueError, match="a prefill attends over the written cache"):
        numerics.exact_attention(q, k, v, jnp.zeros((2,), jnp.int32),
                                 jnp.ones((2, 8, 8), bool), jnp.float32, k_new=k, v_new=v,
                                 prefill=True)


# the attention cases under long (their probes cost ~28 s of the default run): the verify and
# tree checks below hold the attention plans to one-token decoding bit for bit
@pytest.mark.parametrize("kind,shape", grid(
    [("linear", (64, 64, 1)), ("linear", (256, 128, 2)), ("plain", (64, 64)),
     ("plain", (256, 128)), ("attention", (2, 16, 64)), ("attention", (1, 16, 48))],
    quick=[("linear", (64, 64, 1)), ("plain", (64, 64))]))
def test_row_plans_are_in_the_probed_reference_class(kind, shape):
    from specjax.models.llama import chunked_matmul, plain_matmul

    backend = jax.default_backend()
    product = {"linear": chunked_matmul, "plain": plain_matmul}.get(kind)
    for dt in ("float32", "bfloat16"):
        for m in (1, 3, 17, 27):
            r, n = numerics.row_plan(m, kind, shape, dt, product)
            assert r * n >= m and (n == 1 or r < m)
            assert r >= 2 or kind == "attention"
            assert numerics.row_count_invariant(kind, r, shape, dt, backend, product)
    if kind != "attention":  # one row: a matrix-vector product, never in the class
        assert not numerics.row_count_invariant(kind, 1, shape, "float32", backend, product)


def test_numerics_switch_is_checked():
    model = random_model(tiny_config(), seed=0)
    assert model.numerics == "fast"
    with pytest.raises(ValueError, match="numerics must be one of fast, exact"):
        model.set_numerics("strict")


# bfloat16 under -m long (suite time, 12 s): its verify blocks and trees are checked by default
@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=LONG)])
def test_deferred_write_reads_the_window_from_the_block(dtype):
    """A forward that defers its cache write attends over the unwritten cache plus the block
    (no copy of the cache): bit-identical to attending over the written cache, for chains and
    a tree, mixed prefix lengths, and a block running past the cache's end (masked there)."""
    from specjax.cache import write_block

    dt = jnp.dtype(dtype)
    rng = np.random.default_rng(7)
    B, S, kvh, G, hd = 3, 40, 2, 2, 16
    L = jnp.asarray([5, 17, 36], jnp.int32)
    parents = [-1, 0, 0, 1, 2, 2, 5]  # a tree; chains: the lower-triangular mask
    anc = np.asarray(ancestor_mask(jnp.asarray([[p - 1 for p in parents[1:]]]), 7))[0]
    for T, m in ((1, np.ones((1, 1), bool)), (6, np.tril(np.ones((6, 6), bool))), (7, anc)):
        kc = jnp.asarray(rng.standard_normal((B, kvh, S, hd)), dt)
        vc = jnp.asarray(rng.standard_normal((B, kvh, S, hd)), dt)
        kn = jnp.asarray(rng.standard_normal((B, T, kvh, hd)), dt)
        vn = jnp.asarray(rng.standard_normal((B, T, kvh, hd)), dt)
        q = jnp.asarray(rng.standard_normal((B, T, kvh * G, hd)), dt)
        in_cache = (L[:, None] + jnp.arange(T)[None] < S)[:, None, :]
        mask = jnp.asarray(m)[None] & in_cache
        f = jax.jit(numerics.exact_attention, static_argnames=("dtype",))
        want = f(q, write_block(kc, kn, L), write_block(vc, vn, L), L, mask, dtype=dt)
        got = f(q, kc, vc, L, mask, dtype=dt, k_new=kn, v_new=vn)
        assert np.array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32)), T
    with pytest.raises(ValueError, match="window of the block itself"):
        numerics.exact_attention(q, kc, vc, L, jnp.ones((B, T, T + 1), bool), dt,
                                 k_new=kn, v_new=vn)


# ----------------------------------------------------------------------------- the forward


def _fwd(model, tokens, positions, cache, attn_mask=None):
    """The forward as the engine runs it: compiled with the exact numerics' compiler options
    (an eager op-by-op call is not what the invariance is about: under the suite's -O0 backend
    an eager call has differed; without the options an H100 rounded bfloat16 intermediates
    differently in a two-token block at batch 1)."""
    graphdef, state = nnx.split(model)
    return _fwd_compiled(graphdef, state, tokens, positions, cache, attn_mask)


@functools.partial(jax.jit, static_argnums=0,
                   compiler_options=numerics.EXACT_COMPILER_OPTIONS)
def _fwd_compiled(graphdef, state, tokens, positions, cache, attn_mask):
    return nnx.merge(graphdef, state)(tokens, positions, cache, attn_mask=attn_mask)


def _prefill(model, rows, S):
    B = len(rows)
    P = max(len(r) for r in rows)
    toks = np.zeros((B, P), np.int32)
    for b, r in enumerate(rows):
        toks[b, :len(r)] = r
    cache = model.init_cache(B, S)
    out = _fwd(model, jnp.asarray(toks), jnp.broadcast_to(jnp.arange(P)[None], (B, P)), cache)
    return out.cache.with_lengths(jnp.asarray([len(r) for r in rows], jnp.int32))


def _decode_each(model, cache, seq, n):
    """Logits of one-token decoding of ``seq[b, lengths[b] + i]``, i < n: ``[B, n, V]``."""
    B = seq.shape[0]
    got = []
    for _ in range(n):
        L = np.asarray(cache.lengths)
        tok = jnp.asarray(seq[np.arange(B), L][:, None], jnp.int32)
        o = _fwd(model, tok, cache.lengths[:, None], cache)
        got.append(np.asarray(o.logits[:, 0]))
        cache = o.cache.advance(jnp.ones((B,), jnp.int32))
    return np.stack(got, 1)


def _verify_blocks_match(model, seq, lens, cache_len, ks, label=()):
    """Prefills rows ``seq[b, :lens[b]]`` into a ``cache_len`` cache, decodes the next
    ``max(ks)`` tokens of ``seq`` one at a time, and asserts that one verify forward over
    each ``k`` of ``ks`` tokens gives those steps' logits bit for bit. Returns ``(cache0,
    ref)``: the prefilled cache and the one-token logits."""
    cache0 = _prefill(model, [seq[b, :lens[b]].tolist() for b in range(len(lens))], cache_len)
    ref = _decode_each(model, cache0, seq, max(ks))
    L = np.asarray(cache0.lengths)
    for k in ks:
        idx = L[:, None] + np.arange(k)[None]
        block = jnp.asarray(np.take_along_axis(seq, idx, 1), jnp.int32)
        got = np.asarray(_fwd(model, block, jnp.asarray(idx, jnp.int32), cache0).logits)
        assert np.array_equal(got, ref[:, :k]), (*label, k)
    return cache0, ref


VERIFY = [(p, b, h) for p in PRECISIONS for b, h in ((1, (4, 2)), (3, (4, 2)), (8, (4, 2)),
                                                     (1, (2, 2)))]


@pytest.mark.parametrize("precision,batch,heads", grid(
    VERIFY, quick=[("bfloat16", 3, (4, 2)), ("w8a8", 1, (2, 2))]),
    ids=[f"{p}-b{b}-{'mha' if h[0] == h[1] else 'gqa'}" for p, b, h in VERIFY])
def test_verify_blocks_equal_one_token_decoding(precision, batch, heads):
    """A verify forward over k = 1..17 tokens on top of mixed prefix lengths gives the logits
    of one-token decoding, bit for bit (multi-head attention too: one query row per head)."""
    model = exact_model(precision, num_heads=heads[0], num_kv_heads=heads[1])
    rng = np.random.default_rng(batch)
    seq = rng.integers(0, 96, (batch, 48))
    lens = [int(x) for x in rng.integers(3, 14, batch)]
    _verify_blocks_match(model, seq, lens, 64, (1, 2, 5, 9, 17), (precision, batch))


TREES = [(p, "xla") for p in PRECISIONS] + [("bfloat16", "pallas")]


@pytest.mark.parametrize("precision,products", grid(TREES, quick=[("bfloat16", "xla"),
                                                                  ("bfloat16", "pallas")]),
                         ids=[f"{p}-{k}" for p, k in TREES])
def test_tree_nodes_equal_decoding_their_paths(precision, products):
    """Each node of a tree (ancestors at scattered scratch slots) gets the logits of decoding
    its root-to-node path one token at a time (also with the products and the attention's
    cache-row part through the batch-invariant Pallas kernels)."""
    model = exact_model(precision)
    model.set_numerics("exact", products=products)
    parents = [-1, 0, 0, 1, 2, 2, 5, 6]
    N = len(parents)
    # the engine's mask (node 0 is the root; the others' parents counted from node 1)
    anc = np.asarray(ancestor_mask(jnp.asarray([[p - 1 for p in parents[1:]]]), N))[0]
    depth = anc.sum(1) - 1
    rng = np.random.default_rng(3)
    B = 2
    cache0 = _prefill(model, [rng.integers(0, 96, 9).tolist(), rng.integers(0, 96, 5).tolist()],
                      48)
    nodes = rng.integers(0, 96, (B, N))
    L = np.asarray(cache0.lengths)
    out = _fwd(model, jnp.asarray(nodes, jnp.int32),
               jnp.asarray(L[:, None] + depth[None], jnp.int32), cache0,
               jnp.broadcast_to(jnp.asarray(anc)[None], (B, N, N)))
    got = np.asarray(out.logits)
    for n in range(N):
        path = [a for a in range(N) if anc[n, a]]
        ref = _decode_each(model, cache0, _path_seq(nodes[:, path], L), len(path))
        assert np.array_equal(got[:, n], ref[:, -1]), (precision, n)


def _path_seq(path_tokens, L):
    """A ``[B, max(L) + d]`` token array with each row's path at its own offset ``L[b]``."""
    B, d = path_tokens.shape
    seq = np.zeros((B, int(L.max()) + d), np.int64)
    for b in range(B):
        seq[b, L[b]:L[b] + d] = path_tokens[b]
    return seq


BATCHED = [(p, "xla") for p in PRECISIONS] + [("bfloat16", "pallas")]


@pytest.mark.parametrize("precision,products", grid(BATCHED, quick=[("bfloat16", "xla")]),
                         ids=[f"{p}-{k}" for p, k in BATCHED])
def test_plain_decoding_of_a_row_is_the_same_alone_and_batched(precision, products):
    """Other prompt lengths in the batch change the prefill length and the cache length: the
    row's tokens must not change."""
    model = exact_model(precision, num_layers=3)
    model.set_numerics("exact", products=products)
    prompts = mixed_prompts(4, seed=5)
    prompts = [[t % 96 for t in p] for p in prompts]
    # a row long enough to read past position 128 and one that gives the batch a longer cache
    # (320 positions alone, 576 batched: neither a power of two)
    rng = np.random.default_rng(6)
    prompts += [rng.integers(0, 96, 170).tolist(), rng.integers(0, 96, 300).tolist()]
    batched = generate(model, prompts, max_new_tokens=12, batch_size=len(prompts)).tokens
    for p, want in zip(prompts, batched):
        assert generate(model, [p], max_new_tokens=12).tokens[0] == want


# ----------------------------------------------------------------------------- decoding

# every drafter in every precision; the default run: prompt lookup in bfloat16 (where fast
# numerics diverge most) and a draft model with a tree on w8a8
IDENTITY = [(d, p) for p in PRECISIONS for d in (
    "prompt_lookup", "draft_model", "eagle", "early_exit", "layer_skip", "medusa", "hydra",
    "token_recycling", "stand", "del")]
QUICK = [("prompt_lookup", "bfloat16")]
DRAFTER_ARGS = {"early_exit": {"exit_layer": "1"}, "draft_model": {"tree": "topk:width=2"},
                # the chains (greedy at batch 1 their default is a 3-node tree; trees are
                # checked through the draft model's)
                "eagle": {"k": "3"}, "medusa": {"k": "3"},
                # the tree verified every step (the default, adaptive, may decode plainly)
                "token_recycling": {"policy": "fixed"}}


def _identity(drafter, precision, products="xla"):
    model = exact_model(precision, seed=4, num_layers=3)
    model.set_numerics("exact", products=products)
    prompts = [[t % 96 for t in p] for p in mixed_prompts(3, seed=11)]
    plain = [generate(model, [p], max_new_tokens=10).tokens[0] for p in prompts]
    m = methods.build(drafter, model, DRAFTER_ARGS.get(drafter, {}))
    got = generate(model, prompts, max_new_tokens=10, drafter=m.drafter, policy=m.policy,
                   batch_size=3)
    assert got.extra["numerics"] == "exact"
    assert got.extra.get("exact_products", "xla") == products
    assert got.tokens == plain, (drafter, precision)


@pytest.mark.parametrize("drafter,precision", grid(IDENTITY, QUICK),
                         ids=[f"{d}-{p}" for d, p in IDENTITY])
def test_greedy_speculative_equals_plain_in_every_precision(drafter, precision,
                                                             release_compiled):
    _identity(drafter, precision)



@pytest.mark.real_model
@pytest.mark.parametrize("precision", grid(PRECISIONS, quick=["bfloat16"]))
def test_real_model_verify_blocks_equal_decoding(precision):
    """SmolLM2-135M: verify blocks of 1, 4 and 9 tokens give one-token decoding's logits."""
    from specjax.models.loaders import load

    lm = load("smollm2-135m", dtype=jnp.bfloat16 if precision == "bfloat16" else jnp.float32,
              quantize="w8a8" if precision == "w8a8" else None)
    assert lm.model.numerics == "exact"  # the default of load()
    model = lm.model
    ids = lm.tokenizer.encode_chat("Summarize: the cat sat on the mat and looked at the dog.")
    rng = np.random.default_rng(0)
    seq = np.array([ids + rng.integers(0, 49152, 16).tolist(),
                    ids[:-3] + rng.integers(0, 49152, 19).tolist()])
    lens = [len(ids), len(ids) - 3]
    _verify_blocks_match(model, seq, lens, 128, (1, 4, 9), (precision,))


# ----------------------------------------------------------------------------- the Pallas products


@pytest.mark.parametrize("precision", grid(("float32", "bfloat16"), quick=["bfloat16"]))
def test_pallas_products_verify_blocks_equal_one_token_decoding(precision, monkeypatch):
    """With ``exact_products="pallas"`` (the batch-invariant kernels in interpret mode on CPU:
    no row plan for the projections, the LM head and attention's cache-row part) a verify
    block over k = 1..9 tokens at batch 3 gives the logits of one-token decoding bit for bit,
    and they stay within float rounding of the XLA-product model's."""
    from specjax.pallas_kernels import invariant_mesh  # the models' entry to both kernels

    calls, attention_calls = [], []
    kernel, attention = invariant_mesh.invariant_matmul, invariant_mesh.invariant_attention_part
    monkeypatch.setattr(invariant_mesh, "invariant_matmul",
                        lambda x, w, *a, **kw: calls.append(w.shape) or kernel(x, w, *a, **kw))
    monkeypatch.setattr(invariant_mesh, "invariant_attention_part",
                        lambda q, *a, **kw: attention_calls.append(q.shape)
                        or attention(q, *a, **kw))
    model = exact_model(precision, num_heads=4, num_kv_heads=2)
    model.set_numerics("exact", products="pallas")
    assert model.exact_products == "pallas"
    rng = np.random.default_rng(7)
    seq = rng.integers(0, 96, (3, 40))
    lens = [5, 11, 8]
    cache0, ref = _verify_blocks_match(model, seq, lens, 48, (1, 2, 5, 9), (precision,))
    # every projection of both layers and the LM head went through the kernel
    assert set(calls) == {(128, 64), (64, 64), (256, 64), (64, 128), (96, 64)}, set(calls)
    assert {s[1] for s in attention_calls} >= {1, 9}, attention_calls  # decode and blocks
    model.set_numerics("exact", products="xla")
    xla = _decode_each(model, cache0, seq, 9)
    tol = 1e-4 if precision == "float32" else 0.1
    np.testing.assert_allclose(ref, xla, atol=tol, rtol=tol)


def test_mosaic_gpu_kernels_verify_blocks_equal_one_token_decoding(monkeypatch):
    """With ``$SPECJAX_INVARIANT_KERNELS=mosaic_gpu_interpret`` (the Mosaic GPU kernels under
    their interpreter; ``mosaic_gpu`` on a GPU), a model whose shapes they take (head dim 64,
    widths multiples of 64, bfloat16): every product and attention part runs the Mosaic GPU
    kernels, and a verify block over k = 1, 2, 5 tokens at batch 3 gives the logits of
    one-token decoding bit for bit."""
    try:  # not exported publicly in JAX 0.10.2
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # noqa: F401
    except ImportError:
        if jax.default_backend() != "gpu":
            pytest.skip("this JAX has no Mosaic GPU interpreter")
    from specjax.pallas_kernels.invariant_attention import mosaic_gpu as attention_gpu
    from specjax.pallas_kernels.invariant_matmul import MODE_ENV
    from specjax.pallas_kernels.invariant_matmul import mosaic_gpu as matmul_gpu

    # on a GPU the kernels themselves (wgmma), elsewhere their interpreter
    monkeypatch.setenv(MODE_ENV, "mosaic_gpu" if jax.default_backend() == "gpu"
                       else "mosaic_gpu_interpret")
    calls, attention_calls = [], []
    kernel = matmul_gpu.invariant_matmul_mosaic_gpu
    attention = attention_gpu.invariant_attention_part_mosaic_gpu
    monkeypatch.setattr(matmul_gpu, "invariant_matmul_mosaic_gpu",
                        lambda x, w, *a, **kw: calls.append(w.shape) or kernel(x, w, *a, **kw))
    monkeypatch.setattr(attention_gpu, "invariant_attention_part_mosaic_gpu",
                        lambda q, *a, **kw: attention_calls.append(q.shape)
                        or attention(q, *a, **kw))
    model = exact_model("bfloat16", vocab_size=128, hidden_size=128, intermediate_size=256,
                        num_heads=2, num_kv_heads=1, head_dim=64)
    model.set_numerics("exact", products="pallas")
    rng = np.random.default_rng(9)
    seq = rng.integers(0, 128, (3, 24))
    lens = [4, 9, 6]
    _verify_blocks_match(model, seq, lens, 32, (1, 2, 5))
    # the four projections and the LM head, and attention, through the Mosaic GPU kernels
    assert set(calls) == {(256, 128), (128, 128), (512, 128), (128, 256)}, set(calls)
    assert {s[1] for s in attention_calls} >= {1, 5}, attention_calls


@pytest.mark.parametrize("drafter", grid(("prompt_lookup", "draft_model"), quick=["prompt_lookup"]))
def test_pallas_products_greedy_speculative_equals_plain(drafter, release_compiled,
                                                         monkeypatch):
    """Greedy speculative decoding at batch 3 equals plain decoding with the products and
    attention through the batch-invariant Pallas kernels (bfloat16; interpret mode on CPU),
    and nothing asks the row-class probe (prefills included)."""
    def no_probe(*a, **kw):
        raise AssertionError("row_plan called under exact_products='pallas'")

    monkeypatch.setattr(numerics, "row_plan", no_probe)
    _identity(drafter, "bfloat16", products="pallas")


@pytest.mark.real_model
@LONG
def test_real_model_pallas_kernels_prompt_lookup_equals_plain():
    """SmolLM2-135M in float32 with the Pallas kernels (interpreted on CPU, about two
    minutes): greedy prompt lookup at batch 2 equals plain decoding, and plain decoding gives
    the XLA products' tokens on these prompts (2026-12-06: identical, 7 tokens accepted)."""
    from specjax.models.loaders import load

    lm = load("smollm2-135m", dtype=jnp.float32)
    model = lm.model
    model.set_numerics("exact", products="pallas")
    prompts = [lm.tokenizer.encode_chat("Repeat this list: apples, pears, plums, apples, "
                                        "pears, plums."),
               lm.tokenizer.encode_chat("What is 2+2?")]
    plain = [generate(model, [p], max_new_tokens=12).tokens[0] for p in prompts]
    m = methods.build("prompt_lookup", model, {"policy": "fixed", "k": 3})
    got = generate(model, prompts, max_new_tokens=12, drafter=m.drafter, policy=m.policy,
                   batch_size=2)
    assert got.extra["exact_products"] == "pallas"
    assert got.tokens == plain
    assert sum(got.extra["accepted"]) > 0  # it drafted, and drafts were accepted
    model.set_numerics("exact", products="xla")
    assert [generate(model, [p], max_new_tokens=12).tokens[0] for p in prompts] == plain
