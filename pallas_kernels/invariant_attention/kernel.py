"""Batch-invariant attention over a cache row (issue 22, GPU and TPU): the product part of exact
numerics' attention (:func:`specjax.models.numerics.exact_attention`; its last ``tail`` keys
per query are gathered and summed element-wise there, in position order).

The contract of :func:`specjax.models.numerics._product_attention`: for each query, its scores
against the visible slots of its cache row (``pre``), their max together with the tail's max
``m_t``, the exponentials ``p = exp(s - m)``, their sum ``l`` and the product ``p @ v``;
unnormalised. There the order of the sums is pinned by padding the query rows to a row count
measured to share XLA's order (the probe); here it is the program's:

* grid ``(B, KVH, ceil(G * T / block_m))``: one program per tile of ``block_m`` query rows of
  one kv head (row ``t * G + g``: token ``t``, query head ``g`` of the group), rows padded
  with zeros (and nothing visible) to a multiple of ``block_m``;
* a program walks the cache row in blocks of ``block_s`` slots at fixed offsets
  (``[j * block_s, (j + 1) * block_s)``) twice: first for the max (order-free), then, in
  block order, adding each block's ``sum(p)`` to ``l`` and ``p @ v`` to the output in float32;
* ``block_m`` and ``block_s`` depend on the backend and dtype only, never on ``T``, ``B`` or
  ``S``; the cache is padded to a multiple of ``block_s`` when it is not one (cache lengths
  are multiples of 256 in decoding). Slots no query of a row sees contribute exact zeros
  (``exp(-inf) = 0``; values that are not finite, scratch no query reads, are zeroed first),
  so a longer cache adds only zeros: a row's bits do not depend on its batch's cache length.

Backends as in :mod:`specjax.pallas_kernels.invariant_matmul`: ``"interpret"``, ``"triton"``
(NOT YET RUN ON A GPU), ``"tpu"`` (NOT RUN ON TPU HARDWARE), ``"tpu_interpret"``, and
``"mosaic_gpu"`` / ``"mosaic_gpu_interpret"`` (:mod:`.mosaic_gpu`: bfloat16 and float16 with a
head dim of 64 or 128; other inputs go to ``"triton"`` / ``"interpret"``; NOT YET RUN ON A
GPU). Within one
block, that each row of the tile sums its dot products and its ``p`` alike is the tile
instructions' property; checked in interpret mode on CPU by the tests, on a GPU by
``scripts/gpu_checks.sh`` (step ``invariant_matmul``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from specjax.pallas_kernels.invariant_attention import layout
from specjax.pallas_kernels.mosaic_gpu_common import interpreter, portable_mode

MODES = ("interpret", "triton", "tpu", "tpu_interpret")


def block_sizes(dtype, mode: str) -> tuple[int, int]:
    """``(block_m, block_s)``: query rows per program and cache slots per block."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "triton":
        return 16, 64
    if mode in ("tpu", "tpu_interpret"):
        return (8 if jnp.dtype(dtype).itemsize >= 4 else 16), 128
    return 8, 64


def _kernel(q_ref, k_ref, v_ref, pre_ref, mt_ref, out_ref, l_ref, m_ref, *, block_s: int,
            n_s: int, scale: float, dtype, precision):
    q = q_ref[...]

    def scores(j):
        blk = pl.ds(pl.multiple_of(j * block_s, block_s), block_s)
        s = jax.lax.dot_general(q, k_ref[blk, :], (((1,), (1,)), ((), ())),
                                precision=precision, preferred_element_type=jnp.float32)
        return jnp.where(pre_ref[:, blk] != 0, s * scale, -jnp.inf), blk

    def max_step(j, m):
        return jnp.maximum(m, jnp.max(scores(j)[0], axis=1, keepdims=True))

    m = jax.lax.fori_loop(0, n_s, max_step, jnp.full(mt_ref.shape, -jnp.inf, jnp.float32))
    m = jnp.maximum(m, mt_ref[...])
    m = jnp.where(m == -jnp.inf, 0.0, m)  # a query that sees nothing: zeros

    def sum_step(j, carry):
        l, acc = carry
        s, blk = scores(j)
        p = jnp.exp(s - m)
        v = v_ref[blk, :]
        # (checked in float32: Mosaic TPU tests finiteness of float32 vectors only)
        v = jnp.where(jnp.isfinite(v.astype(jnp.float32)), v, jnp.zeros((), v.dtype))
        pv = jax.lax.dot_general(p.astype(dtype), v, (((1,), (0,)), ((), ())),
                                 precision=precision, preferred_element_type=jnp.float32)
        return l + jnp.sum(p, axis=1, keepdims=True), acc + pv

    l, acc = jax.lax.fori_loop(0, n_s, sum_step,
                               (jnp.zeros(l_ref.shape, jnp.float32),
                                jnp.zeros(out_ref.shape, jnp.float32)))
    out_ref[...] = acc
    l_ref[...] = l
    m_ref[...] = m


