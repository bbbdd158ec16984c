"""Portable Pallas kernel for the prefix part of tree attention (flash-decoding style).

Used by two backends:

* ``"pallas_interpret"``: ``interpret=True`` (CPU; what the test suite runs);
* ``"pallas_mosaic_tpu"``: the same kernel lowered by Mosaic TPU, with TPU compiler params.
  NOT RUN ON TPU HARDWARE. The test suite runs it under ``pltpu.InterpretParams()`` (the TPU
  interpreter on CPU, which simulates scalar prefetch, VMEM blocks and the grid pipeline) and
  exports it for the TPU platform from CPU (the Pallas -> Mosaic lowering, block-shape rules
  included); Mosaic's own compilation (layouts, VMEM limits) only happens on a TPU.

Design. Grid ``(B, num_splits, blocks_per_split)``; the last axis walks the key blocks of one
split sequentially and accumulates into the (resident) output blocks. One program handles all
kv heads of a row: the K/V block is ``[block_k, KVH * Dh]`` out of the cache viewed as
``[B, S, KVH * Dh]`` (a free reshape, so each block is one contiguous read), and for each kv
head the ``G * T`` queries of its group (``G`` query heads times ``T`` tree nodes) form one
``[G*T, Dh]`` tile: one K/V read serves every tree node and every query head of the group.

Only blocks below the row's length do work. ``lengths`` is scalar-prefetched; the K/V index
map clamps the block index to the row's last valid block, so past the length the block index
repeats and the pipeline issues no new copy (on TPU), and ``pl.when`` skips the compute. Keys
past the length inside the last block (and the padding of a partial block when ``S`` is not a
multiple of ``block_k``) are masked: scores to -inf, values to 0.

Outputs per split: unnormalised ``acc [B, splits, KVH, Mp, Dh]``, running max
``m [B, splits, KVH, Mp, 1]`` and sum ``l`` (f32), merged with the tree part in jnp
(:func:`reference.merge`). ``Mp`` is ``G * T`` rounded up to the sublane tile; padded query
rows are zeros and are dropped.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from specjax.pallas_kernels.tree_attention import reference

MODES = ("interpret", "tpu", "tpu_interpret")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _prefix_kernel(len_ref,  # int32[B] (scalar prefetch)
                   q_ref,  # [KVH, Mp, Dh]
                   k_ref,  # [block_k, KVH * Dh]
                   v_ref,  # [block_k, KVH * Dh]
                   acc_ref,  # f32[KVH, Mp, Dh]
                   m_ref,  # f32[KVH, Mp, 1]
                   l_ref,  # f32[KVH, Mp, 1]
                   *, block_k: int, blocks_per_split: int, kv_heads: int, head_dim: int,
                   scale: float, precision):
    b, split, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    length = len_ref[b]
    start = (split * blocks_per_split + j) * block_k

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)

    @pl.when(start < length)
    def _block():
        key_row = start + jax.lax.broadcasted_iota(jnp.int32, (1, block_k), 1)
        key_col = start + jax.lax.broadcasted_iota(jnp.int32, (block_k, 1), 0)
        for h in range(kv_heads):  # static: one [Mp, Dh] query tile per kv head
            cols = slice(h * head_dim, (h + 1) * head_dim)
            q = q_ref[h]
            k = k_ref[:, cols]
            v = jnp.where(key_col < length, v_ref[:, cols], jnp.zeros((), v_ref.dtype))
            s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision,
                                    preferred_element_type=jnp.float32) * scale
            s = jnp.where(key_row < length, s, -jnp.inf)  # [Mp, block_k]
            m_prev = m_ref[h]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
            p = jnp.exp(s - m_safe)
            alpha = jnp.exp(m_prev - m_safe)
            l_ref[h] = alpha * l_ref[h] + jnp.sum(p, axis=1, keepdims=True)
            pv = jax.lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())),
                                     precision=precision, preferred_element_type=jnp.float32)
            acc_ref[h] = alpha * acc_ref[h] + pv
            m_ref[h] = m_new


def prefix_partial_pallas(qg: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
                          lengths: jax.Array, scale: float, *, block_k: int, num_splits: int,
                          mode: str = "interpret") -> reference.Partial:
    """Prefix part with the Pallas kernel.

    Args:
      qg: [B, KVH, G, T, Dh] grouped queries.
      k_cache, v_cache: [B, S, KVH, Dh].
      lengths: int32[B], clipped to [0, S].
      scale: softmax scale.
      block_k: keys per block (clamped to S).
      num_splits: K-splits per row (parallel grid axis), clamped to the number of blocks.
      mode: "interpret" (generic interpreter), "tpu" (Mosaic TPU), or "tpu_interpret"
        (Mosaic TPU kernel under the TPU interpreter, for CPU tests).

    Returns:
      A :class:`reference.Partial` in the grouped layout, the K-splits already merged.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    b, kvh, g, t, dh = qg.shape
    s = k_cache.shape[1]
    m_rows = g * t
    if s == 0:
        zeros = jnp.zeros((b, kvh, g, t), jnp.float32)
        return reference.Partial(jnp.zeros((b, kvh, g, t, dh), jnp.float32),
                                 jnp.full_like(zeros, -jnp.inf), zeros)
    sublanes = 8 * max(1, 4 // jnp.dtype(qg.dtype).itemsize)
    mp = _round_up(m_rows, sublanes)
    block_k = max(1, min(int(block_k), s))
    n_blocks = pl.cdiv(s, block_k)
    blocks_per_split = pl.cdiv(n_blocks, max(1, min(int(num_splits), n_blocks)))
    splits = pl.cdiv(n_blocks, blocks_per_split)

    q2 = qg.reshape(b, kvh, m_rows, dh)
    if mp != m_rows:
        q2 = jnp.pad(q2, ((0, 0), (0, 0), (0, mp - m_rows), (0, 0)))
    k2 = k_cache.reshape(b, s, kvh * dh)
    v2 = v_cache.reshape(b, s, kvh * dh)
    lengths = jnp.clip(lengths.astype(jnp.int32), 0, s)

    def kv_map(bi, si, ji, lens):
        last = jnp.maximum(pl.cdiv(lens[bi], block_k) - 1, 0)
        return bi, jnp.minimum(si * blocks_per_split + ji, last), 0

    out_map = lambda bi, si, ji, lens: (bi, si, 0, 0, 0)  # noqa: E731
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(b, splits, blocks_per_split),
        in_specs=[
            pl.BlockSpec((None, kvh, mp, dh), lambda bi, si, ji, lens: (bi, 0, 0, 0)),
            pl.BlockSpec((None, block_k, kvh * dh), kv_map),
            pl.BlockSpec((None, block_k, kvh * dh), kv_map),
        ],
        out_specs=[
            pl.BlockSpec((None, None, kvh, mp, dh), out_map),
            pl.BlockSpec((None, None, kvh, mp, 1), out_map),
            pl.BlockSpec((None, None, kvh, mp, 1), out_map),
        ],
    )
    f32 = jnp.float32
    out_shape = [jax.ShapeDtypeStruct((b, splits, kvh, mp, dh), f32),
                 jax.ShapeDtypeStruct((b, splits, kvh, mp, 1), f32),
                 jax.ShapeDtypeStruct((b, splits, kvh, mp, 1), f32)]
    precision = (jax.lax.Precision.HIGHEST if jnp.dtype(qg.dtype) == jnp.float32
                 else jax.lax.Precision.DEFAULT)
    kernel = functools.partial(_prefix_kernel, block_k=block_k,
                               blocks_per_split=blocks_per_split, kv_heads=kvh, head_dim=dh,
                               scale=float(scale), precision=precision)
    if mode == "interpret":
        interpret, compiler_params = True, None
    else:
        interpret = pltpu.InterpretParams() if mode == "tpu_interpret" else False
        compiler_params = pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"))
    itemsize = jnp.dtype(k_cache.dtype).itemsize
    cost = pl.CostEstimate(
        flops=4 * b * kvh * mp * s * dh,
        transcendentals=b * kvh * mp * s,
        bytes_accessed=2 * b * s * kvh * dh * itemsize + q2.size * q2.dtype.itemsize
        + b * splits * kvh * mp * (dh + 2) * 4)
    acc, m, l = pl.pallas_call(
        kernel, grid_spec=grid_spec, out_shape=out_shape, interpret=interpret,
        compiler_params=compiler_params, cost_estimate=cost,
        name="tree_attention_prefix")(lengths, q2, k2, v2)

    # [B, splits, KVH, Mp, ...] -> grouped layout, merged over splits.
    acc = acc[:, :, :, :m_rows].reshape(b, splits, kvh, g, t, dh)
    m = m[:, :, :, :m_rows, 0].reshape(b, splits, kvh, g, t)
    l = l[:, :, :, :m_rows, 0].reshape(b, splits, kvh, g, t)
    return merge_splits(acc, m, l)


