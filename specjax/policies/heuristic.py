"""Hugging Face transformers' draft-length schedule (``num_assistant_tokens_schedule=
"heuristic"``): per row, draft ``k`` tokens; after a step whose whole draft was accepted
``k += up`` (2), otherwise ``k -= down`` (1), kept within ``[min_k, max_k]``. A row that
drafted nothing (budget end) keeps its ``k``."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field


@POLICIES.register("heuristic", doc="HF transformers' schedule: k += 2 after a fully accepted "
                   "draft, k -= 1 otherwise (per row)")
@dataclasses.dataclass(frozen=True)
class HeuristicPolicy:
    max_k: int = max_k_field()
    start: int | None = dataclasses.field(default=None, metadata={
        "help": "first draft length (default: the maximum k)"})
    up: int = dataclasses.field(default=2, metadata={"help": "added after a full acceptance"})
    down: int = dataclasses.field(default=1, metadata={"help": "taken off otherwise"})
    min_k: int = dataclasses.field(default=1, metadata={"help": "smallest draft length"})
    name: str = dataclasses.field(default="heuristic", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        for f in ("up", "down", "min_k"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise PolicyError(f"policy 'heuristic': {f} must be an integer >= 0, got {v!r}")
        if self.min_k > self.max_k:
            raise PolicyError(f"policy 'heuristic': min_k {self.min_k} exceeds the maximum k "
                              f"{self.max_k}")
        s = self.start
        if s is not None and (not isinstance(s, int) or not self.min_k <= s <= self.max_k):
            raise PolicyError(f"policy 'heuristic': start must be in [min_k, k] = "
                              f"[{self.min_k}, {self.max_k}], got {s!r}")

    def init(self, batch: int):
        s = self.max_k if self.start is None else self.start
        return jnp.full((batch,), s, jnp.int32)

    def decide(self, state, ctx):
        return state

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        full = (n_draft > 0) & (n_acc >= n_draft)
        new = jnp.where(full, state + self.up, state - self.down)
        new = jnp.clip(new, self.min_k, self.max_k)
        return jnp.where(n_draft > 0, new, state).astype(jnp.int32)
