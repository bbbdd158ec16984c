"""Speculation-length policies."""

from specjax.policies.base import Policy
from specjax.policies.fixed import FixedPolicy

__all__ = ["FixedPolicy", "Policy"]
