"""Confidence stop: draft up to ``k`` tokens, stopping a row's draft at the first token the
drafter is unsure of (HF transformers' ``assistant_confidence_threshold``, llama.cpp's
``p_min``).

Decided during drafting through the mid-draft stop hook: a drafted token whose draft
probability of the most likely token is below ``threshold`` is dropped, and the row drafts
nothing more this step (as llama.cpp does). ``threshold = 0`` is the fixed policy.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field


@POLICIES.register("confidence", doc="draft up to k tokens, stopping a row at the first draft "
                   "whose top-1 draft probability is below threshold (decided mid-draft)")
@dataclasses.dataclass(frozen=True)
class ConfidencePolicy:
    max_k: int = max_k_field()
    threshold: float = dataclasses.field(default=0.4, metadata={
        "help": "stop drafting a row when the draft's top-1 probability falls below this"})
    name: str = dataclasses.field(default="confidence", init=False)
    stops_mid_draft: bool = dataclasses.field(default=True, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        if not isinstance(self.threshold, (int, float)) or not 0.0 <= self.threshold <= 1.0:
            raise PolicyError(f"policy 'confidence': threshold must be in [0, 1], got "
                              f"{self.threshold!r}")

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def stop(self, state, step):
        return jnp.max(step.probs, axis=-1) < self.threshold

    def update(self, state, k, n_draft, n_acc):
        return state
