"""The speculation-length policy protocol and the policy registry.

A policy decides, per row and per step, how many tokens to draft (``0..max_k``), may stop a
row's draft while it is being drafted, and learns from what was accepted. Its state is a
pytree carried in the decode loop::

    state = policy.init(batch)
    k = policy.decide(state, ctx)                  # int32[B] in [0, policy.max_k]
    # during drafting, only when policy.stops_mid_draft:
    stop = policy.stop(state, draft_step)          # bool[B]: drop this token, draft no more
                                                   # (or (bool[B], carry[B]): see below)
    state = policy.update(state, k, n_draft, n_acc)   # after verification

``stop`` runs inside the drafter's compiled draft loop after each drafted token (a chain's
``i``-th token; a tree's best candidate of each depth) and sees a :class:`DraftStep`: the
token, the draft distribution it was drawn from and the drafter's own features. Rows for
which it returns True keep the tokens drafted before and draft nothing more this step; no
Python loop, no recompilation per ``k``. Drafters without a draft distribution (prompt
lookup) never call it.

A stop rule with memory across the draft positions of one step (SpecDec++'s running product
of predicted acceptances) returns ``(cut, carry)``: the drafter hands ``carry`` (``float32[B]``)
back in the next position's ``DraftStep.carry``; it is 0 at the first position of every step.
It may return ``(cut, carry, last)``: ``last[b]`` keeps this token and drafts no more for the
row, so that a rule that decides after seeing a token does not pay for the next draft forward.

A policy that never gives every row ``k = 0`` (``fixed``) may say so with a class attribute
``backs_off = False``: the decode loop then compiles no idle steps for it (a step where no row
drafts runs as a plain step plus the drafter's ``skip``; absent, ``backs_off`` is True).

An optional host-side hook ``never_drafts() -> str | None`` says, before a run, that the
policy will not draft in it (a cost-aware policy whose cost model says no draft pays at the
acceptance estimate it starts from, and whose estimate does not move while nothing is
drafted): it returns the reason, and
:func:`specjax.engine.generate` then decodes plainly instead of running the speculative loop
(``result.extra["drafting"]`` says so).

An optional host-side hook ``stats(state) -> {name: int[B]}`` adds per-row counters of the
policy's final state to ``GenerationResult.extra`` (``pearl`` counts its rounds per mode).

Policies are frozen dataclasses registered in :data:`POLICIES`: their ``init`` fields are
their typed options (``max_k`` is filled in from the drafter). A policy imports neither the
drafters nor the loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax

from specjax.errors import PolicyError
from specjax.registry import Registry


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftStep:
    """One drafted token of every row, as the mid-draft stop hook sees it.

    Attributes:
      index: ``int32[]`` 0-based draft position (a tree: depth - 1).
      token: ``int32[B]`` the drafted token.
      probs: ``float32[B, V]`` the draft distribution it was drawn from (temperature,
        top-k and top-p applied when sampling; the plain softmax when greedy), over the
        drafter's vocabulary (an EAGLE head's reduced draft vocabulary: ``V`` may be smaller
        than the target's).
      hidden: ``[B, D]`` the drafter's hidden state that produced ``probs`` (an EAGLE head's
        output feature), or None for drafters that do not expose one.
      carry: ``float32[B]`` what the stop rule returned as its carry at the previous draft
        position of this step (0 at the first), or None where no rule returned one.
    """

    index: jax.Array
    token: jax.Array
    probs: jax.Array
    hidden: jax.Array | None = None
    carry: jax.Array | None = None


class Policy(Protocol):
    name: str
    max_k: int
    stops_mid_draft: bool

    def init(self, batch: int) -> Any: ...

    def decide(self, state, ctx) -> jax.Array: ...

    def stop(self, state, step: DraftStep) -> jax.Array: ...

    def update(self, state, k: jax.Array, n_draft: jax.Array, n_acc: jax.Array) -> Any: ...


def max_k_field():
    """The ``max_k`` field every policy has: filled in from the drafter, not a user option."""
    return dataclasses.field(metadata={"option": False})


def check_max_k(name: str, max_k) -> None:
    if not isinstance(max_k, int) or isinstance(max_k, bool) or max_k < 1:
        raise PolicyError(f"policy {name!r}: k (the maximum draft length) must be an integer "
                          f">= 1, got {max_k!r}")


POLICIES = Registry("policy", PolicyError)
