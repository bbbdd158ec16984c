"""The speculation-length policy protocol.

A policy decides, per row and per step, how many tokens to draft (``0..K``), and learns from
what was accepted. Its state is a pytree carried in the decode loop::

    state = policy.init(batch)
    k = policy.decide(state, ctx)            # int32[B] in [0, policy.max_k]
    state = policy.update(state, k, n_draft, n_acc)   # after verification
"""

from __future__ import annotations

from typing import Any, Protocol

import jax


class Policy(Protocol):
    name: str
    max_k: int

    def init(self, batch: int) -> Any: ...

    def decide(self, state, ctx) -> jax.Array: ...

    def update(self, state, k: jax.Array, n_draft: jax.Array, n_acc: jax.Array) -> Any: ...
