"""Decoding and training on a device mesh (``jax.make_mesh``): rows over ``data``, heads and
MLP over ``model``.

:func:`make_mesh` builds a mesh from a spec such as ``"data=4,model=2"`` (or a mapping); the
engine (``generate(..., mesh=...)``, ``--mesh data=4,model=2``) splits the rows of every batch
over the ``data`` axis and places the weights, the drafter's parameters and the KV cache by the
sharding table of :mod:`specjax.sharding` (attention heads and MLP over ``model`` where the
counts divide, the rest replicated). XLA's SPMD partitioner compiles the whole decode loop as
one program across the devices: rows are independent, so on a data-only mesh each row decodes
bit for bit as it would alone (the per-row keys make sampling identical too); a ``model`` axis
reduces split sums across devices, so logits agree with one device to float rounding.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from specjax.errors import ConfigError
from specjax.sharding import AXES  # noqa: F401  (the mesh axes specjax names; re-exported)


def parse_mesh_spec(spec: str | Mapping[str, int]) -> dict[str, int]:
    """``"data=4,model=1"`` (or a mapping) -> ``{"data": 4, "model": 1}``, checked."""
    if isinstance(spec, str):
        out = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, size = part.partition("=")
            if not sep or not size.strip().isdigit():
                raise ConfigError(f"mesh spec {spec!r}: each part must be AXIS=SIZE (e.g. "
                                  f"data=4), got {part!r}")
            if name.strip() in out:
                raise ConfigError(f"mesh spec {spec!r}: axis {name.strip()!r} given twice")
            out[name.strip()] = int(size)
    else:
        out = {str(k): v for k, v in dict(spec).items()}
    bad = [a for a in out if a not in AXES]
    if bad or not out:
        raise ConfigError(f"mesh spec {spec!r}: axes must be among {', '.join(AXES)}, got "
                          f"{list(out) or 'none'}")
    for a, n in out.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"mesh spec {spec!r}: axis {a} needs a size >= 1, got {n!r}")
    return out


def make_mesh(spec: str | Mapping[str, int], devices=None) -> Mesh:
    """A mesh over the first ``prod(sizes)`` devices (``jax.make_mesh``).

    Raises:
      ConfigError: a bad spec, or more devices asked for than there are (naming both).
    """
    sizes = parse_mesh_spec(spec)
    n = 1
    for v in sizes.values():
        n *= v
    devs = list(devices) if devices is not None else jax.devices()
    if n > len(devs):
        raise ConfigError(f"mesh {sizes} needs {n} devices; {len(devs)} are visible "
                          f"({devs[0].platform}). On a CPU, XLA_FLAGS="
                          f"--xla_force_host_platform_device_count={n} simulates them")
    # Auto axes: XLA's partitioner propagates the rows' sharding through the loop (explicit
    # axes would ask every gather of the loop for its output sharding)
    auto = (AxisType.Auto,) * len(sizes)
    if devices is None:
        return jax.make_mesh(tuple(sizes.values()), tuple(sizes), axis_types=auto)
    import numpy as np

    return Mesh(np.asarray(devs[:n]).reshape(tuple(sizes.values())), tuple(sizes),
                axis_types=auto)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the engine puts its inputs on a mesh."""

    mesh: Mesh

    def replicate(self, tree: Any) -> Any:
        from specjax.distributed import put_tree

        sh = NamedSharding(self.mesh, PartitionSpec())
        return put_tree(tree, lambda path, x: sh)

    def rows(self, tree: Any) -> Any:
        """Arrays whose leading axis is the batch: split over the ``data`` axis (replicated on
        a mesh without one)."""
        from specjax.distributed import put_tree

        spec = PartitionSpec("data") if "data" in self.mesh.shape else PartitionSpec()
        sh = NamedSharding(self.mesh, spec)
        return put_tree(tree, lambda path, x: sh)

    def weights(self, tree: Any, cfg, table=None) -> Any:
        """Weights (the target's, a drafter's, an optimizer state mirroring them) placed by the
        sharding table (:mod:`specjax.sharding`): split over ``model`` where the table's rules
        apply, replicated elsewhere."""
        from specjax.sharding import DEFAULT_TABLE, shard_weights

        return shard_weights(tree, cfg, self.mesh, table or DEFAULT_TABLE)


def check_mesh(mesh: Mesh) -> dict:
    """The axis sizes of a decoding or training mesh.

    Raises:
      ConfigError: not a Mesh, or axes other than ``data`` / ``model``.
    """
    if not isinstance(mesh, Mesh):
        raise ConfigError(f"mesh must be a jax.sharding.Mesh (specjax.mesh.make_mesh), got "
                          f"{type(mesh).__name__}")
    shape = dict(mesh.shape)
    bad = [a for a in shape if a not in AXES]
    if bad:
        raise ConfigError(f"the mesh's axes must be among {', '.join(AXES)}, got {list(shape)}")
    return shape


def data_parallel(mesh: Mesh, batch: int) -> tuple[int, Placement]:
    """The batch size padded to a multiple of the mesh's ``data`` axis (1 when it has none),
    and the placement.

    Raises:
      ConfigError: see :func:`check_mesh`.
    """
    shape = check_mesh(mesh)
    dp = shape.get("data", 1)
    return -(-batch // dp) * dp, Placement(mesh)
