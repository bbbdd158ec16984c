"""The batch-invariant kernels on a device mesh: each device runs them on its own shard, inside
``jax.shard_map`` (issues 22 and 25).

A ``pallas_call`` is opaque to XLA's SPMD partitioner: on a mesh it runs on gathered,
replicated operands, every device doing the whole product. Under
:func:`~specjax.pallas_kernels.placement.sharded` (the decode loop enters it on a mesh with the
:class:`~specjax.pallas_kernels.placement.KernelMesh` of its sharding table; re-exported here)
the two kernels of exact numerics run per shard instead:

* :func:`matmul` (``x [M, K] @ w [N, K].T``, the projections and the LM head): the rows of
  ``x`` over the rows' axis (``data``); a weight split over its output rows (``wqkv``,
  ``w_gate_up``: column parallel) gives each device its output columns, the same bits as one
  device (an output element's sum over ``K`` is the same program whatever ``N`` is); a
  weight split over its input columns (``wo``, ``w_down``: row parallel) gives each device a
  partial sum over its part of ``K``. The partials are gathered (``all_gather``, no
  arithmetic) and added in device order on every device, never by an all-reduce (a
  collective's reduction order may depend on the message size, hence on the row count). So
  on a mesh every row's bits are the same whatever rows share the call: exact decoding stays
  exact. What a row-parallel split changes is the summation tree against one device
  (partials added at the end instead of one running sum), so those products agree with one
  device to float rounding, as the XLA path's do (:mod:`specjax.sharding`);
* :func:`attention_part` (the product over the cache row): rows over their axis and KV heads
  over theirs (query head ``h`` belongs to KV head ``h // G``: contiguous chunks line up);
  every (row, KV head) is its own program, so the bits are one device's.

An axis whose count does not divide the mesh axis's size is left unsplit for that call (the
partitioner moves what it must); without :func:`sharded` (one device) both are the plain
kernels. Each device picks its kernel by its shard's shape: with the Mosaic GPU kernels
(``$SPECJAX_INVARIANT_KERNELS=mosaic_gpu``) a shard whose widths are not multiples of 64 runs
the Triton kernel (invariant still: the choice follows shapes only; but then not one device's
bits).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from specjax.pallas_kernels.invariant_attention import invariant_attention_part
from specjax.pallas_kernels.invariant_matmul import invariant_matmul
from specjax.pallas_kernels.placement import KernelMesh, current, sharded

__all__ = ["KernelMesh", "attention_part", "current", "matmul", "sharded"]


def _ordered_sum(parts: jax.Array) -> jax.Array:
    """``parts[0] + parts[1] + ...`` in that order (``parts`` stacked on axis 0)."""
    return functools.reduce(jnp.add, [parts[i] for i in range(parts.shape[0])])


def matmul(x: jax.Array, w: jax.Array, out_dtype=jnp.float32, *, name: str | None = None,
           mode: str | None = None) -> jax.Array:
    """:func:`~specjax.pallas_kernels.invariant_matmul.invariant_matmul` (``x [M, K] @
    w [N, K].T``), per shard under :func:`sharded`: ``name`` is the weight's name (its split
    from the :class:`KernelMesh`; None or unknown: replicated)."""
    km = current()
    if km is None:
        return invariant_matmul(x, w, out_dtype, mode=mode)
    m, k = x.shape
    out_axis, in_axis = km.weight_axes(name)
    out_axis = km.fits(out_axis, w.shape[0])
    in_axis = km.fits(in_axis, k)
    # a mesh axis splits one dimension (a custom table may name one axis twice)
    rows = km.fits(km.rows, m) if km.rows not in (out_axis, in_axis) else None
    if rows is None and out_axis is None and in_axis is None:
        return invariant_matmul(x, w, out_dtype, mode=mode)

    def body(xs, ws):
        if in_axis is None:
            return invariant_matmul(xs, ws, out_dtype, mode=mode)
        part = invariant_matmul(xs, ws, jnp.float32, mode=mode)
        parts = jax.lax.all_gather(part, in_axis)  # [devices on in_axis, m, n], no sums
        return _ordered_sum(parts).astype(out_dtype)

    return jax.shard_map(body, mesh=km.mesh, in_specs=(P(rows, in_axis), P(out_axis, in_axis)),
                         out_specs=P(rows, out_axis), check_vma=False)(x, w)


def attention_part(q, k_all, v_all, pre, m_t, dtype, *, mode: str | None = None):
    """:func:`~specjax.pallas_kernels.invariant_attention.invariant_attention_part`, per shard
    under :func:`sharded` (rows and KV heads split as the cache is)."""
    km = current()
    part = functools.partial(invariant_attention_part, dtype=dtype, mode=mode)
    if km is None:
        return part(q, k_all, v_all, pre, m_t)
    rows = km.fits(km.rows, q.shape[0])
    kv = km.fits(km.kv_heads, k_all.shape[1]) if km.kv_heads != rows else None
    if rows is None and kv is None:
        return part(q, k_all, v_all, pre, m_t)
    heads = P(rows, None, kv)  # q [B, T, H, Dh], m_t [B, T, KVH, G], out [B, T, KVH, G, Dh]
    cache = P(rows, kv)  # k, v [B, KVH, S, Dh]; l, m [B, KVH, G, T]
    return jax.shard_map(part, mesh=km.mesh, in_specs=(heads, cache, cache, P(rows), heads),
                         out_specs=(heads, cache, cache), check_vma=False)(
        q, k_all, v_all, pre, m_t)
