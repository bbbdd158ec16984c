"""Batch-invariant ``x @ w.T``: a fixed tiling whatever the row count (issue 22, GPU and TPU).

Why. Exact numerics need a token's logits to come out bit-identical whether its row is decoded
alone, verified in a block of k drafted tokens, or batched with other rows. A backend's own
product picks its algorithm by shape (a one-row product runs as a matrix-vector kernel, a
few rows as another kernel, large ones split the input axis across threads), and each
algorithm sums the input axis in its own order. On XLA:CPU the project measures which row
counts share an order and pads to them (:func:`specjax.models.numerics.row_plan`); this
kernel makes the order a property of the program instead, so nothing needs measuring.

How. The grid is ``(ceil(M / block_m), ceil(N / block_n))``: one program per output tile. A
program walks the input axis ``K`` in ``K / block_k`` blocks, in order, adding each block's
``[block_m, block_k] x [block_k, block_n]`` product into a float32 accumulator, and rounds
once to ``out_dtype`` at the end. The blocks (:func:`choose_blocks`) depend on ``N``, ``K``,
the dtype and the backend, never on ``M``; the rows are padded with zeros to a multiple of
``block_m``. So every row of every product of one weight matrix runs the same instructions
in the same order: one compiled tile program, the same per-block product shape, no split of
``K`` across programs (a split-K reduction would make the order depend on the scheduling).
Each output element depends only on its own row of ``x`` and row of ``w`` (padding rows and
the columns past ``N`` of a partial last tile are computed and dropped).

Backends (``mode``):

* ``"interpret"``: ``interpret=True``, any platform (what the CPU tests run; slow);
* ``"triton"``: Pallas' Triton lowering, NVIDIA GPUs (lowered on CPU by the tests; NOT YET RUN
  ON A GPU: no GPU was lent to the session that wrote it, 2026-12-06; Triton is deprecated in
  Pallas since JAX 0.11 in favour of Mosaic GPU, whose matmuls need ``wgmma`` tiles of 64
  rows, so a Mosaic GPU variant is the follow-up);
* ``"tpu"``: Mosaic TPU (lowered for TPU on CPU by the tests; NOT RUN ON TPU HARDWARE);
* ``"tpu_interpret"``: the Mosaic TPU kernel under the TPU interpreter, on CPU;
* ``"mosaic_gpu"``: the Mosaic GPU (Hopper ``wgmma``) kernel of :mod:`.mosaic_gpu` for
  bfloat16 and float16 operands whose ``N`` and ``K`` are multiples of 64 (other products go to
  Triton: float32 because ``wgmma`` would run it in tf32);
  opt-in on a GPU with ``SPECJAX_INVARIANT_KERNELS=mosaic_gpu`` (NOT YET RUN ON A GPU);
  ``"mosaic_gpu_interpret"``: that kernel under the Mosaic GPU interpreter, on CPU.

What is by construction and what is hardware's: the order over the ``K`` blocks is the
program's; inside one block, that a row's dot product is summed the same way in every row of
the tile is a property of the backend's tile product (the MMA/MXU instruction, the same for
every element of one tile shape), which the tests check in interpret mode on CPU and
``scripts/gpu_checks.sh`` (step ``invariant_matmul``) checks on a GPU.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from specjax.pallas_kernels.mosaic_gpu_common import interpreter, portable_mode

MODES = ("interpret", "triton", "tpu", "tpu_interpret")  # the portable pallas_call kernel's
# the kernels' modes: the portable ones' and the Mosaic GPU ones' (:mod:`.mosaic_gpu`, and
# :mod:`specjax.pallas_kernels.invariant_attention.mosaic_gpu` for attention)
KERNEL_MODES = MODES + ("mosaic_gpu", "mosaic_gpu_interpret")
MODE_ENV = "SPECJAX_INVARIANT_KERNELS"  # the kernels' mode when none is passed


class Blocks(NamedTuple):
    """Tile of one program: ``block_m`` rows, ``block_n`` output columns, and the input axis
    walked in blocks of ``block_k``."""

    block_m: int
    block_n: int
    block_k: int


def default_mode() -> str:
    """``"triton"`` on GPU, ``"tpu"`` on TPU, ``"interpret"`` elsewhere."""
    return {"gpu": "triton", "tpu": "tpu"}.get(jax.default_backend(), "interpret")


def kernel_mode() -> str:
    """The invariant kernels' mode (products and attention): ``$SPECJAX_INVARIANT_KERNELS``
    (one of :data:`KERNEL_MODES`) or :func:`default_mode`."""
    mode = os.environ.get(MODE_ENV, "") or default_mode()
    if mode not in KERNEL_MODES:
        raise ValueError(f"${MODE_ENV}={mode!r}: must be one of {', '.join(KERNEL_MODES)}")
    return mode


def _largest_divisor(k: int, options: tuple[int, ...]) -> int | None:
    return next((b for b in options if k % b == 0), None)


def choose_blocks(n: int, k: int, dtype, mode: str) -> Blocks:
    """The tile for a weight matrix ``[n, k]`` of ``dtype`` under ``mode``: a function of
    these alone, never of the row count (that is the invariance).

    * ``block_m``: 16 rows on Triton (its dot needs 16 in every dimension), on TPU the
      sublane tile (8 rows of 4-byte values, 16 of 2-byte), 8 in interpret mode;
    * ``block_n``: 64 on Triton (a partial tile when ``n`` is smaller: Triton loads
      power-of-two blocks), 128 (a lane tile) on TPU, 128 in interpret mode, ``n`` itself
      when smaller there;
    * ``block_k``: on TPU the largest of 512, 256, 128 dividing ``k``, else ``k`` whole (one
      block); elsewhere the largest of 64, 32, 16 dividing ``k``.
    """
    if mode not in KERNEL_MODES:
        raise ValueError(f"mode must be one of {KERNEL_MODES}, got {mode!r}")
    if mode.startswith("mosaic_gpu"):
        from specjax.pallas_kernels.invariant_matmul import mosaic_gpu

        if mosaic_gpu.unsupported_reason(dtype, n, k) is None:
            return Blocks(mosaic_gpu.BLOCK_M, mosaic_gpu.block_n(n), mosaic_gpu.BLOCK_K)
        mode = portable_mode(mode)  # not wgmma's operands
    itemsize = jnp.dtype(dtype).itemsize
    if mode == "triton":
        bm, bn = 16, 64
    elif mode in ("tpu", "tpu_interpret"):
        bm, bn = (8 if itemsize >= 4 else 16), 128
    else:
        bm, bn = 8, 128
    if mode != "triton":  # Triton loads power-of-two blocks: a partial last tile instead
        bn = min(bn, n)
    if mode in ("tpu", "tpu_interpret"):
        bk = _largest_divisor(k, (512, 256, 128)) or k
    else:
        bk = _largest_divisor(k, (64, 32, 16))
        if bk is None:
            raise ValueError(f"invariant_matmul ({mode}): the input axis K={k} must be a "
                             f"multiple of 16")
    return Blocks(bm, bn, bk)


def _kernel(x_ref, w_ref, o_ref, *, block_k: int, n_k: int, precision):
    """One output tile: ``o = sum_i x[:, blk_i] @ w[:, blk_i].T``, blocks in order."""
    def body(i, acc):
        blk = pl.ds(pl.multiple_of(i * block_k, block_k), block_k)
        return acc + jax.lax.dot_general(x_ref[:, blk], w_ref[:, blk], (((1,), (1,)), ((), ())),
                                         precision=precision,
                                         preferred_element_type=jnp.float32)

    acc = jnp.zeros(o_ref.shape, jnp.float32)
    if n_k == 1:
        acc = body(0, acc)
    else:
        acc = jax.lax.fori_loop(0, n_k, body, acc)
    o_ref[...] = acc.astype(o_ref.dtype)


def call_params(mode: str, grid_rank: int) -> tuple:
    """``(interpret, compiler_params)`` of a ``pallas_call`` in ``mode`` over a grid of
    ``grid_rank`` parallel axes (shared with :mod:`specjax.pallas_kernels.invariant_attention`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "interpret":
        return True, None
    if mode == "triton":
        from jax.experimental.pallas import triton as pltriton
        return False, pltriton.CompilerParams(num_warps=4, num_stages=2)
    from jax.experimental.pallas import tpu as pltpu
    params = pltpu.CompilerParams(dimension_semantics=("parallel",) * grid_rank)
    return (pltpu.InterpretParams() if mode == "tpu_interpret" else False), params


def invariant_matmul(x: jax.Array, w: jax.Array, out_dtype=jnp.float32, *,
                     mode: str | None = None, blocks: Blocks | None = None) -> jax.Array:
    """``x [M, K] @ w [N, K].T`` (``w`` in the checkpoint layout ``[out, in]``), accumulated in
    float32 and rounded once to ``out_dtype``, batch-invariant: row ``r`` of the result is the
    same bits for every ``M`` and every position of the row in ``x``.

    Args:
      x: ``[M, K]`` floating-point rows (``M >= 0``).
      w: ``[N, K]``, the same dtype as ``x``.
      out_dtype: the result's dtype.
      mode: one of :data:`KERNEL_MODES`; None: :func:`kernel_mode`. ``"mosaic_gpu"`` (and
        its interpreter) take bfloat16 and float16 operands with ``N`` and ``K`` multiples of
        64; other products go to ``"triton"`` (``"interpret"``).
      blocks: the tile; None: :func:`choose_blocks` (pass the same blocks for every product
        that must agree; the Mosaic GPU kernel's are fixed).
    """
    mode = kernel_mode() if mode is None else mode
    if mode not in KERNEL_MODES:
        raise ValueError(f"mode must be one of {KERNEL_MODES}, got {mode!r}")
    if x.ndim != 2 or w.ndim != 2:
        raise ValueError(f"invariant_matmul: x must be [M, K] and w [N, K], got {x.shape} "
                         f"and {w.shape}")
    m, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k:
        raise ValueError(f"invariant_matmul: x is [M, K={k}] but w is {w.shape}, not [N, {k}]")
    if x.dtype != w.dtype:
        raise ValueError(f"invariant_matmul: x is {x.dtype} and w {w.dtype}; cast one first")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"invariant_matmul: {x.dtype} operands; integer products accumulate "
                         f"exactly in any order and need no invariant kernel")
    if mode.startswith("mosaic_gpu"):
        from specjax.pallas_kernels.invariant_matmul import mosaic_gpu

        if mosaic_gpu.unsupported_reason(x.dtype, n, k) is None:
            if blocks is not None and Blocks(*blocks) != choose_blocks(n, k, x.dtype, mode):
                raise ValueError(f"invariant_matmul (mosaic_gpu): its blocks are fixed at "
                                 f"{tuple(choose_blocks(n, k, x.dtype, mode))}, got {blocks}")
            if m == 0 or n == 0:
                return jnp.zeros((m, n), out_dtype)
            return mosaic_gpu.invariant_matmul_mosaic_gpu(x, w, out_dtype,
                                                          interpret=interpreter(mode))
        mode = portable_mode(mode)  # not wgmma's operands
    b = choose_blocks(n, k, x.dtype, mode) if blocks is None else Blocks(*blocks)
    if k % b.block_k:
        raise ValueError(f"invariant_matmul: block_k={b.block_k} must divide K={k}")
    if m == 0 or n == 0:
        return jnp.zeros((m, n), out_dtype)
    mp = pl.cdiv(m, b.block_m) * b.block_m
    xp = jnp.pad(x, ((0, mp - m), (0, 0))) if mp != m else x
    precision = (jax.lax.Precision.HIGHEST if jnp.dtype(x.dtype) == jnp.float32
                 else jax.lax.Precision.DEFAULT)
    kernel = functools.partial(_kernel, block_k=b.block_k, n_k=k // b.block_k,
                               precision=precision)
    itemsize = jnp.dtype(x.dtype).itemsize
    grid = (mp // b.block_m, pl.cdiv(n, b.block_n))
    interpret, params = call_params(mode, len(grid))
    out = pl.pallas_call(
        kernel, grid=grid,
        in_specs=[pl.BlockSpec((b.block_m, k), lambda i, j: (i, 0)),
                  pl.BlockSpec((b.block_n, k), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((b.block_m, b.block_n), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((mp, n), out_dtype),
        interpret=interpret, compiler_params=params,
        cost_estimate=pl.CostEstimate(
            flops=2 * mp * n * k, transcendentals=0,
            bytes_accessed=(grid[0] * n * k + mp * k) * itemsize
            + mp * n * jnp.dtype(out_dtype).itemsize),
        name="invariant_matmul")(xp, w)
    return out[:m] if mp != m else out
