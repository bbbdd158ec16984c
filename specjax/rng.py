"""Named PRNG streams. Every row carries its own raw key (``uint32[B, 2]``, derived from the
run's seed and the prompt's index), so a row samples the same alone or in a batch; each use
inside a step folds in its own stream number, named here instead of scattered as literals."""

from __future__ import annotations

import enum

import jax


class Stream(enum.IntEnum):
    """Offsets folded into a row's step key (``index`` is added to the offset)."""

    VERIFY = 7  # the acceptance rule's uniforms and its residual draw
    DRAFT_TOKEN = 1000  # + draft position: a chain's sampled draft tokens
    GUMBEL = 2000  # + depth: Gumbel noise of a tree level drawn without replacement
    SIBLING_DRAWS = 3000  # + depth: independent sibling draws of a tree level


def fold(key_data: jax.Array, n) -> jax.Array:
    """``fold_in(key, n)`` per row, as raw key data ``uint32[B, 2]`` (``n`` scalar or ``[B]``)."""
    if getattr(n, "ndim", 0):
        return jax.vmap(lambda k, i: jax.random.key_data(
            jax.random.fold_in(jax.random.wrap_key_data(k), i)))(key_data, n)
    return jax.vmap(lambda k: jax.random.key_data(
        jax.random.fold_in(jax.random.wrap_key_data(k), n)))(key_data)


def stream_keys(key_data: jax.Array, stream: Stream, index=0) -> jax.Array:
    """Typed per-row keys of ``stream`` (+ ``index``) from raw step keys ``[B, 2]``."""
    return jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k),
                                                 int(stream) + index))(key_data)
