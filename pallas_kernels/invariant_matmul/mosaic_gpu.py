"""Mosaic GPU (Hopper, ``wgmma``) variant of the batch-invariant product ``x @ w.T``.

Why: the Triton backend of Pallas (:mod:`.kernel`'s ``"triton"`` mode) is deprecated since JAX
0.11; Mosaic GPU is its successor, and its matrix products go through ``plgpu.wgmma`` on
tiles of 64 rows, so the portable ``pallas_call`` kernel cannot target it.

Design, the same invariance argument as :mod:`.kernel`: one CTA (one warpgroup) per output
tile of ``BLOCK_M = 64`` rows x ``block_n`` columns; it walks the input axis ``K`` in blocks of
``BLOCK_K = 64`` (one 128-byte swizzled row of 2-byte values), in order, double-buffering the
``x`` and ``w`` blocks into shared memory by TMA; each block's ``[64, 64] x [64, block_n]``
product is one ``wgmma`` sequence into a fresh float32 accumulator, added to the running
float32 sum in registers; one store at the end. The tile depends on ``N`` alone
(:func:`block_n`), never on ``M``: rows are padded with zeros to a multiple of 64, so a
one-row decode step and a batch of 17 run the same instructions in the same order for every
row, and no ``K`` split across CTAs.

Supported: bfloat16 and float16 operands (``wgmma`` would run float32 in tf32), ``K`` and
``N`` multiples of 64 (SmolLM2's 576, 960, 1536, 3072 and 49152 are); other products go to
the Triton kernel (:func:`.kernel.invariant_matmul`).

Parallelism: one CTA per output tile, so a narrow product has few CTAs (SmolLM2's 960-wide
``wqkv`` at a decode step: 15 on an H100's 132 SMs). A split of ``K`` across CTAs into a fixed
number of parts (a function of ``K`` alone) whose partial sums are added in part order
afterwards would keep the invariance and fill the GPU; not done until the kernel has been
timed on one.

Checked on CPU only (no GPU was lent to the session that wrote it, 2026-12-06):

* exported for CUDA from the CPU (tests/test_invariant_matmul.py): the whole Pallas -> Mosaic
  GPU lowering (``wgmma``, TMA descriptors, barriers) at SmolLM2's shapes;
* the Mosaic GPU interpreter (``InterpretGPUParams``) runs the kernel's logic (TMA copies,
  the double-buffered loop, the in-order sum, the store) with the block product as a jnp dot
  (the 0.10.2 interpreter's ``wgmma`` takes no transposed operand, as in
  :mod:`specjax.pallas_kernels.tree_attention.mosaic_gpu`): a row's bits the same across row
  counts and positions, and equal to :func:`.reference.blocked_matmul_reference`;
* NOT YET RUN ON A GPU: ``bash scripts/gpu_checks.sh OUT invariant_matmul`` runs its tests
  and times it (``SPECJAX_INVARIANT_KERNELS=mosaic_gpu`` selects it, and the attention
  part's Mosaic GPU kernel, for exact decoding).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from specjax.pallas_kernels.mosaic_gpu_common import dtype_reason, transposed

BLOCK_M = 64  # rows per CTA: one warpgroup's wgmma tile
BLOCK_K = 64  # input columns per block: one 128-byte swizzled row of 2-byte values


def block_n(n: int) -> int:
    """Output columns per CTA for a weight of ``n`` rows: 128 when it divides ``n``, else
    64."""
    return 128 if n % 128 == 0 else 64


def unsupported_reason(dtype, n: int, k: int) -> str | None:
    """Why this kernel cannot take a weight ``[n, k]`` of ``dtype``, or None."""
    if (reason := dtype_reason(dtype, "operands")) is not None:
        return reason
    if k % BLOCK_K or n % 64:
        return f"needs K and N multiples of 64, got a weight [{n}, {k}]"
    return None


def _kernel(x_ref,  # [Mp, K] (GMEM)
            w_ref,  # [N, K] (GMEM)
            o_ref,  # f32[Mp, N] (GMEM, out)
            x_smem,  # [2, BLOCK_M, BLOCK_K]
            w_smem,  # [2, bn, BLOCK_K]
            o_smem,  # f32[BLOCK_M, bn]
            x_bars, w_bars,  # a barrier per buffer slot, for each operand
            *, n_k: int, bn: int, interpreted: bool):
    rows = pl.ds(lax.axis_index("m") * BLOCK_M, BLOCK_M)
    cols = pl.ds(lax.axis_index("n") * bn, bn)

    def fetch(i, slot):
        blk = pl.ds(pl.multiple_of(i * BLOCK_K, BLOCK_K), BLOCK_K)
        plgpu.copy_gmem_to_smem(x_ref.at[rows, blk], x_smem.at[slot], x_bars.at[slot])
        plgpu.copy_gmem_to_smem(w_ref.at[cols, blk], w_smem.at[slot], w_bars.at[slot])

    fetch(0, 0)
    layout = plgpu.Layout.WGMMA
    acc0 = jnp.full((BLOCK_M, bn), 0.0, jnp.float32)
    if not interpreted:  # register layouts are a lowering concern (the interpreter has none)
        acc0 = plgpu.layout_cast(acc0, layout)

    def step(i, acc):
        slot = lax.rem(i, 2)

        @pl.when(i + 1 < n_k)
        def _prefetch():  # the other slot's product finished in the previous step
            fetch(i + 1, 1 - slot)

        plgpu.barrier_wait(x_bars.at[slot])
        plgpu.barrier_wait(w_bars.at[slot])
        if interpreted:  # the 0.10.2 interpreter's wgmma takes no transposed operand
            part = lax.dot_general(x_smem[slot], w_smem[slot], (((1,), (1,)), ((), ())),
                                   preferred_element_type=jnp.float32)
        else:
            def product(acc_ref):
                plgpu.wgmma(acc_ref, x_smem.at[slot], transposed(w_smem.at[slot]))
                return acc_ref[...]

            part = pl.run_scoped(product, plgpu.ACC((BLOCK_M, bn), jnp.float32))
        return acc + part  # the blocks in order: the same sum for every row

    acc = lax.fori_loop(0, n_k, step, acc0)
    o_smem[...] = acc
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, o_ref.at[rows, cols])
    plgpu.wait_smem_to_gmem(0)


def invariant_matmul_mosaic_gpu(x: jax.Array, w: jax.Array, out_dtype=jnp.float32, *,
                                interpret=None) -> jax.Array:
    """``x [M, K] @ w [N, K].T``, batch-invariant, with the Mosaic GPU kernel (operands already
    checked by :func:`.kernel.invariant_matmul`). ``interpret``: None, or a
    ``plgpu``-interpreter params object to run the kernel on CPU."""
    m, k = x.shape
    n = w.shape[0]
    reason = unsupported_reason(x.dtype, n, k)
    if reason is not None:
        raise ValueError(f"invariant_matmul (mosaic_gpu) {reason}")
    bn = block_n(n)
    mp = pl.cdiv(max(m, 1), BLOCK_M) * BLOCK_M
    xp = jnp.pad(x, ((0, mp - m), (0, 0))) if mp != m else x
    swizzle = 128  # bytes: one 64-element row of 2-byte values
    transforms = (plgpu.TilingTransform((8, swizzle // x.dtype.itemsize)),
                  plgpu.SwizzleTransform(swizzle))
    body = functools.partial(_kernel, n_k=k // BLOCK_K, bn=bn,
                             interpreted=interpret is not None)
    extra = {} if interpret is None else {"interpret": interpret}
    out = plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct((mp, n), jnp.float32),
        scratch_types=(
            plgpu.SMEM((2, BLOCK_M, BLOCK_K), x.dtype, transforms=transforms),
            plgpu.SMEM((2, bn, BLOCK_K), x.dtype, transforms=transforms),
            plgpu.SMEM((BLOCK_M, bn), jnp.float32),
            plgpu.Barrier(num_barriers=2),
            plgpu.Barrier(num_barriers=2),
        ),
        grid=(mp // BLOCK_M, n // bn),
        grid_names=("m", "n"),
        compiler_params=plgpu.CompilerParams(approx_math=False),
        **extra,
    )(xp, w)
    out = out[:m] if mp != m else out
    return out.astype(out_dtype)
