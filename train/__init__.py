"""Training pipelines (installed as ``specjax.train``): heads for speculative decoding trained
on a corpus of the target model's own outputs.

    from specjax.train import TASKS, TrainConfig, fit, load_train_config

    cfg = load_train_config("configs/train_eagle3.py")     # get_config() -> TrainConfig
    summary = fit(cfg)                                      # resumes from cfg.out_dir

* :mod:`specjax.train.task`: the ``Task`` protocol and the ``TASKS`` registry;
* :mod:`specjax.train.config`: :class:`TrainConfig` and config files;
* :mod:`specjax.train.batches`: corpus reading, split, batches, ``tokenizer_sha256``;
* :mod:`specjax.train.checkpoint`: orbax checkpoints, stopping on a signal;
* :mod:`specjax.train.metrics`: ``metrics.jsonl`` and ``curves.png``;
* :mod:`specjax.train.trainer`: :func:`fit`.

Importing the package registers every task: the ``tasks`` subpackage
(:mod:`specjax.train.tasks`) and any other module of this package whose source calls
``TASKS.register`` are imported here. A task module that fails to import
is reported with a warning and left out, so the other tasks and the trainer still work.
``fit`` is imported on first use (it pulls in optax and orbax).
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

from specjax.train.config import TrainConfig, load_train_config, replace_from_flags
from specjax.train.task import TASKS

__all__ = ["TASKS", "TrainConfig", "fit", "load_train_config", "replace_from_flags",
           "load_task_modules"]

# modules of the machinery itself: never task modules
_INFRASTRUCTURE = frozenset({"__init__", "task", "config", "batches", "checkpoint", "metrics",
                             "trainer", "corpus", "pool"})


def _task_module_names() -> list[str]:
    """Modules (relative names) that register tasks: the ``tasks`` subpackage (its
    ``__init__`` imports its task modules), then any module here or in ``tasks/`` whose
    source calls ``TASKS.register`` (a task module the subpackage does not list yet)."""
    here = Path(__file__).parent
    names = []
    if (here / "tasks" / "__init__.py").is_file():
        names.append("tasks")
    files = [(f.stem, f) for f in sorted(here.glob("*.py")) if f.stem not in _INFRASTRUCTURE]
    files += [(f"tasks.{f.stem}", f) for f in sorted(here.glob("tasks/*.py"))
              if f.stem != "__init__"]
    for name, f in files:
        try:
            if "TASKS.register" in f.read_text(encoding="utf-8"):
                names.append(name)
        except OSError:
            continue
    return names


def load_task_modules() -> dict[str, str]:
    """Imports every task module of this package (see the module docstring); idempotent.

    Returns:
      ``{module: problem}`` for the task modules that could not be imported (also warned).
    """
    failed = {}
    for name in _task_module_names():
        try:
            importlib.import_module(f"{__name__}.{name}")
        except Exception as e:  # noqa: BLE001 - one broken task must not break the others
            failed[name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"specjax.train: task module {name!r} failed to import and is left "
                          f"out ({failed[name]})", stacklevel=2)
    return failed


def __getattr__(name: str):
    if name == "fit":
        from specjax.train.trainer import fit

        return fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


load_task_modules()
