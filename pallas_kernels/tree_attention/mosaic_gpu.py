"""Mosaic GPU (Hopper) kernel for the prefix part of tree attention.

Written against the ``jax.experimental.pallas.mosaic_gpu`` API of JAX 0.10.2 (installed on the
CPU development machine) and run with 0.11.2 on an H100 80GB HBM3 on 2026-11-24:

* on the H100: the kernel compiled and ran; the dense-oracle tests passed for a cache shorter
  than one block and failed, by lowering errors, for caches of 150 and 100 slots (see the
  ``S % 8`` bullet below for the cause and the fix); bfloat16 timings in docs/benchmarks.md
  (faster than "xla", 19% of the copy bandwidth at best);
* NOT YET ON A GPU: the fix for caches whose length is not a multiple of 8 (no GPU was lent
  to the session that made it), checked on CPU only;
* on CPU (tests/test_tree_attention.py): exporting for the ``cuda`` platform runs the whole
  Pallas -> Mosaic GPU lowering (wgmma ``m64n64k16`` bf16, TMA descriptors, mbarriers) at
  cache lengths 2048, 200, 150 and 40 (the export reproduces the H100's ``S % 8`` error); the
  Mosaic GPU interpreter (``InterpretGPUParams``) runs the kernel's logic (TMA copies,
  barriers, the length-bounded double-buffered loop, masks, the V-tail zeroing, the stores)
  against the dense oracle, with two substitutions forced by the 0.10.2 interpreter: the two
  matmuls are jnp dots (its wgmma takes neither a transposed nor a register operand) and
  register-layout casts are skipped.

Why a separate kernel: the Triton backend of Pallas is deprecated since JAX 0.11, and Mosaic
GPU has no lowering for ``jnp.dot`` inside a portable ``pallas_call`` (matmuls go through
``plgpu.wgmma``, and ``pl.pallas_call`` for Mosaic GPU is itself deprecated in favour of
``plgpu.kernel``), so the portable kernel in :mod:`.kernel` cannot target it.

Design (flash decoding, one warpgroup per CTA):

* grid ``(B * KVH, row_tiles, num_splits)``; a CTA takes 64 query rows of one kv head's
  ``[G * T, Dh]`` query tile (G query heads times T tree nodes: one K/V read serves them all)
  and one K-split of the row's cache (when ``G * T > 64`` the row tiles of a head read the
  same K/V blocks, mostly from L2);
* it loops over the split's key blocks below ``lengths[b]`` only (the trip count is computed
  from the length, so no copy is issued past it), double-buffering K and V blocks
  (``[block_k, Dh]`` TMA boxes straight out of the ``[B, S, KVH, Dh]`` cache) in SMEM;
* scores ``q @ k^T`` and ``p @ v`` are wgmma with float32 accumulators, online softmax in
  registers; the block that straddles the length has its V rows past the length zeroed in
  SMEM before ``p @ v`` (those slots may hold NaN and ``0 * NaN`` is NaN);
* every TMA box of the cache starts at a multiple of ``block_k`` (the swizzled SMEM tiling
  needs a start that is provably a multiple of 8 rows); when ``S`` is not a multiple of
  ``block_k``, the last partial block is read from a small zero-padded copy of those
  ``S % block_k`` keys;
* ``S % 8``: the cache's TMA descriptor tiles its S dimension by 8 rows, so a cache is read in
  place only when ``S`` is a multiple of 8; otherwise the kernel gets its whole blocks (a
  slice, which XLA copies) plus the tail buffer;
* outputs per split: unnormalised ``acc``, max ``m`` and sum ``l`` (float32), merged with the
  other splits and the tree part in jnp.

Supported: bfloat16/float16 inputs (wgmma would run float32 in tf32, below this op's float32
tolerance, so float32 goes to "xla"), ``Dh`` a multiple of 64, ``block_k`` a multiple of 64.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from specjax.pallas_kernels.mosaic_gpu_common import dtype_reason, transposed
from specjax.pallas_kernels.tree_attention import kernel as portable
from specjax.pallas_kernels.tree_attention import reference

BLOCK_M = 64  # query rows per CTA: one warpgroup's wgmma tile


def unsupported_reason(dtype, head_dim: int, block_k: int) -> str | None:
    """Why this kernel cannot take these inputs, or None."""
    if (reason := dtype_reason(dtype)) is not None:
        return reason
    if head_dim % 64:
        return f"needs a head dim that is a multiple of 64, got {head_dim}"
    if block_k % 64:
        return f"needs block_k a multiple of 64, got {block_k}"
    return None


_TMA_ROWS = 8  # the S dimension of a cache TMA descriptor is tiled by this many rows


def _prefix_kernel(len_ref,  # int32[B] (GMEM)
                   q_ref,  # [B, KVH, Mp, Dh] (GMEM)
                   k_ref,  # [B, S, KVH, Dh] (GMEM)
                   v_ref,  # [B, S, KVH, Dh] (GMEM)
                   kt_ref,  # [B, block_k, KVH, Dh] (GMEM): keys of the last partial block
                   vt_ref,  # [B, block_k, KVH, Dh] (GMEM): values of the last partial block
                   acc_ref,  # f32[B, splits, KVH, Mp, Dh] (GMEM, out)
                   m_ref,  # f32[B, splits, KVH, Mp] (GMEM, out)
                   l_ref,  # f32[B, splits, KVH, Mp] (GMEM, out)
                   q_smem,  # [BLOCK_M, Dh]
                   k_smem,  # [2, block_k, Dh]
                   v_smem,  # [2, block_k, Dh]
                   o_smem,  # f32[BLOCK_M, Dh]
                   m_smem,  # f32[BLOCK_M]
                   l_smem,  # f32[BLOCK_M]
                   q_bar, k_bar, v_bar,
                   *, kv_heads: int, full_blocks: int, block_k: int, blocks_per_split: int,
                   head_dim: int, scale: float, interpreted: bool):
    bh, row_tile, split = (lax.axis_index("bh"), lax.axis_index("rows"),
                           lax.axis_index("split"))
    b = lax.div(bh, jnp.int32(kv_heads))
    h = lax.rem(bh, jnp.int32(kv_heads))
    rows = pl.ds(row_tile * BLOCK_M, BLOCK_M)
    length = len_ref[b]
    first = split * blocks_per_split
    n_blocks = jnp.maximum(
        jnp.minimum(first + blocks_per_split, lax.div(length + (block_k - 1), block_k)) - first,
        0)
    dtype = q_smem.dtype

    def fetch(i, slot):
        blk = first + i

        # A TMA box of the cache starts at a multiple of block_k (the SMEM tiling needs a
        # start that is provably a multiple of its 8 rows).
        @pl.when(blk < full_blocks)
        def _from_cache():
            keys = pl.ds(pl.multiple_of(blk * block_k, block_k), block_k)
            plgpu.copy_gmem_to_smem(k_ref.at[b, keys, h], k_smem.at[slot], k_bar.at[slot])
            plgpu.copy_gmem_to_smem(v_ref.at[b, keys, h], v_smem.at[slot], v_bar.at[slot])

        @pl.when(blk >= full_blocks)
        def _from_tail():  # the partial last block, zero-padded to block_k rows outside
            plgpu.copy_gmem_to_smem(kt_ref.at[b, :, h], k_smem.at[slot], k_bar.at[slot])
            plgpu.copy_gmem_to_smem(vt_ref.at[b, :, h], v_smem.at[slot], v_bar.at[slot])

    plgpu.copy_gmem_to_smem(q_ref.at[b, h, rows], q_smem, q_bar)

    @pl.when(n_blocks > 0)
    def _prologue():
        fetch(0, 0)

    plgpu.barrier_wait(q_bar)
    # Register layouts are a lowering concern; the Mosaic GPU interpreter (CPU tests) has no
    # rule for them, so they are left out when interpreting.
    layout = plgpu.Layout.WGMMA

    def cast(x, lay):
        return x if interpreted else plgpu.layout_cast(x, lay)

    def iota(shape, dim):
        if interpreted:
            return lax.broadcasted_iota(jnp.int32, shape, dim)
        return plgpu.broadcasted_iota(jnp.int32, shape, dim, layout=layout)

    m0 = cast(jnp.full((BLOCK_M,), -jnp.inf, jnp.float32), layout.reduce(1))
    l0 = cast(jnp.full((BLOCK_M,), 0.0, jnp.float32), layout.reduce(1))
    acc0 = cast(jnp.full((BLOCK_M, head_dim), 0.0, jnp.float32), layout)

    def step(i, carry):
        acc, m_prev, l_prev = carry
        slot = lax.rem(i, 2)

        @pl.when(i + 1 < n_blocks)
        def _prefetch():  # the other slot's wgmmas finished in the previous step
            fetch(i + 1, 1 - slot)

        plgpu.barrier_wait(k_bar.at[slot])

        def qk(acc_ref):
            plgpu.wgmma(acc_ref, q_smem, transposed(k_smem.at[slot]))
            return acc_ref[...]

        if interpreted:  # the interpreter's wgmma takes no transposed operand (0.10.2)
            s = lax.dot_general(q_smem[...], k_smem[slot], (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32)
        else:
            s = pl.run_scoped(qk, plgpu.ACC((BLOCK_M, block_k), jnp.float32))
        s = s * scale
        start = (first + i) * block_k
        key = start + iota((BLOCK_M, block_k), 1)
        s = jnp.where(key < length, s, -jnp.inf)
        # Every processed block holds a visible key, so the new max is finite.
        m_new = jnp.maximum(m_prev, s.max(axis=1))
        p = jnp.exp(s - lax.broadcast_in_dim(m_new, s.shape, [0]))
        alpha = jnp.exp(m_prev - m_new)
        l_new = l_prev * alpha + p.sum(axis=1)
        acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])

        plgpu.barrier_wait(v_bar.at[slot])

        @pl.when(start + block_k > length)
        def _zero_v_tail():  # slots past the length may hold NaN: 0 * NaN = NaN
            v = v_smem[slot]
            key_row = start + iota((block_k, head_dim), 0)
            v_smem[slot] = jnp.where(key_row < length, v, jnp.zeros((), v.dtype))
            plgpu.commit_smem()  # generic-proxy stores before wgmma's async-proxy reads

        def pv(acc_ref):
            plgpu.wgmma(acc_ref, p.astype(dtype), v_smem.at[slot])
            return acc_ref[...]

        if interpreted:  # nor a register operand (0.10.2)
            pv_out = lax.dot_general(p.astype(dtype), v_smem[slot], (((1,), (0,)), ((), ())),
                                     preferred_element_type=jnp.float32)
        else:
            pv_out = pl.run_scoped(pv, plgpu.ACC((BLOCK_M, head_dim), jnp.float32))
        acc = acc + pv_out
        return acc, m_new, l_new

    acc, m, l = lax.fori_loop(0, n_blocks, step, (acc0, m0, l0))
    o_smem[...] = acc
    m_smem[...] = m
    l_smem[...] = l
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, acc_ref.at[b, split, h, rows])
    plgpu.copy_smem_to_gmem(m_smem, m_ref.at[b, split, h, rows])
    plgpu.copy_smem_to_gmem(l_smem, l_ref.at[b, split, h, rows])
    plgpu.wait_smem_to_gmem(0)


def prefix_partial_mosaic_gpu(qg: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
                              lengths: jax.Array, scale: float, *, block_k: int = 64,
                              num_splits: int = 1, interpret=None) -> reference.Partial:
    """Prefix part with the Mosaic GPU kernel (shapes as in
    :func:`kernel.prefix_partial_pallas`). ``interpret``: None, or a
    ``plgpu``-interpreter params object to run the kernel on CPU."""
    b, kvh, g, t, dh = qg.shape
    reason = unsupported_reason(qg.dtype, dh, block_k)
    if reason is not None:
        raise ValueError(f"pallas_mosaic_gpu {reason}")
    s = k_cache.shape[1]
    full_blocks = s // block_k
    # The last partial block (S % block_k keys) is copied, zero-padded, into a small
    # [B, block_k, KVH, Dh] buffer: every TMA box is then full and starts at a multiple of
    # block_k. With no partial block the buffer is a stand-in that is never read.
    tail_rows = s - full_blocks * block_k
    pad = ((0, 0), (0, block_k - tail_rows), (0, 0), (0, 0))
    k_tail = jnp.pad(k_cache[:, full_blocks * block_k:], pad).astype(qg.dtype)
    v_tail = jnp.pad(v_cache[:, full_blocks * block_k:], pad).astype(qg.dtype)
    # The cache goes to the kernel as it is (no copy) when its TMA descriptor can take it: S
    # a multiple of the descriptor's 8-row tiling and at least one whole block (one TMA box).
    # With no whole block, the tail buffer stands in for it (never read); when S is not a
    # multiple of 8, the kernel gets the whole blocks only, a slice XLA materialises (a copy
    # of the cache on every call; the engine's default cache lengths are multiples of 64, so
    # never there).
    if not full_blocks:
        k_main, v_main = k_tail, v_tail
    elif s % _TMA_ROWS:
        k_main = k_cache[:, :full_blocks * block_k]
        v_main = v_cache[:, :full_blocks * block_k]
    else:
        k_main, v_main = k_cache, v_cache
    m_rows = g * t
    mp = portable._round_up(m_rows, BLOCK_M)
    n_blocks = pl.cdiv(s, block_k)
    blocks_per_split = pl.cdiv(n_blocks, max(1, min(int(num_splits), n_blocks)))
    splits = pl.cdiv(n_blocks, blocks_per_split)
    q2 = qg.reshape(b, kvh, m_rows, dh)
    if mp != m_rows:
        q2 = jnp.pad(q2, ((0, 0), (0, 0), (0, mp - m_rows), (0, 0)))
    lengths = jnp.clip(lengths.astype(jnp.int32), 0, s)

    swizzle = 128  # bytes: one 64-element bf16/f16 row
    transforms = (plgpu.TilingTransform((8, swizzle // qg.dtype.itemsize)),
                  plgpu.SwizzleTransform(swizzle))
    f32 = jnp.float32
    body = functools.partial(_prefix_kernel, kv_heads=kvh, full_blocks=full_blocks,
                             block_k=block_k, blocks_per_split=blocks_per_split, head_dim=dh,
                             scale=float(scale), interpreted=interpret is not None)
    extra = {} if interpret is None else {"interpret": interpret}
    call = plgpu.kernel(
        body,
        out_type=(jax.ShapeDtypeStruct((b, splits, kvh, mp, dh), f32),
                  jax.ShapeDtypeStruct((b, splits, kvh, mp), f32),
                  jax.ShapeDtypeStruct((b, splits, kvh, mp), f32)),
        scratch_types=(
            plgpu.SMEM((BLOCK_M, dh), qg.dtype, transforms=transforms),
            plgpu.SMEM((2, block_k, dh), qg.dtype, transforms=transforms),
            plgpu.SMEM((2, block_k, dh), qg.dtype, transforms=transforms),
            plgpu.SMEM((BLOCK_M, dh), f32),
            plgpu.SMEM((BLOCK_M,), f32),
            plgpu.SMEM((BLOCK_M,), f32),
            plgpu.Barrier(),
            plgpu.Barrier(num_barriers=2),
            plgpu.Barrier(num_barriers=2),
        ),
        grid=(b * kvh, mp // BLOCK_M, splits),
        grid_names=("bh", "rows", "split"),
        compiler_params=plgpu.CompilerParams(approx_math=False),
        **extra,
    )
    acc, m, l = call(lengths, q2, k_main.astype(qg.dtype), v_main.astype(qg.dtype), k_tail,
                     v_tail)
    acc = acc[:, :, :, :m_rows].reshape(b, splits, kvh, g, t, dh)
    m = m[:, :, :, :m_rows].reshape(b, splits, kvh, g, t)
    l = l[:, :, :, :m_rows].reshape(b, splits, kvh, g, t)
    return portable.merge_splits(acc, m, l)


def tree_attention_mosaic_gpu(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask, *,
                              scale: float | None = None, block_k: int = 64,
                              num_splits: int = 1, interpret=None) -> jax.Array:
    """The whole op with this kernel for the prefix part (shapes as in
    ``api.tree_attention``)."""
    _, _, _, dh, _, kvh, _ = reference.check_shapes(q, k_cache, v_cache, lengths, k_tree,
                                                    v_tree, tree_mask)
    scale = reference.default_scale(dh) if scale is None else float(scale)
    qg = reference.group_queries(q, kvh)
    prefix = prefix_partial_mosaic_gpu(qg, k_cache, v_cache, lengths, scale, block_k=block_k,
                                       num_splits=num_splits, interpret=interpret)
    return reference.combine_with_tree(qg, prefix, k_tree, v_tree, tree_mask, scale, q.dtype)
