"""Acceptance rules for drafted chains.

Every rule takes the drafted tokens ``d[B, K]`` with per-row valid counts ``n_draft[B]`` and
the target's distributions at the ``K + 1`` positions of the verified block (position ``i``
predicts the token after ``i`` accepted drafts), and returns

  * ``n_acc[B]``: how many drafted tokens are accepted (a prefix, ``0 <= n_acc <= n_draft``);
  * ``next_tok[B]``: the correction token at the first rejection, or the bonus token after a
    fully accepted draft.

Both rules are lossless: greedy reproduces greedy decoding token for token, and speculative
sampling (Leviathan et al. / Chen et al., card C0) reproduces the target distribution exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def accepted_prefix(ok: jax.Array, n_draft: jax.Array) -> jax.Array:
    """Length of the leading run of ``ok[B, K]`` that lies within ``n_draft``."""
    K = ok.shape[1]
    ok = ok & (jnp.arange(K)[None, :] < n_draft[:, None])
    return jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)


def greedy_verify(draft: jax.Array, n_draft: jax.Array, target_argmax: jax.Array):
    """Greedy rule: accept while the draft equals the target's argmax; then take the argmax.

    Args:
      draft: ``int32[B, K]`` drafted tokens.
      n_draft: ``int32[B]`` valid drafted tokens per row.
      target_argmax: ``int32[B, K + 1]`` target argmax at each block position.
    """
    n_acc = accepted_prefix(draft == target_argmax[:, :-1], n_draft)
    nxt = jnp.take_along_axis(target_argmax, n_acc[:, None], axis=1)[:, 0]
    return n_acc, nxt


def _residual(p, q):
    """norm(max(0, p - q)); falls back to p where the residual mass vanishes (p == q)."""
    r = jnp.maximum(p - q, 0.0)
    z = jnp.sum(r, axis=-1, keepdims=True)
    return jnp.where(z > 1e-12, r / jnp.where(z > 0, z, 1.0), p)


def acceptance_probs(draft: jax.Array, p: jax.Array, q: jax.Array | None) -> jax.Array:
    """``min(1, p_i(d_i) / q_i(d_i))`` per draft position, ``[B, K]`` (q None = one-hot)."""
    K = draft.shape[1]
    p_d = jnp.take_along_axis(p[:, :K], draft[..., None], axis=-1)[..., 0]
    if q is None:
        return jnp.minimum(p_d, 1.0)
    q_d = jnp.take_along_axis(q, draft[..., None], axis=-1)[..., 0]
    return jnp.where(q_d > 0, jnp.minimum(p_d / jnp.where(q_d > 0, q_d, 1.0), 1.0), 1.0)


def correction_dist(draft: jax.Array, n_draft: jax.Array, n_acc: jax.Array, p: jax.Array,
                    q: jax.Array | None) -> jax.Array:
    """Distribution of the token emitted after ``n_acc`` accepted drafts, ``[B, V]``:
    the residual ``norm(max(0, p - q))`` at a rejection, the target's ``p`` after a full
    acceptance (the bonus token)."""
    K = draft.shape[1]
    V = p.shape[-1]
    p_at = jnp.take_along_axis(p, n_acc[:, None, None], axis=1)[:, 0]
    at = jnp.minimum(n_acc, K - 1)
    if q is None:
        d_at = jnp.take_along_axis(draft, at[:, None], axis=1)[:, 0]
        q_at = jax.nn.one_hot(d_at, V, dtype=p.dtype)
    else:
        q_at = jnp.take_along_axis(q, at[:, None, None], axis=1)[:, 0]
    rejected = n_acc < n_draft
    return jnp.where(rejected[:, None], _residual(p_at, q_at), p_at)


def sampling_verify(keys: jax.Array, draft: jax.Array, n_draft: jax.Array, p: jax.Array,
                    q: jax.Array | None):
    """Lossless speculative sampling for a chain.

    Args:
      keys: ``[B, 2]`` uint32 raw PRNG keys, one per row (fresh for this step).
      draft: ``int32[B, K]``.
      n_draft: ``int32[B]``.
      p: ``float32[B, K + 1, V]`` target probabilities (temperature/top-k/top-p applied).
      q: ``float32[B, K, V]`` draft probabilities the tokens were sampled from (same
        processing), or ``None`` for deterministic drafters (q = one-hot of the draft, which
        keeps the rule exact: accept with probability p(d), residual = p without d).
    """
    B, K = draft.shape
    ks = jax.vmap(lambda k: jax.random.split(jax.random.wrap_key_data(k)))(keys)
    k_u, k_s = ks[:, 0], ks[:, 1]
    u = jax.vmap(lambda k: jax.random.uniform(k, (K,)))(k_u)  # [B, K] in [0, 1)
    ok = u < acceptance_probs(draft, p, q)  # P(accept) = min(1, p/q) exactly
    n_acc = accepted_prefix(ok, n_draft)
    dist = correction_dist(draft, n_draft, n_acc, p, q)
    logits = jnp.where(dist > 0, jnp.log(jnp.maximum(dist, 1e-38)), -jnp.inf)
    nxt = jax.vmap(jax.random.categorical)(k_s, logits).astype(jnp.int32)
    return n_acc, nxt
