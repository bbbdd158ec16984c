"""A Llama-family decoder in Flax NNX with an explicit KV cache.

One forward serves prefill, single-token decode and multi-token (chain or tree) verification:

    out = model(tokens, positions, cache, attn_mask=..., exit_layer=..., skip=...,
                hidden_layers=..., logits_index=...)

The new tokens' keys/values are written into the cache at ``cache.lengths[b] + [0, T)``;
``out.cache.lengths`` is *not* advanced: the caller commits what it accepts
(:meth:`KVCache.advance` or :meth:`KVCache.commit_path`).

Attention visibility of query ``i`` of row ``b``:
  * every committed entry ``j < cache.lengths[b]`` (the row's prefix), and
  * new entries ``lengths[b] + j'`` (``j' < T``) where ``attn_mask[b, i, j']`` is true
    (default: causal, ``j' <= i``; a tree passes its ancestor mask).
Nothing else: scratch past the block and other rows' padding are never visible.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import SEQ_AXIS, KVCache, block_layout, slots_of, write_block
from specjax.config import ModelConfig, RopeScaling

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ForwardOutput:
    """What a forward returns.

    Attributes:
      logits: ``float32[B, T, V]`` (or ``[B, K, V]`` when ``logits_index`` was given).
      cache: the cache with the new block written past each row's length (not committed).
      hidden: tuple aligned with the ``hidden_layers`` argument, each ``[B, T, D]``: the
        residual stream after that block (``-1`` or ``num_layers - 1``: the last block).
      final_hidden: ``[B, T, D]`` the normed hidden state fed to the LM head.
      new_kv: with ``defer_cache_write=True``: ``(k, v)``, tuples over layers of the new
        block's keys/values ``[B, T, KVH, Dh]`` (``None`` for a skipped attention), for the
        caller to write with :meth:`KVCache.write`; otherwise ``None``.
    """

    logits: Array
    cache: KVCache
    hidden: tuple[Array, ...]
    final_hidden: Array
    new_kv: tuple | None = None  # (k, v) per layer [B, T, KVH, Dh] when the write is deferred


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> jnp.ndarray:
    inv = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    if scaling is None:
        return inv
    if scaling.kind == "linear":
        return inv / scaling.factor
    if scaling.kind == "factors":
        if len(scaling.freq_factors) != inv.shape[0]:
            raise ValueError(f"rope freq_factors has {len(scaling.freq_factors)} entries, the "
                             f"head dimension needs {inv.shape[0]}")
        return inv / jnp.asarray(scaling.freq_factors, jnp.float32)
    # llama3: keep high frequencies, divide low ones by factor, interpolate in between.
    low_wl = scaling.original_max_position / scaling.low_freq_factor
    high_wl = scaling.original_max_position / scaling.high_freq_factor
    wl = 2 * math.pi / inv
    smooth = (scaling.original_max_position / wl - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    mid = (1 - smooth) * inv / scaling.factor + smooth * inv
    return jnp.where(wl < high_wl, inv, jnp.where(wl > low_wl, inv / scaling.factor, mid))


def apply_rope(x: Array, positions: Array, inv_freq: Array) -> Array:
    """Rotary embedding in the rotate-half layout. x: ``[B, T, H, Dh]``, positions ``[B, T]``."""
    ang = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    cos = jnp.cos(ang)[:, :, None, :]
    sin = jnp.sin(ang)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def rms_norm(x: Array, w: Array, eps: float) -> Array:
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def linear(x: Array, w: Array, dtype, scale: Array | None = None,
           exact: bool | str = False, name: str | None = None) -> Array:
    """``x @ w.T`` with ``w`` stored ``[out, in]`` (the checkpoint layout).

    Computed as ``(w @ x.T).T`` (on XLA:CPU this orientation ran the small-row products of
    verification about twice as fast as ``x @ w.T``); on CPU, products of 2..32 rows run as
    :func:`chunked_matmul` instead (see docs/benchmarks.md).

    With ``scale`` (``float32[out]``), ``w`` is int8 (:mod:`specjax.models.quant`, ``w8a8``):
    each row of ``x`` is quantized to int8 with its own scale (``max |x| / 127``), the product
    accumulates in int32 and is rescaled by both scales.

    ``exact`` (static): invariant numerics (:mod:`specjax.models.numerics`): every row comes
    out bit-identically whatever the number of rows (the int8 product already does);
    ``"prefill"``: the same, for a prefill (:func:`prefill_matmul`: rows only have to agree
    with other prefills' rows); ``"pallas"`` and ``"pallas_prefill"``: the same through the
    batch-invariant Pallas kernel (:func:`exact_matmul`); ``name``: the weight's name (its
    split on a mesh, :mod:`specjax.pallas_kernels.invariant_mesh`).
    """
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if scale is not None:
        return w8a8_matmul(x2, w, scale).astype(dtype).reshape(*lead, w.shape[0])
    w = w.astype(dtype)
    if exact == PREFILL:
        return prefill_matmul(x2, w, dtype).reshape(*lead, w.shape[0])
    if exact:
        return exact_matmul(x2, w, dtype, pallas=exact in _PALLAS, name=name).reshape(
            *lead, w.shape[0])
    chunks = small_gemm_chunks(w.shape, x2.shape[0], w.dtype.itemsize)
    if chunks > 1:
        return chunked_matmul(x2, w, chunks, dtype).reshape(*lead, w.shape[0])
    y = jnp.einsum("oi,ti->ot", w, x2, preferred_element_type=dtype)
    return y.T.reshape(*lead, w.shape[0])


# Products of a few rows (verification blocks of 2-32 tokens) against a weight matrix are
# split into row chunks of about this many bytes on CPU (see chunked_matmul); 0 turns it off.
SMALL_GEMM_CHUNK_BYTES = 1 << 20
SMALL_GEMM_MAX_ROWS = 32


def small_gemm_chunks(w_shape, rows: int, itemsize: int, any_backend: bool = False) -> int:
    """Number of row chunks :func:`linear` splits ``w`` into for a product with ``rows`` rows
    (1: no split). Only on the CPU backend (``any_backend``: on every backend), for
    2..``SMALL_GEMM_MAX_ROWS`` rows, and only into chunks that divide the output dimension
    evenly."""
    if not SMALL_GEMM_CHUNK_BYTES or not 2 <= rows <= SMALL_GEMM_MAX_ROWS or \
            (jax.default_backend() != "cpu" and not any_backend):
        return 1
    out, inp = w_shape
    c = min(out, (out * inp * itemsize) // SMALL_GEMM_CHUNK_BYTES)
    while c > 1 and out % c:
        c -= 1
    return max(c, 1)


def chunked_matmul(x: Array, w: Array, chunks: int, dtype) -> Array:
    """``x @ w.T`` for ``x: [t, in]`` as a batched product over ``chunks`` row blocks of ``w``.

    XLA:CPU runs a product of a few rows against a large matrix as a general matrix product
    that repacks the whole weight matrix first: at 2 rows it reads the weights at about half
    the matrix-vector rate, so verifying a 2-token block cost ~1.9x a one-token forward. As
    a batch of products over ~1 MB blocks, each block is packed while it sits in cache; a
    30-layer MLP probe at 2 / 4 / 8 rows fell from 20.8 / 23.8 / 26.3 ms to 15.2 / 16.4 /
    18.8 ms (one row: 10.9 ms, unchanged: one row never takes this path). Each output is still
    one dot product over the full input dimension."""
    t = x.shape[0]
    o, i = w.shape
    wc = w.reshape(chunks, o // chunks, i)
    xb = jnp.broadcast_to(x[None], (chunks, t, i))
    y = jax.lax.dot_general(wc, xb, (((2,), (2,)), ((0,), (0,))),
                            preferred_element_type=dtype)  # [chunks, o / chunks, t]
    return jnp.transpose(y, (2, 0, 1)).reshape(t, o)


def _row_planned(x: Array, w: Array, dtype, kind: str, shape: tuple, product, extra=()):
    """``product(x, w, *extra, float32)`` with the rows of ``x`` padded to the reference row
    class of ``kind`` (:func:`specjax.models.numerics.row_plan`; equal products under a
    ``lax.map`` when no single one is in the class), rounded to ``dtype`` after: the rows are
    the same in float32."""
    from specjax.models.numerics import pad_rows, row_plan

    t, i = x.shape
    rows, n = row_plan(t, kind, shape, x.dtype, product)
    xp = pad_rows(x, rows * n)
    if n == 1:
        return product(xp, w, *extra, jnp.float32)[:t].astype(dtype)
    y = jax.lax.map(lambda xc: product(xc, w, *extra, jnp.float32), xp.reshape(n, rows, i))
    return y.reshape(n * rows, -1)[:t].astype(dtype)


def exact_matmul(x: Array, w: Array, dtype, pallas: bool = False,
                 name: str | None = None) -> Array:
    """``x @ w.T`` as the chunked product with rows padded to the reference row class
    (:func:`_row_planned`), so that a row's result does not depend on how many rows share
    it. ``pallas``: through :func:`specjax.pallas_kernels.invariant_matmul.invariant_matmul`
    instead (a fixed tiling whatever the row count: invariant by construction, no probe;
    the model's ``exact_products="pallas"``; on a mesh inside ``shard_map``, split as the
    weight called ``name`` is: :mod:`specjax.pallas_kernels.invariant_mesh`)."""
    if pallas:
        from specjax.pallas_kernels.invariant_mesh import matmul

        return matmul(x, w.astype(x.dtype), jnp.float32, name=name).astype(dtype)
    chunks = max(small_gemm_chunks(w.shape, 2, w.dtype.itemsize, any_backend=True), 1)
    return _row_planned(x, w, dtype, "linear", (*w.shape, chunks), chunked_matmul, (chunks,))


# ``exact`` of a prefill forward (a fresh cache, ``prefix_empty``): the invariant forms that
# only have to agree with other prefills (specjax.models.numerics, "prefill")
PREFILL = "prefill"
# ``exact`` of a forward whose products and attention run the batch-invariant Pallas kernels
# (``exact_products="pallas"``), and of such a prefill (so that nothing needs the row-class
# probe)
PALLAS = "pallas"
PALLAS_PREFILL = "pallas_prefill"
_PALLAS = (PALLAS, PALLAS_PREFILL)


def plain_matmul(x: Array, w: Array, dtype) -> Array:
    """``x @ w.T`` as XLA's own product (``(w @ x.T).T``, the fast path of many rows)."""
    return jnp.einsum("oi,ti->ot", w, x, preferred_element_type=dtype).T


