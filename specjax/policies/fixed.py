"""Fixed speculation length: draft ``k`` tokens every step (the drafter may offer fewer)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from specjax.policies.base import POLICIES, check_max_k, max_k_field


@POLICIES.register("fixed", doc="draft k tokens every step")
@dataclasses.dataclass(frozen=True)
class FixedPolicy:
    max_k: int = max_k_field()
    name: str = dataclasses.field(default="fixed", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)
    # never gives every row k = 0 (only the budget's or the cache's end clips k): the loop
    # does not compile idle steps for it (specjax.loop.DecodeLoop.idle_skip)
    backs_off: ClassVar[bool] = False

    def __post_init__(self):
        check_max_k(self.name, self.max_k)

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        return state
