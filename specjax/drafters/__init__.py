"""Drafters behind one protocol, registered by name in :data:`DRAFTERS` (see :func:`make`)."""

from specjax.drafters import (  # noqa: F401
    draft_model,
    dynamic_exit,
    eagle,
    eagle_lookup,
    hydra,
    medusa,
    ngram,
    prompt_lookup,
    self_spec,
    sssd,
    stand,
    suffix,
    token_recycling,
)
from specjax.drafters.base import (
    DRAFTERS,
    Drafter,
    StepContext,
    available,
    make,
    tree_spec,
)
from specjax.errors import DrafterError

__all__ = ["DRAFTERS", "Drafter", "DrafterError", "StepContext", "available", "make",
           "tree_spec"]
