"""Fixed speculation length: draft ``k`` tokens every step (the drafter may offer fewer)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.drafters.base import DrafterError


@dataclasses.dataclass(frozen=True)
class FixedPolicy:
    max_k: int
    name: str = "fixed"

    def __post_init__(self):
        if not isinstance(self.max_k, int) or isinstance(self.max_k, bool) or self.max_k < 1:
            raise DrafterError(f"k must be an integer >= 1, got {self.max_k!r}")

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def update(self, state, k, n_draft, n_acc):
        return state
