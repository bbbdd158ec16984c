"""Public entry point: ``tree_attention(..., implementation=...)``.

Backends:

* ``"xla"``: pure jnp (:func:`reference.tree_attention_xla`); runs everywhere.
* ``"pallas_interpret"``: the portable Pallas prefix kernel (:mod:`.kernel`) with
  ``interpret=True``; runs everywhere, slowly (for tests).
* ``"pallas_mosaic_tpu"``: the same kernel compiled by Mosaic TPU (TPU only; not yet run on
  TPU hardware).
* ``"pallas_mosaic_gpu"``: a Mosaic GPU (Hopper, wgmma) prefix kernel (:mod:`.mosaic_gpu`);
  GPU only, bfloat16/float16 inputs, head dim a multiple of 64 (run on an H100; see
  ``mosaic_gpu``'s docstring for what was checked there).
* ``None``: by ``jax.default_backend()``: gpu -> ``"pallas_mosaic_gpu"``,
  tpu -> ``"pallas_mosaic_tpu"``, anything else -> ``"xla"``.

A Pallas backend that cannot run here (wrong platform, or inputs it does not support) falls
back to ``"xla"`` with a warning. In every backend the tree part (``T x W``, small) is jnp and
the parts are merged by log-sum-exp (LongSpec's split, METHODS.md card C30).
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import jax
from jax.sharding import PartitionSpec

from specjax.pallas_kernels import placement
from specjax.pallas_kernels.tree_attention import kernel, reference

IMPLEMENTATIONS = ("xla", "pallas_interpret", "pallas_mosaic_gpu", "pallas_mosaic_tpu")

_PLATFORM = {"pallas_mosaic_gpu": "gpu", "pallas_mosaic_tpu": "tpu"}
_DEFAULT_BLOCK_K = {"pallas_interpret": 128, "pallas_mosaic_tpu": 256, "pallas_mosaic_gpu": 64}


@contextlib.contextmanager
def sharded(cache_sharding):
    """Traces the Pallas backends inside ``jax.shard_map`` over the mesh of a KV cache's
    ``NamedSharding`` (None: clears the placement, for every Pallas kernel):
    :func:`specjax.pallas_kernels.placement.sharded` with
    the cache's rows' and KV heads' axes (the decode loop enters that context itself, with
    its sharding table's :class:`~specjax.pallas_kernels.placement.KernelMesh`).

    A Pallas call is opaque to XLA's partitioner: on a mesh it would run on gathered,
    replicated operands. Under this context (the cache ``[B, KVH, S, Dh]`` split over rows
    and possibly KV heads) each device runs the kernel on its own rows and KV heads: queries
    split like their KV heads (query head ``h`` belongs to KV head ``h // (H // KVH)``, so
    contiguous chunks line up), the tree block and the lengths like the rows. The ``"xla"``
    backend is left to the partitioner."""
    with placement.sharded(None if cache_sharding is None
                           else placement.KernelMesh.of_cache(cache_sharding)):
        yield


def _shard_mapped(fn, km: placement.KernelMesh):
    blocks = PartitionSpec(km.rows, None, km.kv_heads, None)  # q, cache, tree block, output
    return jax.shard_map(
        fn, mesh=km.mesh, out_specs=blocks, check_vma=False,
        in_specs=(blocks, blocks, blocks, PartitionSpec(km.rows), blocks, blocks,
                  PartitionSpec(km.rows)))


# Compiled once per shape and static configuration (eager op-by-op dispatch is slow).
_xla = jax.jit(reference.tree_attention_xla, static_argnames=("scale",))
_pallas = jax.jit(kernel.tree_attention_pallas,
                  static_argnames=("scale", "block_k", "num_splits", "mode"))


@functools.cache
def _mosaic_gpu():
    from specjax.pallas_kernels.tree_attention import mosaic_gpu  # imported on first use

    return jax.jit(mosaic_gpu.tree_attention_mosaic_gpu,
                   static_argnames=("scale", "block_k", "num_splits", "interpret"))


def default_implementation(backend: str | None = None) -> str:
    backend = jax.default_backend() if backend is None else backend
    return {"gpu": "pallas_mosaic_gpu", "tpu": "pallas_mosaic_tpu"}.get(backend, "xla")


def resolve_implementation(implementation: str | None, dtype=None, head_dim: int | None = None,
                           block_k: int | None = None) -> str:
    """The backend that will actually run: validates the name, falls back to "xla" with a
    warning when a Pallas backend cannot run on this platform or take these inputs."""
    if implementation is None:
        implementation = default_implementation()
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown tree attention implementation {implementation!r}; "
                         f"valid: {', '.join(IMPLEMENTATIONS)} (or None for the default)")
    platform = _PLATFORM.get(implementation)
    if platform is not None and jax.default_backend() != platform:
        warnings.warn(f"tree_attention: implementation {implementation!r} needs a {platform} "
                      f"backend but the default backend is {jax.default_backend()!r}; "
                      "falling back to 'xla'", stacklevel=3)
        return "xla"
    if implementation == "pallas_mosaic_gpu" and dtype is not None:
        from specjax.pallas_kernels.tree_attention import mosaic_gpu

        reason = mosaic_gpu.unsupported_reason(
            dtype, 64 if head_dim is None else head_dim,
            _DEFAULT_BLOCK_K[implementation] if block_k is None else block_k)
        if reason is not None:
            warnings.warn(f"tree_attention: 'pallas_mosaic_gpu' {reason}; falling back to "
                          "'xla'", stacklevel=3)
            return "xla"
    return implementation


def _default_num_splits(implementation: str, batch: int, kv_heads: int) -> int:
    if implementation == "pallas_mosaic_gpu":
        # Enough programs to fill an H100's 132 SMs.
        return max(1, -(-132 // (batch * kv_heads)))
    if implementation == "pallas_mosaic_tpu":
        return 2 if batch == 1 else 1  # both TensorCores of a megacore chip at batch 1
    return 1


# the ``mode`` of :func:`kernel.tree_attention_pallas` for the backends that run that kernel
PALLAS_MODES = {"pallas_interpret": "interpret", "pallas_mosaic_tpu": "tpu"}


def kernel_settings(implementation: str, batch: int, kv_heads: int, block_k: int | None = None,
                    num_splits: int | None = None) -> tuple[int, int]:
    """``(block_k, num_splits)`` a Pallas backend runs with: the given values, else its
    defaults for this batch size and number of kv heads."""
    block_k = _DEFAULT_BLOCK_K[implementation] if block_k is None else int(block_k)
    if num_splits is None:
        num_splits = _default_num_splits(implementation, batch, kv_heads)
    return block_k, num_splits


def tree_attention(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array, lengths: jax.Array,
                   k_tree: jax.Array, v_tree: jax.Array, tree_mask: jax.Array, *,
                   scale: float | None = None, implementation: str | None = None,
                   block_k: int | None = None, num_splits: int | None = None) -> jax.Array:
    """Attention of T tree nodes over a committed KV prefix plus a masked tree block.

    Each query attends, with one softmax, to the slots ``< lengths[b]`` of its row's cache and
    to the tree entries ``j`` with ``tree_mask[b, i, j]``; a query that sees nothing returns
    zeros. Entries that are not visible never influence the output (they may hold NaN).
    Grouped-query heads: query head ``h`` uses kv head ``h // (H // KVH)``. Accumulation is
    float32 for float32 and bfloat16 inputs.

    Args:
      q: [B, T, H, Dh] queries of the T tree nodes (rotary already applied).
      k_cache, v_cache: [B, S, KVH, Dh] committed prefix; slots ``>= lengths[b]`` are garbage.
      lengths: int32[B] committed prefix length per row, 0..S.
      k_tree, v_tree: [B, W, KVH, Dh] keys/values of the tree block (``W >= T`` allowed).
      tree_mask: bool[B, T, W]; query ``i`` sees tree entry ``j`` iff ``tree_mask[b, i, j]``.
      scale: softmax scale; default ``1 / sqrt(Dh)``.
      implementation: one of :data:`IMPLEMENTATIONS` or None (by ``jax.default_backend()``).
      block_k: keys per block of the Pallas prefix kernels (default per backend).
      num_splits: K-splits per row of the Pallas prefix kernels (default per backend).

    Returns:
      [B, T, H, Dh] in ``q.dtype``.
    """
    reference.check_shapes(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask)
    impl = resolve_implementation(implementation, q.dtype, q.shape[-1], block_k)
    args = (q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask)
    if impl == "xla":
        return _xla(*args, scale=scale)
    km = placement.current()
    if km is not None:  # per-device shapes decide the kernel's settings
        batch = q.shape[0] // km.size(km.rows)
        kv_heads = k_cache.shape[2] // km.size(km.kv_heads)
    else:
        batch, kv_heads = q.shape[0], k_cache.shape[2]
    block_k, num_splits = kernel_settings(impl, batch, kv_heads, block_k, num_splits)
    if impl == "pallas_mosaic_gpu":
        fn = functools.partial(_mosaic_gpu(), scale=scale, block_k=block_k,
                               num_splits=num_splits)
    else:
        fn = functools.partial(_pallas, scale=scale, block_k=block_k, num_splits=num_splits,
                               mode=PALLAS_MODES[impl])
    if km is not None:
        fn = _shard_mapped(fn, km)
    return fn(*args)