def invariant_attention_part(q, k_all, v_all, pre, m_t, dtype, *, mode: str | None = None,
                             blocks: tuple[int, int] | None = None):
    """The product part of exact attention, batch- and cache-length-invariant.

    Args:
      q: ``[B, T, H, Dh]`` queries (rotary applied).
      k_all, v_all: ``[B, KVH, S, Dh]`` the cache (``H`` a multiple of ``KVH``).
      pre: ``bool[B, T, S]`` the slots each query reads here.
      m_t: ``float32[B, T, KVH, G]`` the max of each query's other scores (``-inf``: none).
      dtype: the products' operand dtype (float32 accumulation).
      mode: one of :data:`MODES` or ``"mosaic_gpu"`` / ``"mosaic_gpu_interpret"``; None:
        :func:`specjax.pallas_kernels.invariant_matmul.kernel_mode` (the backend's, or
        ``$SPECJAX_INVARIANT_KERNELS``).
      blocks: ``(block_m, block_s)``; None: :func:`block_sizes` (calls that must agree take
        the same blocks).

    Returns:
      ``(out [B, T, KVH, G, Dh], l [B, KVH, G, T], m [B, KVH, G, T])``, float32: unnormalised
      outputs, the exponentials' sums and the max they are relative to.
    """
    from specjax.pallas_kernels.invariant_matmul.kernel import (KERNEL_MODES, call_params,
                                                                kernel_mode)

    mode = kernel_mode() if mode is None else mode
    if mode not in KERNEL_MODES:
        raise ValueError(f"mode must be one of {KERNEL_MODES}, got {mode!r}")
    B, T, H, hd = q.shape
    if k_all.ndim != 4 or k_all.shape[0] != B or k_all.shape[3] != hd or \
            v_all.shape != k_all.shape:
        raise ValueError(f"invariant_attention_part: k_all and v_all must be [B={B}, KVH, S, "
                         f"Dh={hd}], got {k_all.shape} and {v_all.shape}")
    kvh, S = k_all.shape[1], k_all.shape[2]
    if H % kvh:
        raise ValueError(f"invariant_attention_part: {H} query heads for {kvh} kv heads")
    if pre.shape != (B, T, S) or m_t.shape != (B, T, kvh, H // kvh):
        raise ValueError(f"invariant_attention_part: pre must be [B, T, S] = {(B, T, S)} and "
                         f"m_t [B, T, KVH, G] = {(B, T, kvh, H // kvh)}, got {pre.shape} and "
                         f"{m_t.shape}")
    if mode.startswith("mosaic_gpu"):
        from specjax.pallas_kernels.invariant_attention import mosaic_gpu

        if mosaic_gpu.unsupported_reason(dtype, hd) is None:
            if blocks is not None and tuple(blocks) != (mosaic_gpu.BLOCK_M, mosaic_gpu.BLOCK_S):
                raise ValueError(f"invariant_attention_part (mosaic_gpu): its blocks are fixed "
                                 f"at {(mosaic_gpu.BLOCK_M, mosaic_gpu.BLOCK_S)}, got {blocks}")
            return mosaic_gpu.invariant_attention_part_mosaic_gpu(
                q, k_all, v_all, pre, m_t, dtype, interpret=interpreter(mode))
        mode = portable_mode(mode)  # not wgmma's inputs
    bm, bs = block_sizes(dtype, mode) if blocks is None else blocks
    qr, k, v, pre_r, mt_r = layout.per_kv_head(q, k_all, v_all, pre, m_t, dtype, bm, bs,
                                               jnp.int32)
    mt_r = mt_r[..., None]
    mp, sp = qr.shape[2], k.shape[2]
    precision = (jax.lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32
                 else jax.lax.Precision.DEFAULT)
    kernel = functools.partial(_kernel, block_s=bs, n_s=sp // bs, scale=1.0 / math.sqrt(hd),
                               dtype=jnp.dtype(dtype), precision=precision)
    interpret, params = call_params(mode, 3)
    row = lambda b, h, i: (b, h, i, 0)  # noqa: E731
    cache = lambda b, h, i: (b, h, 0, 0)  # noqa: E731
    f32 = jnp.float32
    out, l, m = pl.pallas_call(
        kernel, grid=(B, kvh, mp // bm),
        in_specs=[pl.BlockSpec((None, None, bm, hd), row),
                  pl.BlockSpec((None, None, sp, hd), cache),
                  pl.BlockSpec((None, None, sp, hd), cache),
                  pl.BlockSpec((None, bm, sp), lambda b, h, i: (b, i, 0)),
                  pl.BlockSpec((None, None, bm, 1), row)],
        out_specs=[pl.BlockSpec((None, None, bm, hd), row),
                   pl.BlockSpec((None, None, bm, 1), row),
                   pl.BlockSpec((None, None, bm, 1), row)],
        out_shape=[jax.ShapeDtypeStruct((B, kvh, mp, hd), f32),
                   jax.ShapeDtypeStruct((B, kvh, mp, 1), f32),
                   jax.ShapeDtypeStruct((B, kvh, mp, 1), f32)],
        interpret=interpret, compiler_params=params,
        name="invariant_attention_part")(qr, k, v, pre_r, mt_r)
    return layout.from_kv_head_rows(out, l[..., 0], m[..., 0], T, H // kvh)