def tree_attention_pallas(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask, *,
                          scale: float | None = None, block_k: int = 128, num_splits: int = 1,
                          mode: str = "interpret") -> jax.Array:
    """The whole op with this kernel for the prefix part (shapes as in ``api.tree_attention``);
    ``mode`` as in :func:`prefix_partial_pallas`."""
    _, _, _, dh, _, kvh, _ = reference.check_shapes(q, k_cache, v_cache, lengths, k_tree,
                                                    v_tree, tree_mask)
    scale = reference.default_scale(dh) if scale is None else float(scale)
    qg = reference.group_queries(q, kvh)
    prefix = prefix_partial_pallas(qg, k_cache, v_cache, lengths, scale, block_k=block_k,
                                   num_splits=num_splits, mode=mode)
    return reference.combine_with_tree(qg, prefix, k_tree, v_tree, tree_mask, scale, q.dtype)


def merge_splits(acc: jax.Array, m: jax.Array, l: jax.Array) -> reference.Partial:
    """Merges per-split partials (split axis 1) into one unnormalised partial."""
    m_all = jnp.max(m, axis=1)
    m_safe = jnp.where(jnp.isneginf(m_all), 0.0, m_all)
    alpha = jnp.exp(m - m_safe[:, None])  # 0 for an empty split
    return reference.Partial(jnp.sum(alpha[..., None] * acc, axis=1), m_all,
                             jnp.sum(alpha * l, axis=1))