def prefill_matmul(x: Array, w: Array, dtype) -> Array:
    """``x @ w.T`` in a prefill, float32 results rounded to ``dtype``: a prompt row comes out
    the same in every prefill (alone, batched, any padded length). It need not agree with
    decoding's product (nothing computes a prompt position both ways), so it takes whichever
    invariant form is faster for hundreds of rows: XLA's own product with rows padded to its
    reference row class (``row_plan(..., "plain", ...)``), except for bfloat16 operands on
    the CPU backend, where XLA:CPU's mixed bfloat16 -> float32 product is slow and the chunked
    product of decoding (:func:`exact_matmul`) is the fast one. Measured on a 2-core CPU
    (2026-12-02, SmolLM2, ``scripts/measure_prefill.py``): a 768-token float32 prefill 2.77 s
    in the chunked form, 1.80 s in XLA's (fast numerics: 1.69 s); a 256-token bfloat16 prefill
    1.13 s in XLA's mixed product, 0.37 s chunked (fast numerics: 0.52 s)."""
    if x.dtype != jnp.float32 and jax.default_backend() == "cpu":
        return exact_matmul(x, w, dtype)
    return _row_planned(x, w, dtype, "plain", tuple(w.shape), plain_matmul)


def quantize_rows(x: Array) -> tuple[Array, Array]:
    """Symmetric int8 quantization of each row: ``(int8 values, float32 scale [rows, 1])``
    with ``x ~= values * scale`` (an all-zero row gets scale 1)."""
    xf = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(xf), axis=-1, keepdims=True)
    scale = jnp.where(amax > 0, amax / 127.0, 1.0)
    return jnp.clip(jnp.round(xf / scale), -127, 127).astype(jnp.int8), scale


