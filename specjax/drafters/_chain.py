"""Autoregressive chain drafting through a draft network, inside the compiled loop."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from specjax.cache import KVCache
from specjax.drafters.base import StepContext
from specjax.policies.base import DraftStep
from specjax.rng import Stream, stream_keys
from specjax.sampling import greedy_token, process_logits


def pick_token(logits, key_data, step, greedy: bool, temperature, top_k, top_p,
               need_probs: bool = False):
    """Draft token from ``logits[B, V]``, with the processed distribution it was drawn from
    when sampling (or when ``need_probs``: the plain softmax when greedy), else None."""
    if greedy:
        tok = greedy_token(logits)
        return tok, (jax.nn.softmax(logits.astype(jnp.float32), axis=-1) if need_probs
                     else None)
    lp = process_logits(logits, temperature, top_k, top_p)
    keys = stream_keys(key_data, Stream.DRAFT_TOKEN, step)
    tok = jax.vmap(jax.random.categorical)(keys, lp).astype(jnp.int32)
    return tok, jnp.exp(lp)


def pick_with_stop(logits, i, k_rows, ctx: StepContext, greedy: bool,
                   stop: Callable | None, carry=None, hidden=None):
    """Draft token ``i`` of every row from ``logits[B, V]`` and the policy's mid-draft stop:
    returns ``(token[B], q[B, V] | None, k_rows, carry)``, ``q`` the distribution the token
    was drawn from when sampling, ``k_rows`` lowered to ``i`` where ``stop`` cuts the draft,
    ``carry`` the stop rule's running value for the next position (:func:`stop_carry0` at the
    first). ``hidden[B, D]``: the drafter's feature that produced ``logits``, if it has one."""
    tok, probs = pick_token(logits, ctx.keys, i, greedy, ctx.temperature, ctx.top_k,
                            ctx.top_p, need_probs=stop is not None or ctx.want_q)
    if stop is not None:
        cut, carry, last = call_stop(stop, DraftStep(index=jnp.asarray(i, jnp.int32),
                                                     token=tok, probs=probs, hidden=hidden,
                                                     carry=carry))
        k_rows = jnp.where(last & (i + 1 < k_rows), i + 1, k_rows)
        k_rows = jnp.where(cut & (i < k_rows), i, k_rows)
    return tok, (probs if keep_q(greedy, ctx) else None), k_rows, carry


def stop_carry0(batch: int):
    """The stop rule's carry at the first draft position of a step."""
    return jnp.zeros((batch,), jnp.float32)


def call_stop(stop: Callable, step: DraftStep):
    """``stop(step)`` -> ``(cut bool[B], carry float32[B], last bool[B])`` whichever form the
    rule returns: ``cut`` (a memoryless rule: the carry passes through), ``(cut, carry)`` or
    ``(cut, carry, last)``, ``last`` meaning "keep this token and draft no more" (the next
    draft forward is then skipped for the row, not computed and thrown away)."""
    out = stop(step)
    B = step.token.shape[0]
    no = jnp.zeros((B,), bool)
    if isinstance(out, tuple):
        cut, carry = out[0], out[1].astype(jnp.float32)
        last = out[2] if len(out) > 2 else no
        return cut, carry, last
    carry = step.carry if step.carry is not None else stop_carry0(B)
    return out, carry, no


def keep_q(greedy: bool, ctx: StepContext) -> bool:
    """Whether a chain keeps its draft distributions: sampling, or a policy that reads them."""
    return (not greedy) or ctx.want_q


def chain_draft(step_fn: Callable, cache: KVCache, first_tokens, first_pos, K: int, k_rows,
                ctx: StepContext, greedy: bool, vocab: int, skip_if_zero: bool = False,
                stop: Callable | None = None):
    """Autoregressive drafting of up to ``k_rows[b]`` (traced, ``<= K``) tokens per row.

    ``step_fn(tokens[B, T], positions[B, T], cache) -> (logits[B, V] of the last token, cache)``
    runs the draft network with ``cache.lengths`` set to the first position of ``tokens``.
    The first call feeds ``first_tokens`` (ending with the pending token); each later call
    feeds the previous draft token.

    ``skip_if_zero``: when no row drafts, nothing runs. The first feed (a single pending
    token) is then the loop's first iteration rather than a ``lax.cond``, which would copy the
    cache it updates on every step. Without it the first feed always runs (a draft model keeps
    its cache in sync that way) and may hold several tokens.

    ``stop(DraftStep) -> bool[B]`` (a policy's mid-draft hook, or None): after each drafted
    token; a row for which it is True drops that token and drafts no more (a rule with
    memory returns ``(cut, carry)``; see :mod:`specjax.policies.base`).

    Returns ``(tokens[B, K], q[B, K, V] | None, cache, k_rows)`` with ``k_rows`` the drafted
    count of each row (lowered where ``stop`` cut a draft).
    """
    B = first_tokens.shape[0]
    tokens = jnp.zeros((B, K), jnp.int32)
    q = jnp.zeros((B, K, vocab), jnp.float32) if keep_q(greedy, ctx) else None
    k_rows = k_rows.astype(jnp.int32)

    def pick(logits, i, k_rows, carry):
        return pick_with_stop(logits, i, k_rows, ctx, greedy, stop, carry)

    carry = stop_carry0(B)
    if skip_if_zero:
        if first_tokens.shape[1] != 1:
            raise ValueError("skip_if_zero drafts from a single pending token")
        start = 0
    else:
        logits, cache = step_fn(first_tokens, first_pos, cache.with_lengths(first_pos[:, 0]))
        tok, q0, k_rows, carry = pick(logits, 0, k_rows, carry)
        tokens = tokens.at[:, 0].set(tok)
        q = None if q is None else q.at[:, 0].set(q0)
        start = 1
    base = first_pos[:, -1]  # position of the pending token

    def body(c):
        i, cache, tokens, q, k_rows, carry = c
        prev = jax.lax.dynamic_index_in_dim(tokens, jnp.maximum(i - 1, 0), axis=1,
                                            keepdims=False)
        prev = jnp.where(i == 0, first_tokens[:, -1], prev)  # i == 0: the pending token
        pos = base + i
        logits, cache = step_fn(prev[:, None], pos[:, None], cache.with_lengths(pos))
        tok, qi, k_rows, carry = pick(logits, i, k_rows, carry)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, i, axis=1)
        if q is not None:
            q = jax.lax.dynamic_update_index_in_dim(q, qi, i, axis=1)
        return i + 1, cache, tokens, q, k_rows, carry

    _, cache, tokens, q, k_rows, _ = jax.lax.while_loop(
        lambda c: c[0] < jnp.max(c[4]), body,
        (jnp.int32(start), cache, tokens, q, k_rows, carry))
    return tokens, q, cache, jnp.minimum(k_rows, K)
