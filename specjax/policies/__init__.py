"""Speculation-length policies."""

from specjax.policies.adaptive import AdaptivePolicy
from specjax.policies.base import Policy
from specjax.policies.fixed import FixedPolicy

__all__ = ["AdaptivePolicy", "FixedPolicy", "Policy", "make"]


def make(name: str, max_k: int, **kwargs):
    """Builds policy ``name`` ("fixed" or "adaptive") for drafts of up to ``max_k`` tokens."""
    from specjax.drafters.base import DrafterError

    table = {"fixed": FixedPolicy, "adaptive": AdaptivePolicy}
    if name not in table:
        raise DrafterError(f"unknown policy {name!r}; available: {', '.join(sorted(table))}")
    return table[name](max_k, **kwargs)
