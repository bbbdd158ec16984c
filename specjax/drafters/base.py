"""The drafter protocol, the per-step context it sees, and a registry by name.

A drafter is a frozen, hashable object (it is a static argument of the compiled loop); the
arrays it needs (a draft model's weights) are returned by :meth:`Drafter.params` and passed
into the jit separately. Inside the loop it is called as::

    state = drafter.init(params, target, prompt_tokens, prompt_lens, cache_len)
    draft, state, target_cache = drafter.propose(params, target, state, ctx, k, greedy)
    state = drafter.update(params, state, ctx_after, n_acc)

``propose`` may write scratch entries into the target cache past its committed length
(self-speculative drafters draft through the target's own layers); it returns that cache so
the verify pass, which overwrites the scratch, does not force a copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from specjax.cache import KVCache
from specjax.sampling import process_logits


class DrafterError(ValueError):
    """A drafter configuration that cannot work (bad k, exit layer, skip set, vocabulary)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Draft:
    """A drafted chain per row.

    Attributes:
      tokens: ``int32[B, K]`` drafted tokens (entries past ``n`` are ignored).
      n: ``int32[B]`` how many tokens were drafted for each row (``0 <= n <= K``).
      q: ``float32[B, K, V]`` the (processed) draft distributions the tokens were sampled
        from, for lossless sampling; ``None`` for deterministic drafters (q = one-hot) and in
        greedy mode.
    """

    tokens: jax.Array
    n: jax.Array
    q: jax.Array | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a drafter may read at the start of a step.

    Attributes:
      seq: ``int32[B, L]`` every token of each row so far: prompt, committed output and the
        pending token (the newest, not yet in the target cache).
      seq_len: ``int32[B]`` valid tokens in ``seq``; the pending token is ``seq[b, seq_len-1]``.
      target_cache: the target KV cache; its committed length is ``seq_len - 1``.
      keys: ``uint32[B, 2]`` fresh raw PRNG keys for this step, one per row.
      live: ``bool[B]`` rows still generating.
      temperature, top_k, top_p: sampling parameters (traced scalars).
    """

    seq: jax.Array
    seq_len: jax.Array
    target_cache: KVCache
    keys: jax.Array
    live: jax.Array
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array

    @property
    def pending(self) -> jax.Array:
        return jnp.take_along_axis(self.seq, (self.seq_len - 1)[:, None], axis=1)[:, 0]


class Drafter(Protocol):
    name: str
    max_k: int
    deterministic: bool  # proposals are a function of the context (q = one-hot)

    def params(self) -> Any: ...

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len: int) -> Any: ...

    def propose(self, params, target, state, ctx: StepContext, k: jax.Array, greedy: bool
                ) -> tuple[Draft, Any, KVCache]: ...

    def update(self, params, state, ctx: StepContext, n_acc: jax.Array) -> Any: ...


# ----------------------------------------------------------------------------- helpers


def pick_token(logits, key_data, step: int, greedy: bool, temperature, top_k, top_p):
    """Draft token (and its processed distribution when sampling) from ``logits[B, V]``."""
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), None
    lp = process_logits(logits, temperature, top_k, top_p)
    keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k), 1000 + step)
                    )(key_data)
    tok = jax.vmap(jax.random.categorical)(keys, lp).astype(jnp.int32)
    return tok, jnp.exp(lp)


def chain_draft(step_fn: Callable, cache: KVCache, first_tokens, first_pos, K: int, kmax,
                ctx: StepContext, greedy: bool, vocab: int, skip_if_zero: bool = False):
    """Autoregressive drafting of up to ``kmax`` (traced, ``<= K``) tokens.

    ``step_fn(tokens[B, T], positions[B, T], cache) -> (logits[B, V] of the last token, cache)``
    runs the draft network with ``cache.lengths`` set to the first position of ``tokens``.
    The first call feeds ``first_tokens`` (ending with the pending token); each later call
    feeds the previous draft token.
    """
    if skip_if_zero:
        B = first_tokens.shape[0]
        empty = (jnp.zeros((B, K), jnp.int32),
                 None if greedy else jnp.zeros((B, K, vocab), jnp.float32), cache)
        return jax.lax.cond(
            kmax > 0,
            lambda c: chain_draft(step_fn, c, first_tokens, first_pos, K, kmax, ctx, greedy,
                                  vocab),
            lambda c: (empty[0], empty[1], c),
            cache)
    B = first_tokens.shape[0]
    base = first_pos[:, -1]  # position of the pending token
    logits, cache = step_fn(first_tokens, first_pos, cache.with_lengths(first_pos[:, 0]))
    tok, q0 = pick_token(logits, ctx.keys, 0, greedy, ctx.temperature, ctx.top_k, ctx.top_p)
    tokens = jnp.zeros((B, K), jnp.int32).at[:, 0].set(tok)
    q = None if greedy else jnp.zeros((B, K, vocab), jnp.float32).at[:, 0].set(q0)

    def cond(c):
        return c[0] < kmax

    def body(c):
        i, cache, tokens, q = c
        prev = jax.lax.dynamic_index_in_dim(tokens, i - 1, axis=1, keepdims=False)
        pos = base + i
        logits, cache = step_fn(prev[:, None], pos[:, None], cache.with_lengths(pos))
        tok, qi = pick_token(logits, ctx.keys, i, greedy, ctx.temperature, ctx.top_k, ctx.top_p)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, i, axis=1)
        if q is not None:
            q = jax.lax.dynamic_update_index_in_dim(q, qi, i, axis=1)
        return i + 1, cache, tokens, q

    _, cache, tokens, q = jax.lax.while_loop(cond, body, (jnp.int32(1), cache, tokens, q))
    return tokens, q, cache


# ----------------------------------------------------------------------------- registry

_REGISTRY: dict[str, Callable[..., Drafter]] = {}


def register(name: str):
    def deco(factory):
        _REGISTRY[name] = factory
        return factory

    return deco


def available() -> list[str]:
    return sorted(_REGISTRY)


def make(name: str, target_lm, **kwargs) -> Drafter:
    """Builds drafter ``name`` for the loaded target (``specjax.LoadedModel`` or ``Llama``)."""
    if name not in _REGISTRY:
        raise DrafterError(f"unknown drafter {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name](target_lm, **kwargs)


def check_k(k) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DrafterError(f"k (the maximum draft length) must be an integer >= 1, got {k!r}")
    return k
