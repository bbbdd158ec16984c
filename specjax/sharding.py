"""The sharding table: which mesh axis each logical axis of the model, cache and rows goes over.

A :class:`ShardingTable` names, per logical axis (``batch``, ``heads``, ``kv_heads``, ``mlp``,
``vocab``, ``embed``, ``sequence``), the mesh axis it is split over or None (replicated). The
rules that turn it into ``PartitionSpec`` s are data too: :data:`WEIGHT_AXES` gives the logical
axes of every weight by its name (the target's and the draft heads', which use the same
names), and the KV cache is ``(batch, kv_heads, sequence, -)``. Anything not in the table is
replicated. The defaults:

* data parallelism: rows over ``data``;
* tensor parallelism (Megatron style): attention heads (``wqkv`` rows, ``wo`` columns, the
  cache's KV heads) and the MLP (``w_gate_up`` rows, ``w_down`` columns) over ``model``, the
  embedding, LM head and norms replicated;
* both together on a ``data=D,model=M`` mesh.

**Counts that do not divide.** An axis is split only when its count is a multiple of the mesh
axis's size (for ``wqkv``: the query *and* KV head counts; for ``w_gate_up``: the MLP width, so
gate and up split alike); otherwise that weight is replicated and :func:`plan` says which and
why. SmolLM2-135M has 9 query and 3 KV heads and an MLP of 1536: on ``model=2`` or ``4`` its
attention is replicated and its MLP split; ``model=3`` splits both. A mesh whose model axis
splits nothing is refused (:func:`check_plan`), naming the model-axis sizes that would.

XLA's SPMD partitioner compiles the decode loop (or the train step) as one program from these
input shardings; any sharding gives the same mathematics. What changes with tensor parallelism
is where sums are reduced: a split ``wo`` / ``w_down`` adds per-device partial sums, so logits
agree with one device to float rounding, not bit for bit (on a data-only mesh they are bit
for bit; see docs/design.md).

The fused projections keep their single-device layout: ``wqkv`` holds ``[q; k; v]`` and
``w_gate_up`` ``[gate; up]`` stacked, so a shard boundary need not fall on the q/k/v (or
gate/up) boundary and XLA moves the slices it needs between devices. A per-shard interleaved
layout would avoid that traffic on a real pod; it is not done (the CPU tests show
correctness, not speed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax.errors import ConfigError

AXES = ("data", "model")  # the mesh axes specjax names (specjax.mesh re-exports them)
LOGICAL = ("batch", "heads", "kv_heads", "mlp", "vocab", "embed", "sequence")

# logical axes of each weight, by name (the last component of its path); "qkv" is the stacked
# [q; k; v] rows (split with ``heads`` when both head counts divide), "mlp2" the stacked
# [gate; up] rows (split with ``mlp``)
WEIGHT_AXES: dict[str, tuple[str, ...]] = {
    "embed": ("vocab", "embed"),
    "lm_head": ("vocab", "embed"),
    "head_q": ("vocab", "embed"),
    "head_scale": ("vocab",),
    "wqkv": ("qkv", "embed"),
    "bqkv": ("qkv",),
    "wqkv_scale": ("qkv",),
    "wo": ("embed", "heads"),
    "wo_scale": ("embed",),
    "w_gate_up": ("mlp2", "embed"),
    "w_gate_up_scale": ("mlp2",),
    "w_down": ("embed", "mlp"),
    "w_down_scale": ("embed",),
}
CACHE_AXES = ("batch", "kv_heads", "sequence", None)  # [B, KVH, S, Dh] (specjax.cache)


@dataclasses.dataclass(frozen=True)
class ShardingTable:
    """The mesh axis (``"data"``, ``"model"``) or None (replicated) of each logical axis."""

    batch: str | None = "data"
    heads: str | None = "model"
    kv_heads: str | None = "model"
    mlp: str | None = "model"
    vocab: str | None = None
    embed: str | None = None
    sequence: str | None = None

    def __post_init__(self):
        for f in LOGICAL:
            v = getattr(self, f)
            if v is not None and v not in AXES:
                raise ConfigError(f"ShardingTable.{f} must be one of {', '.join(AXES)} or None, "
                                  f"got {v!r}")


DEFAULT_TABLE = ShardingTable()


def _counts(cfg, batch: int | None, cache_len: int | None) -> dict[str, int | None]:
    return {"batch": batch, "heads": cfg.num_heads, "kv_heads": cfg.num_kv_heads,
            "mlp": cfg.intermediate_size, "vocab": cfg.vocab_size, "embed": cfg.hidden_size,
            "sequence": cache_len}


def _axis_for(logical: str | None, table: ShardingTable, sizes: dict[str, int],
              counts: dict[str, int | None]) -> str | None:
    """The mesh axis a logical axis goes over here, or None when it is replicated (no rule,
    an axis of size 1 or absent, or a count that does not divide)."""
    if logical is None:
        return None
    if logical == "qkv":
        a = _axis_for("heads", table, sizes, counts)
        return a if a is not None and a == _axis_for("kv_heads", table, sizes, counts) else None
    if logical == "mlp2":
        return _axis_for("mlp", table, sizes, counts)
    axis = getattr(table, logical)
    n = sizes.get(axis, 1) if axis is not None else 1
    if n <= 1:
        return None
    count = counts.get(logical)
    if count is not None and count % n:
        return None
    return axis


def plan(cfg, mesh: Mesh, table: ShardingTable = DEFAULT_TABLE, *, batch: int | None = None,
         cache_len: int | None = None) -> dict[str, dict]:
    """Per logical axis: the mesh axis it is split over here (``"axis"``, None when replicated)
    and, when the table asked for a split that cannot happen, ``"why"``."""
    sizes = dict(mesh.shape)
    counts = _counts(cfg, batch, cache_len)
    out = {}
    for name in LOGICAL:
        want = getattr(table, name)
        got = _axis_for(name, table, sizes, counts)
        row: dict[str, Any] = {"axis": got}
        if want is not None and sizes.get(want, 1) > 1 and got is None:
            row["why"] = (f"{counts[name]} {name} do not divide the {want} axis of "
                          f"{sizes[want]}: replicated")
        out[name] = row
    return out


def check_plan(cfg, mesh: Mesh, table: ShardingTable = DEFAULT_TABLE) -> None:
    """Refuses a ``model`` axis > 1 that splits none of this model's weights, naming the
    model-axis sizes that would (divisors of its head and MLP counts)."""
    sizes = dict(mesh.shape)
    m = sizes.get("model", 1)
    if m <= 1:
        return
    p = plan(cfg, mesh, table)
    used = [n for n in ("heads", "kv_heads", "mlp", "vocab", "embed") if p[n]["axis"] == "model"]
    if used:
        return
    asked = [n for n in LOGICAL if getattr(table, n) == "model"]
    counts = _counts(cfg, None, None)
    ok = sorted({d for n in asked if counts.get(n) for d in range(2, 65)
                 if counts[n] % d == 0})
    raise ConfigError(
        f"a model axis of {m} splits none of this model's weights ({', '.join(asked) or 'no'} "
        f"logical axes over 'model'; counts " + ", ".join(f"{n}={counts[n]}" for n in asked
                                                          if counts.get(n)) +
        f"): model-axis sizes that work here: {', '.join(map(str, ok[:12])) or 'none'}")


def weight_spec(name: str, shape: tuple[int, ...], cfg, mesh: Mesh,
                table: ShardingTable = DEFAULT_TABLE) -> PartitionSpec:
    """The ``PartitionSpec`` of a weight called ``name`` (replicated when not in
    :data:`WEIGHT_AXES`, or when its rank does not match the rule)."""
    axes = WEIGHT_AXES.get(name)
    if axes is None or len(axes) != len(shape):
        return PartitionSpec()
    sizes = dict(mesh.shape)
    counts = _counts(cfg, None, None)
    out = []
    for a, n in zip(axes, shape):
        axis = _axis_for(a, table, sizes, counts)
        # a draft head's or draft model's own widths may differ from the target's counts
        out.append(axis if axis is not None and n % sizes[axis] == 0 else None)
    return PartitionSpec(*out)


def _leaf_name(path) -> str:
    names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
    names = [n for n in names if isinstance(n, str) and n != "value"]
    return names[-1] if names else ""


def shard_weights(tree: Any, cfg, mesh: Mesh, table: ShardingTable = DEFAULT_TABLE) -> Any:
    """``tree`` (the target's ``nnx`` state, a draft head's parameters, an optimizer state
    that mirrors them) placed on ``mesh`` by the table: each array by the rule of its name."""

    from specjax.distributed import put_tree

    return put_tree(tree, lambda path, x: NamedSharding(
        mesh, weight_spec(_leaf_name(path), tuple(x.shape), cfg, mesh, table)))


def cache_sharding(cfg, mesh: Mesh, table: ShardingTable = DEFAULT_TABLE,
                   batch: int | None = None) -> NamedSharding:
    """The sharding of every layer's K and V cache ``[B, KVH, S, Dh]``."""
    sizes = dict(mesh.shape)
    counts = _counts(cfg, batch, None)
    return NamedSharding(mesh, PartitionSpec(
        *(_axis_for(a, table, sizes, counts) for a in CACHE_AXES)))