def w8a8_matmul(x: Array, w: Array, w_scale: Array) -> Array:
    """``float32[t, out]`` ~= ``x @ (w * w_scale[:, None]).T`` for int8 ``w`` ``[out, in]``:
    the rows of ``x`` are quantized on the fly and the product runs int8 x int8 -> int32.

    Computed as ``x @ w.T`` (unlike the float path, this orientation is the faster one for
    the integer product on XLA:CPU), and a single row is padded to two: XLA:CPU lowers a
    one-row int8 product to a slow generic loop (about 10x slower than float32), two rows to
    its fast integer matmul (docs/benchmarks.md)."""
    t = x.shape[0]
    xq, xs = quantize_rows(x)
    if t == 1:
        xq = jnp.concatenate([xq, jnp.zeros_like(xq)], axis=0)
    acc = jax.lax.dot_general(xq, w, (((1,), (1,)), ((), ())),
                              preferred_element_type=jnp.int32)[:t]
    return acc.astype(jnp.float32) * xs * w_scale.astype(jnp.float32)[None]


def _scale(p):
    return None if p is None else p[...]


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        d, h, kvh, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        init = nnx.initializers.normal(0.02)
        # q, k and v projections stored as one [(h + 2 kvh) * hd, d] matrix: one matmul
        # instead of three (fewer, larger dots are measurably faster on XLA:CPU)
        self.wqkv = nnx.Param(init(rngs.params(), ((h + 2 * kvh) * hd, d), param_dtype))
        self.wo = nnx.Param(init(rngs.params(), (d, h * hd), param_dtype))
        self.bqkv = (nnx.Param(jnp.zeros(((h + 2 * kvh) * hd,), param_dtype))
                     if cfg.attention_bias else None)
        # per-row scales of int8 weights (specjax.models.quant); None: float weights
        self.wqkv_scale = nnx.data(None)
        self.wo_scale = nnx.data(None)
        self.num_heads, self.num_kv_heads, self.head_dim = h, kvh, hd

    def __call__(self, x, positions, k_cache, v_cache, lengths, mask, inv_freq, dtype,
                 write_offset: int = 0, impl: str = "dense", write: bool = True,
                 prefix_empty: bool = False, exact: bool | str = False):
        """``mask``: ``bool[B, T, W]`` over the scratch window ``lengths + [0, W)``; the
        committed prefix ``< lengths`` is always visible. ``write=False`` leaves the cache
        as it is (the caller writes the returned ``k, v``; needs ``write_offset == 0``).
        ``prefix_empty`` (static): every row's prefix is empty (prefill), skip that part."""
        B, T, _ = x.shape
        h, kvh, hd = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = linear(x, self.wqkv[...], dtype, _scale(self.wqkv_scale), exact, "wqkv")
        if self.bqkv is not None:
            qkv = qkv + self.bqkv[...].astype(dtype)
        q, k, v = jnp.split(qkv, [h * hd, (h + kvh) * hd], axis=-1)
        q = apply_rope(q.reshape(B, T, h, hd), positions, inv_freq)
        k = apply_rope(k.reshape(B, T, kvh, hd), positions, inv_freq)
        v = v.reshape(B, T, kvh, hd)
        if write:
            k_cache = write_block(k_cache, k, lengths + write_offset)
            v_cache = write_block(v_cache, v, lengths + write_offset)
        W = mask.shape[2]
        if exact:  # invariant numerics: see specjax.models.numerics
            from specjax.models.numerics import EXACT_TAIL, exact_attention

            kern = exact in _PALLAS  # the product part through the Pallas kernel
            if write:
                out = exact_attention(q, k_cache, v_cache, lengths, mask, dtype,
                                      prefill=exact in (PREFILL, PALLAS_PREFILL), pallas=kern)
            elif W == T and T <= EXACT_TAIL:  # the window is the block: read it from there
                # (attending over a written copy cost every layer's cache per verify step)
                out = exact_attention(q, k_cache, v_cache, lengths, mask, dtype,
                                      k_new=k, v_new=v, pallas=kern)
            else:  # a deferred write with a longer window: attend over a written copy
                out = exact_attention(q, write_block(k_cache, k, lengths),
                                      write_block(v_cache, v, lengths), lengths, mask, dtype,
                                      pallas=kern)
            out = linear(out.reshape(B, T, h * hd).astype(dtype), self.wo[...], dtype,
                         _scale(self.wo_scale), exact, "wo")
            return out, k_cache, v_cache, k, v
        if write_offset == 0 and W == T:  # the window is the new block itself
            k_win, v_win = k.astype(k_cache.dtype), v.astype(v_cache.dtype)
        else:  # levels written earlier sit in the scratch window of the cache
            win = jnp.minimum(lengths[:, None] + jnp.arange(W, dtype=jnp.int32)[None],
                              k_cache.shape[SEQ_AXIS] - 1)
            k_win, v_win = slots_of(k_cache, win), slots_of(v_cache, win)
        if impl != "dense":  # prefix + scratch window, merged by log-sum-exp (kernel op)
            from specjax.pallas_kernels.tree_attention import tree_attention

            # the kernels take positions before heads: a transposing copy of the cache here
            out = tree_attention(q, block_layout(k_cache), block_layout(v_cache), lengths,
                                 k_win, v_win, mask, implementation=impl)
        else:
            out = split_attention(q.reshape(B, T, kvh, h // kvh, hd), k_cache, v_cache,
                                  lengths, k_win, v_win, mask, dtype, prefix_empty)
        out = linear(out.reshape(B, T, h * hd).astype(dtype), self.wo[...], dtype,
                     _scale(self.wo_scale))
        return out, k_cache, v_cache, k, v


def split_attention(qg, k_cache, v_cache, lengths, k_win, v_win, mask, dtype,
                    prefix_empty: bool = False):
    """Softmax attention over the committed prefix (``cache[:, :lengths]``) and a window of
    new entries (``k_win, v_win: [B, W, KVH, Dh]`` under ``mask: [B, T, W]``; the cache
    ``[B, KVH, S, Dh]``), as one softmax
    with a common max. The cache is only read, so a verify forward can leave writing it to
    its caller (no cache copy through ``lax.switch``). Returns ``[B, T, KVH, G, Dh]``."""
    B, T, kvh, g, hd = qg.shape
    S = k_cache.shape[SEQ_AXIS]
    scale = 1.0 / math.sqrt(hd)
    neg = jnp.float32(-jnp.inf)
    s2 = jnp.einsum("btkgd,bwkd->bkgtw", qg, k_win.astype(dtype),
                    preferred_element_type=jnp.float32) * scale
    s2 = jnp.where(mask[:, None, None, :, :], s2, neg)
    m = jnp.max(s2, axis=-1)
    if not prefix_empty:
        pre = jnp.arange(S, dtype=jnp.int32)[None, :] < lengths[:, None]  # [B, S]
        s1 = jnp.einsum("btkgd,bksd->bkgts", qg, k_cache.astype(dtype),
                        preferred_element_type=jnp.float32) * scale
        s1 = jnp.where(pre[:, None, None, None, :], s1, neg)
        m = jnp.maximum(m, jnp.max(s1, axis=-1))
    m = jnp.where(jnp.isneginf(m), 0.0, m)[..., None]  # a query that sees nothing: zeros
    p2 = jnp.exp(s2 - m)
    l = jnp.sum(p2, axis=-1)
    # the window may be the new block itself, as the model computed it (a value it
    # overflowed is not yet written as 0): entries no query reads are zeroed, 0 * NaN leaks
    v2 = jnp.where(jnp.any(mask, axis=1)[:, :, None, None], v_win.astype(dtype), 0)
    out = jnp.einsum("bkgtw,bwkd->btkgd", p2.astype(dtype), v2, preferred_element_type=dtype)
    if not prefix_empty:
        p1 = jnp.exp(s1 - m)
        l = l + jnp.sum(p1, axis=-1)
        # scratch slots are weighted by exact zeros and hold finite values (the cache
        # writes store no NaN or inf, specjax.cache.write_block): no masked copy of the
        # values (it cost every layer's buffer in every forward)
        out = out + jnp.einsum("bkgts,bksd->btkgd", p1.astype(dtype), v_cache.astype(dtype),
                               preferred_element_type=dtype)
    l = jnp.where(l == 0.0, 1.0, l)  # [B, KVH, G, T]
    return out / jnp.transpose(l, (0, 3, 1, 2))[..., None].astype(dtype)


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        d, f = cfg.hidden_size, cfg.intermediate_size
        init = nnx.initializers.normal(0.02)
        self.w_gate_up = nnx.Param(init(rngs.params(), (2 * f, d), param_dtype))  # [gate; up]
        self.w_down = nnx.Param(init(rngs.params(), (d, f), param_dtype))
        self.w_gate_up_scale = nnx.data(None)  # int8 weights: per-row scales (specjax.models.quant)
        self.w_down_scale = nnx.data(None)

    def __call__(self, x, dtype, exact: bool | str = False):
        gate, up = jnp.split(linear(x, self.w_gate_up[...], dtype,
                                    _scale(self.w_gate_up_scale), exact, "w_gate_up"), 2, axis=-1)
        return linear(jax.nn.silu(gate) * up, self.w_down[...], dtype,
                      _scale(self.w_down_scale), exact, "w_down")


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.attn_norm = nnx.Param(jnp.ones((cfg.hidden_size,), param_dtype))
        self.attn = Attention(cfg, rngs=rngs, param_dtype=param_dtype)
        self.mlp_norm = nnx.Param(jnp.ones((cfg.hidden_size,), param_dtype))
        self.mlp = MLP(cfg, rngs=rngs, param_dtype=param_dtype)


ATTENTION_IMPLS = ("dense", "xla", "pallas_interpret", "pallas_mosaic_gpu", "pallas_mosaic_tpu",
                   "pallas")


class Llama(nnx.Module):
    """Llama-family decoder. ``dtype`` is the compute dtype (float32 or bfloat16).

    ``attention_impl`` (static): ``"dense"`` (default: one masked softmax over the whole cache
    row) or an implementation of the tree-attention op
    (:mod:`specjax.pallas_kernels.tree_attention`: ``"xla"``, ``"pallas_interpret"``,
    ``"pallas_mosaic_gpu"``, ``"pallas_mosaic_tpu"``, or ``"pallas"`` for the platform's
    Pallas backend), which attends to the committed prefix up to each row's length and to the
    scratch window under the tree mask, merging the two by log-sum-exp.

    ``numerics`` (static): ``"fast"`` (default) or ``"exact"``: invariant numerics, where the
    logits of a token do not depend on how many tokens or rows share its forward (one-token
    decoding, a verify block, a tree, a batch), at a measured cost
    (:mod:`specjax.models.numerics`, docs/benchmarks.md). Speculative decoding is token-identical
    to plain decoding in every precision only when both run ``exact``. ``exact_products``
    (static, with ``exact``): ``"xla"`` (default: the backend's own products, rows padded to
    a row count measured to share its summation order) or ``"pallas"`` (the batch-invariant
    Pallas kernels, :mod:`specjax.pallas_kernels.invariant_matmul` and
    :mod:`specjax.pallas_kernels.invariant_attention`; the default is read from
    ``SPECJAX_EXACT_PRODUCTS`` when unset): see :meth:`set_numerics`.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs | None = None,
                 param_dtype=jnp.float32, dtype=jnp.float32, attention_impl: str = "dense",
                 numerics: str = "fast"):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        self.cfg = cfg
        self.set_attention_impl(attention_impl)
        self.set_numerics(numerics)
        self.dtype = jnp.dtype(dtype)
        self.embed = nnx.Param(
            nnx.initializers.normal(0.02)(rngs.params(), (cfg.vocab_size, cfg.hidden_size),
                                          param_dtype)
        )
        self.layers = nnx.List(
            [Block(cfg, rngs=rngs, param_dtype=param_dtype) for _ in range(cfg.num_layers)]
        )
        self.final_norm = nnx.Param(jnp.ones((cfg.hidden_size,), param_dtype))
        if cfg.tie_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nnx.Param(
                nnx.initializers.normal(0.02)(rngs.params(), (cfg.vocab_size, cfg.hidden_size),
                                              param_dtype)
            )
        # weight quantization (specjax.models.quant.quantize): "none" or "w8a8"; with w8a8 the
        # LM head is an int8 copy of the (tied or untied) head matrix with per-row scales
        self.quantization = "none"
        self.head_q = nnx.data(None)
        self.head_scale = nnx.data(None)

    def set_attention_impl(self, name: str) -> None:
        if name not in ATTENTION_IMPLS:
            raise ValueError(
                f"unknown attention_impl {name!r}; valid: {', '.join(ATTENTION_IMPLS)}")
        self.attention_impl = name

    def set_numerics(self, name: str, products: str | None = None) -> None:
        """``"fast"`` or ``"exact"`` (see the class doc); ``products``: how an exact forward
        makes its projections', LM head's and attention's cache-row products invariant,
        ``"xla"`` (padded to a probed row class) or ``"pallas"`` (the batch-invariant Pallas
        kernels, prefills included: nothing probed) (None: ``$SPECJAX_EXACT_PRODUCTS``, else
        ``"xla"``; :func:`specjax.models.numerics.exact_products`)."""
        from specjax.models.numerics import check_numerics, exact_products

        self.numerics = check_numerics(name)
        self.exact_products = exact_products(products)

    @property
    def exact(self) -> bool:
        return getattr(self, "numerics", "fast") == "exact"

    def init_cache(self, batch: int, max_len: int, dtype=None) -> KVCache:
        cfg = self.cfg
        return KVCache.init(cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim,
                            dtype or self.dtype)

    def head(self, h: Array, prefill: bool = False) -> Array:
        """LM head on already-normed hidden states; float32 logits. ``prefill`` (static): in
        exact numerics, the prefill's product (:func:`prefill_matmul`)."""
        if self.head_q is not None:
            return linear(h, self.head_q[...], jnp.float32, self.head_scale[...])
        w = self.embed[...] if self.lm_head is None else self.lm_head[...]
        lead = h.shape[:-1]
        rows = math.prod(lead)
        if self.exact:
            x2 = h.reshape(rows, -1).astype(self.dtype)
            if prefill:
                y = prefill_matmul(x2, w.astype(self.dtype), jnp.float32)
            else:
                y = exact_matmul(x2, w.astype(self.dtype), jnp.float32,
                                 pallas=getattr(self, "exact_products", "xla") == PALLAS,
                                 name="embed" if self.lm_head is None else "lm_head")
            return y.reshape(*lead, w.shape[0])
        chunks = small_gemm_chunks(w.shape, rows, jnp.dtype(self.dtype).itemsize)
        if chunks > 1:  # a few rows (verification): see chunked_matmul
            return chunked_matmul(h.reshape(rows, -1).astype(self.dtype), w.astype(self.dtype),
                                  chunks, jnp.float32).reshape(*lead, w.shape[0])
        return jnp.einsum("...d,vd->...v", h.astype(self.dtype), w.astype(self.dtype),
                          preferred_element_type=jnp.float32)

    def final_logits(self, x: Array) -> Array:
        """Final norm and LM head on a block's output residual stream ``[..., D]`` (what the
        forward does after its last block; an early exit's logits from a middle layer)."""
        if self.exact:
            from specjax.models.numerics import rms_norm_exact as norm
        else:
            norm = rms_norm
        return self.head(norm(x, self.final_norm[...], self.cfg.rms_norm_eps))

    def __call__(
        self,
        tokens: Array,
        positions: Array,
        cache: KVCache,
        *,
        attn_mask: Array | None = None,
        exit_layer: int | None = None,
        skip_attn: Sequence[int] = (),
        skip_mlp: Sequence[int] = (),
        hidden_layers: Sequence[int] = (),
        logits_index: Array | None = None,
        compute_logits: bool = True,
        write_offset: int = 0,
        defer_cache_write: bool = False,
        prefix_empty: bool = False,
    ) -> ForwardOutput:
        """Runs the decoder over a block of new tokens.

        Args:
          tokens: ``int32[B, T]`` new tokens.
          positions: ``int32[B, T]`` their rotary positions.
          cache: the KV cache; new entries go to ``cache.lengths[b] + [0, T)``.
          attn_mask: optional ``bool[B, T, W]`` visibility over the scratch window
            ``cache.lengths[b] + [0, W)`` (``W >= write_offset + T``; default: causal among
            the new tokens, ``W = T``); the committed prefix is always visible.
          write_offset: static: the new block is written at ``cache.lengths[b] +
            write_offset + [0, T)`` (tree drafting feeds one level at a time into scratch
            slots past earlier levels; needs ``attn_mask``).
          exit_layer: stop after this many blocks (``1..num_layers``), then final norm and head.
          skip_attn / skip_mlp: block indices whose attention / MLP sublayer is skipped
            (residual passes through; a skipped attention writes nothing to its cache).
          hidden_layers: block indices whose output residual stream to return.
          logits_index: optional ``int32[B, K]``: compute logits only at these positions.
          compute_logits: False returns no logits (``logits`` is an empty ``[B, T, 0]``).
          defer_cache_write: static: leave the cache unwritten and return the new block's
            keys/values in ``out.new_kv`` (the engine writes them after a ``lax.switch`` over
            verify sizes, which would otherwise copy the whole cache every step).
          prefix_empty: static: every row's committed prefix is empty (prefill into a fresh
            cache): skip attending to the cache.
        """
        cfg = self.cfg
        B, T = tokens.shape
        n_layers = cfg.num_layers if exit_layer is None else int(exit_layer)
        if not 1 <= n_layers <= cfg.num_layers:
            raise ValueError(
                f"exit_layer must be in [1, {cfg.num_layers}] for this model, got {exit_layer}"
            )
        skip_attn, skip_mlp = frozenset(skip_attn), frozenset(skip_mlp)
        for name, s in (("skip_attn", skip_attn), ("skip_mlp", skip_mlp)):
            bad = [i for i in s if not 0 <= i < cfg.num_layers]
            if bad:
                raise ValueError(f"{name} names layers {bad} outside [0, {cfg.num_layers})")
        hidden_layers = tuple(cfg.num_layers - 1 if i == -1 else i for i in hidden_layers)
        dtype = self.dtype
        inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        if write_offset and (attn_mask is None or attn_mask.shape[2] < write_offset + T):
            raise ValueError("write_offset needs an attn_mask over a window of at least "
                             "write_offset + T scratch slots")
        if defer_cache_write and write_offset:
            raise ValueError("defer_cache_write needs write_offset == 0")
        impl = getattr(self, "attention_impl", "dense")
        impl = None if impl == "pallas" else impl
        # visibility over the scratch window: the block's mask, cut at the end of the cache
        if attn_mask is None:
            attn_mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool))[None], (B, T, T))
        W = attn_mask.shape[2]
        in_cache = cache.lengths[:, None] + jnp.arange(W)[None] < cache.max_len
        mask = attn_mask.astype(bool) & in_cache[:, None, :]
        x = jnp.take(self.embed[...], tokens, axis=0).astype(dtype)
        exact = self.exact
        if exact and prefix_empty and not defer_cache_write and not write_offset:
            exact = PREFILL  # a prefill: forms that only have to agree with other prefills
        if exact and getattr(self, "exact_products", "xla") == PALLAS:
            # the Pallas kernels, in a prefill too (nothing probed)
            exact = PALLAS_PREFILL if exact == PREFILL else PALLAS
        if exact:
            from specjax.models.numerics import rms_norm_exact as norm
        else:
            norm = rms_norm
        ks, vs = list(cache.k), list(cache.v)
        new_k, new_v = [None] * cfg.num_layers, [None] * cfg.num_layers
        hidden = {}
        for i in range(n_layers):
            blk = self.layers[i]
            if i not in skip_attn:
                a, ks[i], vs[i], new_k[i], new_v[i] = blk.attn(
                    norm(x, blk.attn_norm[...], cfg.rms_norm_eps), positions, ks[i], vs[i],
                    cache.lengths, mask, inv_freq, dtype, write_offset, impl,
                    write=not defer_cache_write, prefix_empty=prefix_empty, exact=exact,
                )
                x = x + a
            if i not in skip_mlp:
                x = x + blk.mlp(norm(x, blk.mlp_norm[...], cfg.rms_norm_eps), dtype, exact)
            if i in hidden_layers:
                hidden[i] = x
        missing = [i for i in hidden_layers if i not in hidden]
        if missing:
            raise ValueError(f"hidden_layers {missing} are not computed (exit_layer={n_layers})")
        h = norm(x, self.final_norm[...], cfg.rms_norm_eps)
        if not compute_logits:
            logits = jnp.zeros((B, T, 0), jnp.float32)
        elif logits_index is not None:
            hsel = jnp.take_along_axis(h, logits_index[..., None].astype(jnp.int32), axis=1)
            logits = self.head(hsel, prefill=exact == PREFILL)
        else:
            logits = self.head(h, prefill=exact == PREFILL)
        new_cache = KVCache(k=tuple(ks), v=tuple(vs), lengths=cache.lengths)
        return ForwardOutput(
            logits=logits,
            cache=new_cache,
            hidden=tuple(hidden[i] for i in hidden_layers),
            final_hidden=h,
            new_kv=(tuple(new_k), tuple(new_v)) if defer_cache_write else None,
        )
