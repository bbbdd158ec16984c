"""Drafters behind one protocol, registered by name (see :func:`make`)."""

from specjax.drafters import draft_model, prompt_lookup, self_spec  # noqa: F401  (registers)
from specjax.drafters.base import (
    Drafter,
    DrafterError,
    StepContext,
    available,
    make,
    register,
    tree_spec,
)

__all__ = ["Drafter", "DrafterError", "StepContext", "available", "make", "register", "tree_spec"]
