"""Speculation-length policies, registered by name in :data:`POLICIES` (see :mod:`.base`)."""

from specjax.policies import (  # noqa: F401  (registers)
    adaptive,
    batch_table,
    confidence,
    dsde,
    fixed,
    gammatune,
    heuristic,
    pearl,
    smartspec,
    specdecpp,
)
from specjax.policies.adaptive import AdaptivePolicy
from specjax.policies.base import POLICIES, DraftStep, Policy
from specjax.policies.confidence import ConfidencePolicy
from specjax.policies.fixed import FixedPolicy

__all__ = ["POLICIES", "AdaptivePolicy", "ConfidencePolicy", "DraftStep", "FixedPolicy",
           "Policy", "make"]


def make(name: str, max_k: int, **kwargs):
    """Builds policy ``name`` for drafts of up to ``max_k`` tokens (options as keywords)."""
    return POLICIES.build(name, kwargs, max_k=max_k)
