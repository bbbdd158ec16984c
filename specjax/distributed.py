"""Multi-host runs (TPU pod slices, several GPU hosts): one process per host, same command.

Every host runs the same command with ``--distributed`` (or calls :func:`initialize`); JAX's
``jax.distributed.initialize`` connects the processes (on Cloud TPU and under SLURM/Open MPI it
finds the coordinator itself; elsewhere pass ``coordinator``, ``num_processes`` and
``process_id``, or set ``SPECJAX_COORDINATOR`` / ``SPECJAX_NUM_PROCESSES`` /
``SPECJAX_PROCESS_ID``). After that ``jax.devices()`` lists every host's devices and a mesh
(:func:`specjax.mesh.make_mesh`) spans them all.

What the rest of specjax does with several processes:

* inputs: every process holds the same prompts (or training batch) and hands JAX only the
  shards its own devices hold (:func:`global_array`), so each host feeds its part;
* outputs: arrays that span hosts are gathered to every host (:func:`to_host`) so each process
  returns the same ``GenerationResult``;
* files: only process 0 writes results, metrics, plots and checkpoint metadata
  (:func:`is_main`); orbax's checkpointer is called on every process, as it requires.

``scripts/launch_multihost.sh`` is the launcher (a TPU pod slice through ``gcloud ... ssh
--worker=all``, a GPU cluster, or N local CPU processes for trying it).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from specjax.errors import ConfigError

ENV_COORDINATOR = "SPECJAX_COORDINATOR"
ENV_NUM_PROCESSES = "SPECJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "SPECJAX_PROCESS_ID"


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_devices: int | None = None) -> None:
    """Connects this process to the others (``jax.distributed.initialize``); arguments default
    to the ``SPECJAX_*`` environment variables, else JAX's own detection (Cloud TPU, SLURM,
    Open MPI). Call it before anything touches a device.

    ``local_devices``: on CPU, simulate this many devices per process (tests, trying a launch
    on one machine; uses the gloo collectives).

    Raises:
      ConfigError: some but not all of coordinator / num_processes / process_id given, or
        values out of range.
    """
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None and os.environ.get(ENV_NUM_PROCESSES):
        num_processes = int(os.environ[ENV_NUM_PROCESSES])
    if process_id is None and os.environ.get(ENV_PROCESS_ID):
        process_id = int(os.environ[ENV_PROCESS_ID])
    given = [coordinator is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ConfigError("a multi-host run needs the coordinator address, the number of "
                          "processes and this process's id together (or none of them, for "
                          f"JAX to detect): got coordinator={coordinator!r}, "
                          f"num_processes={num_processes!r}, process_id={process_id!r}")
    if all(given) and not (isinstance(num_processes, int) and num_processes >= 1
                           and isinstance(process_id, int)
                           and 0 <= process_id < num_processes):
        raise ConfigError(f"process_id must be in [0, num_processes): got {process_id!r} of "
                          f"{num_processes!r}")
    if local_devices is not None:
        jax.config.update("jax_num_cpu_devices", int(local_devices))
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id)


def is_main() -> bool:
    """True on the process that writes files (process 0; always on a single host)."""
    return jax.process_index() == 0


def global_array(x, sharding) -> jax.Array:
    """``x`` (the same host array on every process) as a global array laid out by
    ``sharding``, each process supplying only its own devices' shards."""
    x = np.asarray(x)
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def put_tree(tree: Any, sharding_of) -> Any:
    """Every array leaf of ``tree`` placed by ``sharding_of(path, leaf)`` (see
    :func:`global_array`); non-array leaves pass through."""

    def put(path, leaf):
        if not hasattr(leaf, "shape"):
            return leaf
        sh = sharding_of(path, leaf)
        if jax.process_count() == 1:
            return jax.device_put(leaf, sh)
        return global_array(np.asarray(jax.device_get(leaf)), sh)

    return jax.tree_util.tree_map_with_path(put, tree)


def to_host(tree: Any) -> Any:
    """Device arrays as numpy on this host, gathered from every process when they span
    hosts."""
    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x) if isinstance(x, jax.Array) else x

    return jax.tree_util.tree_map(get, tree)