def rows_spec(mesh: Mesh, table: ShardingTable = DEFAULT_TABLE) -> PartitionSpec:
    """Arrays whose leading axis is the batch."""
    axis = table.batch if dict(mesh.shape).get(table.batch or "", 1) > 1 else None
    return PartitionSpec(axis)


def kernel_mesh(cfg, mesh: Mesh, table: ShardingTable = DEFAULT_TABLE,
                batch: int | None = None):
    """Where the Pallas kernels' operands lie by this table
    (:class:`specjax.pallas_kernels.placement.KernelMesh`): the rows', the cache's KV
    heads' and each projection weight's axes (the target's shapes, ``[out, in]``), for
    running the tree-attention and batch-invariant kernels inside ``shard_map``."""
    from specjax.pallas_kernels.placement import KernelMesh

    h, kvh, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    d, f = cfg.hidden_size, cfg.intermediate_size
    shapes = {"wqkv": ((h + 2 * kvh) * hd, d), "wo": (d, h * hd), "w_gate_up": (2 * f, d),
              "w_down": (d, f), "lm_head": (cfg.vocab_size, d), "embed": (cfg.vocab_size, d)}
    weights = tuple((name, *(tuple(weight_spec(name, shape, cfg, mesh, table)) + (None,) * 2)[:2])
                    for name, shape in shapes.items())
    return dataclasses.replace(KernelMesh.of_cache(cache_sharding(cfg, mesh, table, batch)),
                               weights=weights)
