"""Checkpoints of a training run (orbax-checkpoint), and stopping on a signal.

A checkpoint is one step directory under ``out_dir/checkpoints`` (``ocp.CheckpointManager``,
the newest ``max_to_keep`` kept), holding two items:

* ``state``: the arrays: trainable parameters, optimizer state and the RNG key data. Each
  group is saved as its flattened leaves (``{"00000": leaf, ...}`` in
  ``jax.tree_util`` order), so any pytree (NNX state, optax named tuples, empty nodes)
  round-trips, and restoring onto the same structure is checked leaf by leaf.
* ``meta`` (JSON): the step, the data-iterator position, the run's config, the elapsed time,
  and the structure of each group (leaf paths, shapes, dtypes) that the restore checks.

Saves are synchronous: a checkpoint is complete on disk when :meth:`Checkpointer.save`
returns, which is what stopping on a signal needs.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from specjax.errors import CheckpointError

GROUPS = ("params", "opt_state", "rng")


def _leaf_key(i: int) -> str:
    return f"{i:05d}"


def structure_of(tree) -> list[list]:
    """``[[path, shape, dtype], ...]`` of the leaves of ``tree`` (JSON-serializable)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [[jax.tree_util.keystr(p), list(np.shape(x)), str(jnp.asarray(x).dtype)]
            for p, x in flat]


def _flat(tree) -> dict[str, jax.Array]:
    return {_leaf_key(i): jnp.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(tree))}


class Checkpointer:
    """Saves and restores the training state in ``directory``.

    Args:
      directory: where the step directories go (created when missing).
      max_to_keep: how many of the newest checkpoints to keep.

    Raises:
      CheckpointError: the directory cannot be used as a checkpoint directory.
    """

    def __init__(self, directory: str | Path, max_to_keep: int = 3):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                               enable_async_checkpointing=False)
        try:
            self.manager = ocp.CheckpointManager(self.directory, options=options,
                                                 item_names=("state", "meta"))
        except Exception as e:  # noqa: BLE001 - orbax raises many kinds
            raise CheckpointError(f"{self.directory}: cannot open the checkpoint directory "
                                  f"({type(e).__name__}: {e})") from None

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest saved step, or ``None`` when there is none."""
        return self.manager.latest_step()

    def step_dir(self, step: int) -> Path:
        return self.directory / str(step)

    def save(self, step: int, state: Mapping[str, Any], meta: Mapping[str, Any]) -> Path:
        """Saves ``state`` (``{"params", "opt_state", "rng"}`` pytrees of arrays) and ``meta``
        (JSON-serializable: ``data_position``, ``config``, ...) as step ``step``.

        Returns:
          The step directory.
        """
        missing = [g for g in GROUPS if g not in state]
        if missing:
            raise ValueError(f"Checkpointer.save: state lacks {missing}")
        meta = dict(meta)
        meta["step"] = int(step)
        meta["structure"] = {g: structure_of(state[g]) for g in GROUPS}
        if step in self.manager.all_steps():
            return self.step_dir(step)  # already saved (a rerun that stopped right here)
        ocp = self._ocp
        groups = {g: _flat(state[g]) for g in GROUPS}
        self.manager.save(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardSave(groups), meta=ocp.args.JsonSave(meta)), force=True)
        self.manager.wait_until_finished()
        return self.step_dir(step)

    def _restore(self, step: int, state_args):
        ocp = self._ocp
        try:
            return self.manager.restore(step, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore(), **({"state": state_args} if state_args else {})))
        except Exception as e:  # noqa: BLE001 - a damaged directory fails in many ways
            raise CheckpointError(
                f"{self.step_dir(step)}: cannot restore this checkpoint, it is damaged or "
                f"incomplete ({type(e).__name__}: {str(e)[:300]}); delete that directory to "
                "resume from the previous checkpoint") from None

    def read_meta(self, step: int) -> dict:
        """The ``meta`` item of step ``step``."""
        meta = self._restore(step, None).meta
        if not isinstance(meta, dict) or "structure" not in meta or "step" not in meta:
            raise CheckpointError(f"{self.step_dir(step)}: the checkpoint's meta item lacks "
                                  "'step' or 'structure' (not written by specjax.train)")
        return meta

    def restore(self, step: int, template: Mapping[str, Any]) -> tuple[dict, dict]:
        """Restores step ``step`` onto ``template`` (``{"params", "opt_state", "rng"}`` of the
        same structure, shapes and dtypes as saved; its arrays are used as targets).

        Returns:
          ``(state, meta)``: the state with ``template``'s tree structure, and the meta item.

        Raises:
          CheckpointError: naming the step directory: it is damaged, or it holds another
            structure than ``template`` (another task, task options or optimizer).
        """
        meta = self.read_meta(step)
        for g in GROUPS:
            saved, now = meta["structure"].get(g), structure_of(template[g])
            if saved != now:
                diff = _first_difference(saved or [], now)
                raise CheckpointError(
                    f"{self.step_dir(step)}: the saved {g} do not match this run's ({diff}); "
                    "was the task, its options or the optimizer changed? Use another out_dir "
                    "for another recipe")
        targets = {g: _flat(template[g]) for g in GROUPS}
        restored = self._restore(step, self._ocp.args.StandardRestore(targets)).state
        out = {}
        for g in GROUPS:
            leaves, treedef = jax.tree_util.tree_flatten(template[g])
            vals = [restored[g][_leaf_key(i)] for i in range(len(leaves))]
            out[g] = jax.tree_util.tree_unflatten(treedef, vals)
        return out, meta

    def read_arrays(self, step: int | None = None) -> tuple[dict[str, list[np.ndarray]], dict]:
        """The saved arrays as numpy, without a template (inspection, tests).

        Returns:
          ``({group: [leaf, ...]}, meta)`` for step ``step`` (default: the latest).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"{self.directory}: no checkpoint")
        meta = self.read_meta(step)
        targets = {g: {_leaf_key(i): jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
                       for i, (_, shape, dtype) in enumerate(meta["structure"][g])}
                   for g in GROUPS}
        restored = self._restore(step, self._ocp.args.StandardRestore(targets)).state
        return {g: [np.asarray(restored[g][k]) for k in sorted(restored[g])]
                for g in GROUPS}, meta

    def close(self) -> None:
        self.manager.close()


def _first_difference(saved: list, now: list) -> str:
    for a, b in zip(saved, now):
        if a != b:
            return f"leaf {b[0] or a[0]}: saved {a[1]} {a[2]}, now {b[1]} {b[2]}"
    return f"{len(saved)} leaves saved, {len(now)} now"


class StopOnSignal:
    """A context that turns SIGINT/SIGTERM into a request to stop at the next step boundary.

    The training loop checks :attr:`requested` after each step; when set it saves a
    checkpoint and returns. A second signal gives up waiting (``KeyboardInterrupt``). Outside
    the main thread (where handlers cannot be installed) it installs nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, out=None):
        self.signum: int | None = None
        self._old: dict = {}
        self._out = out

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handler(self, signum, frame):  # noqa: ARG002 - signal handler signature
        if self.signum is not None:
            self._restore_handlers()
            raise KeyboardInterrupt
        self.signum = signum
        print(f"\n{signal.Signals(signum).name}: stopping after the current step and saving a "
              "checkpoint (send it again to quit without saving)",
              file=self._out or sys.stderr, flush=True)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handler)
        return self

    def _restore_handlers(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def __exit__(self, *exc) -> None:
        self._restore_handlers()
