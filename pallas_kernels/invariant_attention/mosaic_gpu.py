"""Mosaic GPU (Hopper, ``wgmma``) variant of the batch-invariant attention part.

The contract and the invariance argument of :mod:`.kernel` (the product part of exact
numerics' attention: scores over the visible cache slots, their max with the gathered tail's,
``exp``, the sums and ``p @ v`` in float32, unnormalised), with Mosaic GPU's tiles: one CTA (one
warpgroup) per tile of ``BLOCK_M = 64`` query rows (token x query head of one kv head, padded)
of one row and kv head; the cache row in blocks of ``BLOCK_S = 64`` slots at fixed offsets,
walked twice: the max (order-free), then, in block order, each block's ``sum(p)`` added to
``l`` and its ``p @ v`` (one ``wgmma`` into a fresh accumulator) added to the output in
registers. Each pass double-buffers its key, value and visibility blocks by TMA. The tile
depends on nothing but the dtype, so a one-token decode step, a verify block and a batch run
the same instructions for every query; slots a query does not see add exact zeros (scores
selected to ``-inf``; values that are not finite zeroed in shared memory first), so a longer
cache changes no bits.

The visibility ``pre`` goes in as float32 (1 visible, 0 not) ``[B, rows, S]`` blocks; the
other part's max ``m_t`` as ``[B, KVH, rows, 32]`` (repeated: a 64-value vector cannot be
loaded by a warpgroup of 128 threads, a ``[64, 32]`` tile can, and its row max is the value).

Supported: bfloat16 and float16 (``wgmma`` would run float32 in tf32), head dims 64 and 128
(SmolLM2's 64; at 256 the buffers would need ~264 KB of shared memory, over a Hopper SM's 227
KB). Other inputs keep the Triton kernel.

Checked on CPU only (no GPU was lent to the session that wrote it, 2026-12-06): exported for
CUDA (the whole Mosaic GPU lowering: wgmma, TMA, barriers, the masked selects); in the Mosaic
GPU interpreter (block products as jnp dots: the 0.10.2 interpreter's ``wgmma`` takes no
transposed or register operand) a query's bits are the same alone, among other tokens and
rows, and over a longer cache with NaN scratch, and the values match the reference. NOT YET
RUN ON A GPU.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from specjax.pallas_kernels.invariant_attention import layout as kv_layout
from specjax.pallas_kernels.mosaic_gpu_common import dtype_reason, transposed

BLOCK_M = 64  # query rows per CTA: one warpgroup's wgmma tile
BLOCK_S = 64  # cache slots per block
MT_COLS = 32  # m_t's tile width: one 128-byte row of float32
# head dims it takes: at 256 its shared memory (~264 KB) passes a Hopper SM's 227 KB
HEAD_DIMS = (64, 128)


def unsupported_reason(dtype, head_dim: int) -> str | None:
    """Why this kernel cannot take these inputs, or None."""
    if (reason := dtype_reason(dtype)) is not None:
        return reason
    if head_dim not in HEAD_DIMS:
        return (f"needs a head dim of {' or '.join(map(str, HEAD_DIMS))} (shared memory and "
                f"registers), got {head_dim}")
    return None


def _kernel(q_ref,  # [B, KVH, Mp, Dh] (GMEM)
            k_ref,  # [B, KVH, Sp, Dh] (GMEM)
            v_ref,  # [B, KVH, Sp, Dh] (GMEM)
            vis_ref,  # f32[B, Mp, Sp] (GMEM): 1 where the query reads the slot
            mt_ref,  # f32[B, KVH, Mp, MT_COLS] (GMEM): m_t repeated along the last axis
            out_ref,  # f32[B, KVH, Mp, Dh] (GMEM, out)
            l_ref,  # f32[B, KVH, Mp] (GMEM, out)
            m_ref,  # f32[B, KVH, Mp] (GMEM, out)
            q_smem,  # [BLOCK_M, Dh]
            k_smem,  # [2, BLOCK_S, Dh]
            v_smem,  # [2, BLOCK_S, Dh]
            vis_smem,  # f32[2, BLOCK_M, BLOCK_S]
            mt_smem,  # f32[BLOCK_M, MT_COLS]
            o_smem,  # f32[BLOCK_M, Dh]
            l_smem,  # f32[BLOCK_M]
            m_smem,  # f32[BLOCK_M]
            q_bar, k1_bar, vis1_bar, k2_bar, vis2_bar, v_bar,
            *, kv_heads: int, n_s: int, head_dim: int, scale: float, interpreted: bool):
    bh, tile = lax.axis_index("bh"), lax.axis_index("rows")
    b = lax.div(bh, jnp.int32(kv_heads))
    h = lax.rem(bh, jnp.int32(kv_heads))
    rows = pl.ds(tile * BLOCK_M, BLOCK_M)
    dtype = q_smem.dtype

    def block(j):
        return pl.ds(pl.multiple_of(j * BLOCK_S, BLOCK_S), BLOCK_S)

    def fetch(j, slot, k_bar, vis_bar, with_v: bool):
        plgpu.copy_gmem_to_smem(k_ref.at[b, h, block(j)], k_smem.at[slot], k_bar.at[slot])
        plgpu.copy_gmem_to_smem(vis_ref.at[b, rows, block(j)], vis_smem.at[slot],
                                vis_bar.at[slot])
        if with_v:
            plgpu.copy_gmem_to_smem(v_ref.at[b, h, block(j)], v_smem.at[slot], v_bar.at[slot])

    plgpu.copy_gmem_to_smem(q_ref.at[b, h, rows], q_smem, q_bar.at[0])
    plgpu.copy_gmem_to_smem(mt_ref.at[b, h, rows], mt_smem, q_bar.at[1])
    fetch(0, 0, k1_bar, vis1_bar, False)
    plgpu.barrier_wait(q_bar.at[0])
    plgpu.barrier_wait(q_bar.at[1])
    layout = plgpu.Layout.WGMMA

    def cast(x, lay):
        return x if interpreted else plgpu.layout_cast(x, lay)

    def scores(slot):
        """The block's scores, ``-inf`` where the query does not read the slot."""
        if interpreted:  # the 0.10.2 interpreter's wgmma takes no transposed operand
            s = lax.dot_general(q_smem[...], k_smem[slot], (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32)
        else:
            def qk(acc_ref):
                plgpu.wgmma(acc_ref, q_smem, transposed(k_smem.at[slot]))
                return acc_ref[...]

            s = pl.run_scoped(qk, plgpu.ACC((BLOCK_M, BLOCK_S), jnp.float32))
        return jnp.where(vis_smem[slot] > 0.5, s * scale, -jnp.inf)

    def max_step(j, m):
        slot = lax.rem(j, 2)

        @pl.when(j + 1 < n_s)
        def _prefetch():
            fetch(j + 1, 1 - slot, k1_bar, vis1_bar, False)

        plgpu.barrier_wait(k1_bar.at[slot])
        plgpu.barrier_wait(vis1_bar.at[slot])
        return jnp.maximum(m, scores(slot).max(axis=1))

    m0 = cast(jnp.full((BLOCK_M,), -jnp.inf, jnp.float32), layout.reduce(1))
    m = lax.fori_loop(0, n_s, max_step, m0)
    m = jnp.maximum(m, mt_smem[...].max(axis=1))  # the max of equal values: m_t itself
    m = jnp.where(m == -jnp.inf, 0.0, m)  # a query that sees nothing: zeros
    fetch(0, 0, k2_bar, vis2_bar, True)

    def sum_step(j, carry):
        l, acc = carry
        slot = lax.rem(j, 2)

        @pl.when(j + 1 < n_s)
        def _prefetch():  # the other slot's products finished in the previous step
            fetch(j + 1, 1 - slot, k2_bar, vis2_bar, True)

        plgpu.barrier_wait(k2_bar.at[slot])
        plgpu.barrier_wait(vis2_bar.at[slot])
        p = jnp.exp(scores(slot) - lax.broadcast_in_dim(m, (BLOCK_M, BLOCK_S), [0]))
        plgpu.barrier_wait(v_bar.at[slot])
        v = v_smem[slot]  # scratch no query reads may be non-finite: 0 * NaN = NaN
        v_smem[slot] = jnp.where(jnp.abs(v) < jnp.inf, v, jnp.zeros((), v.dtype))
        plgpu.commit_smem()  # generic-proxy stores before wgmma's async-proxy reads
        if interpreted:  # nor a register operand (0.10.2)
            pv = lax.dot_general(p.astype(dtype), v_smem[slot], (((1,), (0,)), ((), ())),
                                 preferred_element_type=jnp.float32)
        else:
            def product(acc_ref):
                plgpu.wgmma(acc_ref, p.astype(dtype), v_smem.at[slot])
                return acc_ref[...]

            pv = pl.run_scoped(product, plgpu.ACC((BLOCK_M, head_dim), jnp.float32))
        return l + p.sum(axis=1), acc + pv  # the blocks in order

    l0 = cast(jnp.full((BLOCK_M,), 0.0, jnp.float32), layout.reduce(1))
    acc0 = cast(jnp.full((BLOCK_M, head_dim), 0.0, jnp.float32), layout)
    l, acc = lax.fori_loop(0, n_s, sum_step, (l0, acc0))
    o_smem[...] = acc
    l_smem[...] = l
    m_smem[...] = m
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, out_ref.at[b, h, rows])
    plgpu.copy_smem_to_gmem(l_smem, l_ref.at[b, h, rows])
    plgpu.copy_smem_to_gmem(m_smem, m_ref.at[b, h, rows])
    plgpu.wait_smem_to_gmem(0)


