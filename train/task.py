"""The training-task protocol: what a trainer needs from one kind of head.

A task owns the trainable parameters of one head (EAGLE-3, EAGLE-1, Medusa, Hydra, an
acceptance head, ...) and its loss; the trainer (:mod:`specjax.train.trainer`) owns the
optimizer, the data, checkpoints and metrics. Everything a jitted train step touches is an
argument (no state hidden in the task object, which is static)::

    task = TASKS.build(name, config.task_args, lm)       # lm: the loaded target (LoadedModel)
    params = task.init_params(jax.random.key(seed))      # trainable pytree
    frozen = task.frozen()                               # arrays it reads but never trains
    loss, metrics = task.loss(params, frozen, batch, rng)   # pure, jittable
    task.save_head(params, path, meta)                   # the file the drafter loads

``batch`` holds ``tokens int32[B, T]`` (prompt + answer, right-padded), ``loss_mask
int32[B, T]`` (1 where the token is an answer token the head should predict) and ``lengths
int32[B]``. ``metrics`` are scalars (``loss``, ``acc_0``, ``acc_1``, ...: per-position draft
accuracy), averaged by the trainer over accumulation steps and logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import jax

from specjax.errors import ConfigError
from specjax.registry import Registry


class Task(Protocol):
    name: str

    def init_params(self, rng: jax.Array) -> Any: ...

    def frozen(self) -> Any: ...

    def loss(self, params, frozen, batch: dict[str, jax.Array], rng: jax.Array
             ) -> tuple[jax.Array, dict[str, jax.Array]]: ...

    def save_head(self, params, path: str | Path, meta: dict) -> None: ...


# name -> build(config, lm): the config dataclass holds the task's own options
TASKS = Registry("training task", ConfigError)
