"""The training run's config: :class:`TrainConfig`, a frozen dataclass, and the config files
that return one.

A config file is plain Python defining ``get_config()`` (as the bench's ``configs/*.py`` do),
so one recipe can derive another with ``dataclasses.replace``::

    from specjax.train.config import TrainConfig

    def get_config() -> TrainConfig:
        return TrainConfig(task="eagle3", task_args={"layers": 1}, data="data/corpus",
                           out_dir="runs/eagle3", total_steps=4000, lr=5e-4)

``specjax train TASK --config FILE.py`` runs it (:func:`specjax.train.trainer.fit`); flags on
the command line override fields (:func:`replace_from_flags`).

Units: a *step* is one optimizer update. With ``grad_accum = k`` a step consumes ``k``
micro-batches of ``batch_size`` records each (an effective batch of ``k * batch_size``); the
learning-rate schedule, ``total_steps``, ``save_every``, ``eval_every`` and ``log_every``
count steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

from specjax.errors import ConfigError

COMPUTE_DTYPES = ("float32", "bfloat16")

# Fields a resumed run may change: they do not alter the trajectory of the parameters (the
# corpus may move: the trainer checks its contents, by fingerprint, instead of its path).
# ``mesh``: a data-parallel step is the single-device step up to the order of the gradient's
# cross-device sum (float tolerance), so a run may continue on another mesh shape.
RESUMABLE_CHANGES = ("max_steps_this_run", "time_limit_min", "plot", "out_dir", "data",
                     "mesh")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs.

    Attributes:
      task: a registered training task (``specjax.train.TASKS.names()``).
      task_args: the task's options (converted through its typed config; strings allowed).
      data: corpus directory (``manifest.json`` + ArrayRecord shards, see
        :mod:`specjax.train.batches`).
      out_dir: run directory: checkpoints, ``metrics.jsonl``, ``curves.png``, ``head/``.
      model: the target model (preset, ``.gguf`` file, Hugging Face directory).
      val_fraction: share of the corpus records held out for validation, in ``(0, 0.5]``.
      seq_len: tokens per record (longer records are truncated, and counted).
      batch_size: records per micro-batch.
      grad_accum: micro-batches per optimizer step.
      lr: peak learning rate (linear warmup from 0, cosine decay to ``lr * end_lr_ratio``).
      warmup_steps: steps of linear warmup (``<= total_steps``).
      total_steps: optimizer steps of the whole recipe.
      end_lr_ratio: final learning rate as a fraction of ``lr``.
      weight_decay, b1, b2: AdamW's.
      clip_norm: global gradient-norm clip (``0`` disables clipping).
      compute_dtype: ``"float32"`` or ``"bfloat16"``: the dtype the target model computes in
        (it is loaded with it; a task reads it from ``lm.model.dtype``). Trainable parameters
        and the optimizer state stay float32.
      seed: the one seed every random choice derives from (parameter init, the
        train/validation split, the shuffle of every epoch, the step keys).
      save_every, eval_every, log_every: in steps.
      eval_batches: validation batches per evaluation (at most the validation split).
      keep_checkpoints: checkpoints kept in ``out_dir/checkpoints`` (oldest deleted first).
      max_steps_this_run: stop after this many steps in this process (a checkpoint is saved):
        a long recipe runs in chunks, each started by the same command. ``None``: run to
        ``total_steps``.
      time_limit_min: stop (with a checkpoint) once this process has trained this many
        minutes (checked after every step). ``None``: no limit. (Every run that trains
        writes the head it reached to ``out_dir/head``; before ``total_steps`` its
        ``meta.json`` says ``"finished": false`` and the step, so a chunk's head can be tried
        before the recipe ends.)
      plot: write ``out_dir/curves.png`` (needs matplotlib).
      init_from: a head directory (as a finished run writes to ``out_dir/head``, or a shipped
        head) whose parameters (and draft vocabulary) start this run instead of a fresh
        initialisation: a recipe continued on a grown corpus, or in a later session whose
        checkpoints are gone. Only read when ``out_dir`` holds no checkpoint yet; the
        optimizer and the schedule start afresh.
      mesh: train data-parallel on a device mesh (``"data=8"``, :func:`specjax.mesh.make_mesh`):
        every micro-batch's records are split over the ``data`` axis (``batch_size`` must be
        a multiple of it), the head, the optimizer state and the frozen target replicated;
        XLA sums the gradients across devices. ``None``: one device. A run may resume on
        another mesh shape (checkpoints restore onto the current mesh). A ``model`` axis > 1
        (sharded heads) is refused for now.
    """

    task: str
    data: str
    out_dir: str
    task_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    model: str = "smollm2-135m"
    val_fraction: float = 0.02
    seq_len: int = 512
    batch_size: int = 8
    grad_accum: int = 1
    lr: float = 3e-4
    warmup_steps: int = 100
    total_steps: int = 2000
    end_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.95
    clip_norm: float = 0.5
    compute_dtype: str = "float32"
    seed: int = 0
    save_every: int = 200
    eval_every: int = 200
    eval_batches: int = 8
    log_every: int = 10
    keep_checkpoints: int = 3
    max_steps_this_run: int | None = None
    time_limit_min: float | None = None
    plot: bool = True
    init_from: str | None = None
    mesh: str | None = None

    def __post_init__(self):
        for name in ("task", "data", "out_dir", "model"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"TrainConfig.{name} must be a non-empty string, got {v!r}")
        if not isinstance(self.task_args, Mapping) or not all(
                isinstance(k, str) for k in self.task_args):
            raise ConfigError("TrainConfig.task_args must map option names (strings) to "
                              f"values, got {self.task_args!r}")
        try:
            json.dumps(dict(self.task_args))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"TrainConfig.task_args must be JSON-serializable (it is saved "
                              f"with every checkpoint): {e}") from None
        # a private copy: the config is immutable even if the caller's dict is not
        object.__setattr__(self, "task_args", dict(self.task_args))
        positive = ("seq_len", "batch_size", "grad_accum", "total_steps", "save_every",
                    "eval_every", "eval_batches", "log_every", "keep_checkpoints")
        for name in positive:
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ConfigError(f"TrainConfig.{name} must be an integer >= 1, got {v!r}")
        for name in ("warmup_steps", "seed"):
            v = getattr(self, name)
            if not _is_int(v) or v < 0:
                raise ConfigError(f"TrainConfig.{name} must be an integer >= 0, got {v!r}")
        if self.warmup_steps > self.total_steps:
            raise ConfigError(f"TrainConfig.warmup_steps ({self.warmup_steps}) must not exceed "
                              f"total_steps ({self.total_steps})")
        if self.init_from is not None and (not isinstance(self.init_from, str)
                                           or not self.init_from.strip()):
            raise ConfigError(f"TrainConfig.init_from must be None or a head directory, got "
                              f"{self.init_from!r}")
        m = self.max_steps_this_run
        if m is not None and (not _is_int(m) or m < 1):
            raise ConfigError("TrainConfig.max_steps_this_run must be None or an integer >= 1, "
                              f"got {m!r}")
        t = self.time_limit_min
        if t is not None and (not _is_num(t) or not t > 0 or t == float("inf")):
            raise ConfigError(f"TrainConfig.time_limit_min must be None or a number of minutes "
                              f"> 0, got {t!r}")
        v = self.val_fraction
        if not _is_num(v) or not 0.0 < v <= 0.5:
            raise ConfigError(f"TrainConfig.val_fraction must be in (0, 0.5], got {v!r}")
        if not _is_num(self.lr) or self.lr <= 0:
            raise ConfigError(f"TrainConfig.lr must be a number > 0, got {self.lr!r}")
        if not _is_num(self.end_lr_ratio) or not 0.0 <= self.end_lr_ratio <= 1.0:
            raise ConfigError(f"TrainConfig.end_lr_ratio must be in [0, 1], got "
                              f"{self.end_lr_ratio!r}")
        if not _is_num(self.weight_decay) or self.weight_decay < 0:
            raise ConfigError(f"TrainConfig.weight_decay must be a number >= 0, got "
                              f"{self.weight_decay!r}")
        for name in ("b1", "b2"):
            v = getattr(self, name)
            if not _is_num(v) or not 0.0 <= v < 1.0:
                raise ConfigError(f"TrainConfig.{name} must be in [0, 1), got {v!r}")
        if not _is_num(self.clip_norm) or self.clip_norm < 0:
            raise ConfigError(f"TrainConfig.clip_norm must be a number >= 0 (0: no clipping), "
                              f"got {self.clip_norm!r}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"TrainConfig.compute_dtype must be one of "
                              f"{', '.join(COMPUTE_DTYPES)}, got {self.compute_dtype!r}")
        if self.mesh is not None:
            from specjax.mesh import parse_mesh_spec

            if not isinstance(self.mesh, str):
                raise ConfigError(f"TrainConfig.mesh must be None or a mesh spec such as "
                                  f"'data=4', got {self.mesh!r}")
            sizes = parse_mesh_spec(self.mesh)
            dp = sizes.get("data", 1)
            if self.batch_size % dp:
                raise ConfigError(f"TrainConfig.batch_size ({self.batch_size}) must be a "
                                  f"multiple of the mesh's data axis ({dp}): each device "
                                  f"takes an equal share of every micro-batch")
        if not isinstance(self.plot, bool):
            raise ConfigError(f"TrainConfig.plot must be true or false, got {self.plot!r}")

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-serializable values (saved with every checkpoint)."""
        d = dataclasses.asdict(self)
        d["task_args"] = dict(self.task_args)
        return json.loads(json.dumps(d))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys are a :class:`ConfigError`."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"TrainConfig has no field {unknown[0]!r}"
                              + (f" (nor {unknown[1:]})" if len(unknown) > 1 else ""))
        return cls(**dict(d))

    def differences(self, other: TrainConfig | Mapping[str, Any],
                    ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
        """Names of the fields whose values differ from ``other`` (a config or its
        :meth:`to_dict`), leaving out ``ignore``."""
        a = self.to_dict()
        b = other.to_dict() if isinstance(other, TrainConfig) else json.loads(json.dumps(
            dict(other)))
        keys = sorted((set(a) | set(b)) - set(ignore))
        return [k for k in keys if a.get(k, "<missing>") != b.get(k, "<missing>")]


def replace_from_flags(cfg: TrainConfig, **flags) -> TrainConfig:
    """``cfg`` with the fields given in ``flags`` replaced; ``None`` values are left out (a flag
    not given on the command line). The result is validated like any config.

    Raises:
      ConfigError: a flag that names no field, or a value the field does not accept.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise ConfigError(f"TrainConfig has no field {unknown[0]!r} (fields: "
                          f"{', '.join(sorted(names))})")
    return dataclasses.replace(cfg, **given) if given else cfg


def load_train_config(path: str | Path) -> TrainConfig:
    """Runs a config file and returns the :class:`TrainConfig` its ``get_config()`` returns.

    Raises:
      ConfigError: naming the file, when it is missing, is not a ``.py`` file, fails to run,
        has no ``get_config`` or returns something that is not a :class:`TrainConfig`.
    """
    from specjax.experiment import run_config_file

    return run_config_file(path, TrainConfig)