def invariant_attention_part_mosaic_gpu(q, k_all, v_all, pre, m_t, dtype, *, interpret=None):
    """:func:`.kernel.invariant_attention_part` (same arguments and results, shapes checked
    there) with the Mosaic GPU kernel. ``interpret``: None, or a ``plgpu``-interpreter params
    object to run it on CPU."""
    B, T, H, hd = q.shape
    kvh = k_all.shape[1]
    reason = unsupported_reason(dtype, hd)
    if reason is not None:
        raise ValueError(f"invariant_attention_part (mosaic_gpu) {reason}")
    G = H // kvh
    if B == 0 or T == 0:  # an empty grid: nothing to compute
        f32 = jnp.float32
        return (jnp.zeros((B, T, kvh, G, hd), f32), jnp.zeros((B, kvh, G, T), f32),
                jnp.zeros((B, kvh, G, T), f32))
    qr, k, v, vis, mt = kv_layout.per_kv_head(q, k_all, v_all, pre, m_t, dtype, BLOCK_M,
                                              BLOCK_S, jnp.float32)
    mp, sp = qr.shape[2], k.shape[2]
    # a [64]-vector load needs 128 elements per warpgroup: m_t goes in as a [64, 32] tile
    mt = jnp.broadcast_to(mt[..., None], (B, kvh, mp, MT_COLS))
    swizzle = 128  # bytes: one row of 64 2-byte values, or of 32 float32 ones
    half = (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)),
            plgpu.SwizzleTransform(swizzle))
    f32_tiles = (plgpu.TilingTransform((8, swizzle // 4)), plgpu.SwizzleTransform(swizzle))
    f32 = jnp.float32
    body = functools.partial(_kernel, kv_heads=kvh, n_s=sp // BLOCK_S, head_dim=hd,
                             scale=1.0 / math.sqrt(hd), interpreted=interpret is not None)
    extra = {} if interpret is None else {"interpret": interpret}
    out, l, m = plgpu.kernel(
        body,
        out_type=(jax.ShapeDtypeStruct((B, kvh, mp, hd), f32),
                  jax.ShapeDtypeStruct((B, kvh, mp), f32),
                  jax.ShapeDtypeStruct((B, kvh, mp), f32)),
        scratch_types=(
            plgpu.SMEM((BLOCK_M, hd), dtype, transforms=half),
            plgpu.SMEM((2, BLOCK_S, hd), dtype, transforms=half),
            plgpu.SMEM((2, BLOCK_S, hd), dtype, transforms=half),
            plgpu.SMEM((2, BLOCK_M, BLOCK_S), f32, transforms=f32_tiles),
            plgpu.SMEM((BLOCK_M, MT_COLS), f32, transforms=f32_tiles),
            plgpu.SMEM((BLOCK_M, hd), f32),
            plgpu.SMEM((BLOCK_M,), f32),
            plgpu.SMEM((BLOCK_M,), f32),
            plgpu.Barrier(num_barriers=2),  # q, m_t
            plgpu.Barrier(num_barriers=2),  # keys, pass 1
            plgpu.Barrier(num_barriers=2),  # visibility, pass 1
            plgpu.Barrier(num_barriers=2),  # keys, pass 2
            plgpu.Barrier(num_barriers=2),  # visibility, pass 2
            plgpu.Barrier(num_barriers=2),  # values
        ),
        grid=(B * kvh, mp // BLOCK_M),
        grid_names=("bh", "rows"),
        compiler_params=plgpu.CompilerParams(approx_math=False),
        **extra,
    )(qr, k, v, vis, mt)
    return kv_layout.from_kv_head_rows(out, l, m, T, G)
