"""The acceptance-rule (verifier) protocol and the registry of rules.

A verifier is a frozen, hashable object (part of the compiled loop). The loop runs the target
over ``[pending, node_0 .. node_{N-1}]`` and asks the verifier twice:

* ``target_output(logits, sampling, greedy)``: what it keeps of the target's logits
  ``[B, T, V]`` for every block entry (the argmax ``int32[B, T]``, or probabilities
  ``float32[B, T, V]``); computed inside the verify forward's branch and padded to ``N + 1``.
* ``accept(keys, tree, valid, n_draft, out, *, depth, chain, greedy, rule)``: returns
  ``(n_acc[B], path[B, D], next_token[B])``: how many drafted tokens are accepted, the
  accepted node indices from the root (``-1`` past ``n_acc``) and the correction or bonus
  token that follows them. ``depth`` is the tree's static maximum depth ``D``; ``chain``
  says the tree is a chain (node ``i`` at depth ``i + 1``); ``rule`` is
  :func:`sampling_rule` of the drafter.

``exact`` says whether the rule reproduces plain decoding (greedy: the same tokens; sampling:
the target's distribution). Runs with a rule that is not exact are reported as lossy, and
nobody claims "identical to plain decoding" for them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from specjax.errors import VerifierError
from specjax.registry import Registry
from specjax.sampling import process_logits


class Verifier(Protocol):
    name: str
    exact: bool

    def check(self, greedy: bool, chain: bool) -> None:
        """Raises :class:`VerifierError` when the rule cannot run in this setting."""

    def target_output(self, logits: jax.Array, sampling: Any, greedy: bool) -> jax.Array: ...

    def accept(self, keys: jax.Array, tree, valid: jax.Array, n_draft: jax.Array,
               out: jax.Array, *, depth: int, chain: bool, greedy: bool, rule: str
               ) -> tuple[jax.Array, jax.Array, jax.Array]: ...


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingArrays:
    """Traced sampling parameters of a run (scalars)."""

    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array


def target_probs(logits, sampling: SamplingArrays) -> jax.Array:
    """The target's processed distribution (temperature, top-k, top-p), float32."""
    return jnp.exp(process_logits(logits, sampling.temperature, sampling.top_k, sampling.top_p))


def chain_path(n_acc: jax.Array, depth: int) -> jax.Array:
    """The node path of a chain's accepted prefix: ``[0, 1, .., n_acc - 1, -1, ..]``."""
    ar = jnp.arange(depth, dtype=jnp.int32)[None]
    return jnp.where(ar < n_acc[:, None], ar, -1)


def sampling_rule(drafter) -> str:
    """How the lossless sampling rule treats the drafter's candidates: ``"det"`` for
    deterministic proposals (prompt lookup; top-k / dynamic tree children), else the tree's
    sibling rule (``"wor"`` / ``"iid"``) for sampled drafts."""
    from specjax.tree import TreeSpec

    spec = getattr(drafter, "tree", None) or TreeSpec.chain(drafter.max_k)
    if drafter.deterministic or spec.kind in ("topk", "dynamic"):
        return "det"
    return spec.sibling


VERIFIERS = Registry("verifier", VerifierError)
