"""Where the Pallas kernels' operands lie on a device mesh, for the kernels that run inside
``jax.shard_map`` (issues 4, 22 and 25).

A ``pallas_call`` is opaque to XLA's SPMD partitioner: on a mesh it runs on gathered,
replicated operands, every device doing the whole call. So the decode loop enters
:func:`sharded` with the :class:`KernelMesh` of its sharding table
(:func:`specjax.sharding.kernel_mesh`), and every Pallas kernel it traces reads
:func:`current` to run per shard: the tree-attention kernels
(:mod:`specjax.pallas_kernels.tree_attention`) on their rows and KV heads, exact numerics'
batch-invariant kernels (:mod:`specjax.pallas_kernels.invariant_mesh`) on their rows, KV heads
and weight shards. One context for all of them: the placement is the table's, whichever kernel
reads it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

from jax.sharding import Mesh


@dataclasses.dataclass(frozen=True)
class KernelMesh:
    """Where the kernels' operands lie on ``mesh`` (static, hashable).

    Attributes:
      mesh: the mesh.
      rows: the axis the batch rows are split over (None: replicated).
      kv_heads: the axis the KV heads of the cache (and their queries) are split over.
      weights: ``(name, out_axis, in_axis)`` per weight name (the names of
        :data:`specjax.sharding.WEIGHT_AXES`): the axes a ``[out, in]`` weight is split
        over; a name not listed is replicated.
    """

    mesh: Mesh
    rows: str | None = None
    kv_heads: str | None = None
    weights: tuple[tuple[str, str | None, str | None], ...] = ()

    @classmethod
    def of_cache(cls, cache_sharding) -> KernelMesh:
        """The rows' and KV heads' axes of a KV cache buffer's ``NamedSharding``
        (``[B, KVH, S, Dh]``, :func:`specjax.sharding.cache_sharding`); weights replicated."""
        spec = tuple(cache_sharding.spec) + (None,) * 2
        return cls(cache_sharding.mesh, rows=spec[0], kv_heads=spec[1])

    def weight_axes(self, name: str | None) -> tuple[str | None, str | None]:
        for n, out_axis, in_axis in self.weights:
            if n == name:
                return out_axis, in_axis
        return None, None

    def size(self, axis: str | None) -> int:
        return dict(self.mesh.shape).get(axis, 1) if axis is not None else 1

    def fits(self, axis: str | None, count: int) -> str | None:
        """``axis`` when it splits ``count`` evenly (and has more than one device), else
        None."""
        n = self.size(axis)
        return axis if n > 1 and count % n == 0 else None


_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("pallas_kernel_mesh", default=None)


@contextlib.contextmanager
def sharded(kernel_mesh: KernelMesh | None):
    """Traces the Pallas kernels inside ``shard_map`` over ``kernel_mesh`` (None: clears the
    placement, so they run whole, as on one device)."""
    token = _CONTEXT.set(kernel_mesh)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current() -> KernelMesh | None:
    """The :class:`KernelMesh` being traced under, or None."""
    return _CONTEXT.get()
