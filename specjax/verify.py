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


# ----------------------------------------------------------------------------- trees


def greedy_tree_verify(tokens: jax.Array, parent: jax.Array, valid: jax.Array,
                       target_argmax: jax.Array, max_depth: int):
    """Greedy rule on a tree: from the root, descend to the child whose token equals the
    target's argmax at the current node, while one exists (the first in node order if several
    do); then emit the argmax at the last accepted node.

    Args:
      tokens, parent, valid: ``[B, N]`` the drafted tree (see :class:`specjax.tree.DraftTree`).
      target_argmax: ``int32[B, N + 1]`` target argmax at each block entry (root = 0).
      max_depth: static maximum depth ``D``.
    Returns ``(n_acc[B], path[B, D], next_tok[B])``; ``path[b, :n_acc[b]]`` are the accepted
    node indices, root to leaf (``-1`` past ``n_acc``).
    """
    B, N = tokens.shape
    cur = jnp.full((B,), -1, jnp.int32)
    going = jnp.ones((B,), bool)
    path = []
    for _ in range(max_depth):
        want = jnp.take_along_axis(target_argmax, (cur + 1)[:, None], axis=1)
        cand = valid & (parent == cur[:, None]) & (tokens == want)
        has = jnp.any(cand, axis=1) & going
        j = jnp.argmax(cand, axis=1).astype(jnp.int32)  # first matching child
        cur = jnp.where(has, j, cur)
        going = has
        path.append(jnp.where(has, j, -1))
    path = jnp.stack(path, axis=1)
    n_acc = jnp.sum(path >= 0, axis=1).astype(jnp.int32)
    nxt = jnp.take_along_axis(target_argmax, (cur + 1)[:, None], axis=1)[:, 0]
    return n_acc, path, nxt


def _renorm(x):
    z = jnp.sum(x, axis=-1, keepdims=True)
    return jnp.where(z > 1e-12, x / jnp.where(z > 0, z, 1.0), 0.0)


def sibling_step(r: jax.Array, qv: jax.Array | None, x: jax.Array, rule: str):
    """One candidate child ``x[B]`` of the multi-draft rule (see :func:`sampling_tree_verify`).

    Args:
      r: ``[B, V]`` the current residual target distribution at the parent.
      qv: ``[B, V]`` the proposal ``x`` was drawn from (None for ``rule="det"``).
    Returns ``(accept_prob[B], residual_if_rejected[B, V], proposal_for_next_sibling[B, V] |
    None, tried[B])``; ``tried`` is False for a zero-probability proposal (padding, skipped).
    """
    rows = jnp.arange(x.shape[0])
    r_x = r[rows, x]
    if rule == "det":
        return r_x, _renorm(r.at[rows, x].set(0.0)), None, jnp.ones(x.shape, bool)
    q_x = qv[rows, x]
    acc = jnp.minimum(r_x / jnp.where(q_x > 0, q_x, 1.0), 1.0)
    nxt_q = _renorm(qv.at[rows, x].set(0.0)) if rule == "wor" else qv
    return acc, _residual(r, qv), nxt_q, q_x > 0


def sampling_tree_verify(keys: jax.Array, tokens: jax.Array, parent: jax.Array,
                         depth: jax.Array, valid: jax.Array, p: jax.Array, q: jax.Array | None,
                         max_depth: int, rule: str):
    """Lossless multi-draft speculative sampling on a tree.

    Walks the nodes once in order (parents precede children, siblings in draw order). At the
    current node ``u`` (the root first) with residual ``r`` (initially the target's ``p_u``),
    each child ``x`` is tried in turn:

    * ``rule="iid"`` (siblings drawn independently from ``q_u``, SpecInfer): accept with
      probability ``min(1, r(x) / q_u(x))``; on rejection ``r <- norm(max(0, r - q_u))``.
    * ``rule="wor"`` (siblings drawn without replacement, Gumbel-top-k; Sequoia / RSD): the same
      with ``q`` the proposal the sibling was drawn from: ``q_u`` for the first, then ``q``
      with the rejected tokens removed and renormalised.
    * ``rule="det"`` (children chosen deterministically, e.g. the top-k of the draft): the
      proposal of each child is a point mass: accept with probability ``r(x)``; on rejection
      ``r <- norm(r`` without ``x)``. No ``q`` needed.

    On acceptance the walk descends (``r <- p_x``); when every child of the current node is
    rejected, or it has none, the emitted token is drawn from ``r`` (the residual, or ``p`` of
    the last accepted node: the bonus token). The output is distributed exactly as the target's.

    Args:
      keys: ``[B, 2]`` raw PRNG keys (fresh for this step).
      tokens, parent, depth, valid: ``[B, N]`` the tree.
      p: ``float32[B, N + 1, V]`` processed target probabilities at every block entry.
      q: ``float32[B, N, V]``: the processed draft distribution each node was drawn from (its
        parent's), or None for ``rule="det"``.
    Returns ``(n_acc[B], path[B, D], next_tok[B])`` as :func:`greedy_tree_verify`.
    """
    if rule not in ("iid", "wor", "det"):
        raise ValueError(f"unknown sibling rule {rule!r}")
    if rule != "det" and q is None:
        raise ValueError(f"rule {rule!r} needs the draft distributions q")
    B, N = tokens.shape
    ks = jax.vmap(lambda k: jax.random.split(jax.random.wrap_key_data(k)))(keys)
    u = jax.vmap(lambda k: jax.random.uniform(k, (N,)))(ks[:, 0])  # [B, N]
    rows = jnp.arange(B)

    def body(j, c):
        cur, r, qrem, fresh, path = c
        x = tokens[:, j]
        cand = valid[:, j] & (parent[:, j] == cur)
        if rule == "det":
            qv = None
        elif rule == "wor":
            qv = jnp.where(fresh[:, None], q[:, j], qrem)
        else:
            qv = q[:, j]
        acc_p, rej_r, new_qrem, ok = sibling_step(r, qv, x, rule)
        cand = cand & ok
        accept = cand & (u[:, j] < acc_p)
        reject = cand & ~accept
        p_j = p[:, j + 1]
        r = jnp.where(accept[:, None], p_j, jnp.where(reject[:, None], rej_r, r))
        if rule == "wor":
            qrem = jnp.where(reject[:, None], new_qrem, qrem)
        fresh = jnp.where(accept, True, jnp.where(reject, False, fresh))
        d = depth[:, j] - 1
        path = path.at[rows, jnp.where(accept, d, max_depth)].set(j, mode="drop")
        cur = jnp.where(accept, j, cur)
        return cur, r, qrem, fresh, path

    init = (jnp.full((B,), -1, jnp.int32), p[:, 0],
            jnp.zeros_like(p[:, 0]) if rule == "wor" else jnp.zeros((B, 1), p.dtype),
            jnp.ones((B,), bool), jnp.full((B, max_depth), -1, jnp.int32))
    cur, r, _, _, path = jax.lax.fori_loop(0, N, body, init)
    n_acc = jnp.sum(path >= 0, axis=1).astype(jnp.int32)
    logits = jnp.where(r > 0, jnp.log(jnp.maximum(r, 1e-38)), -jnp.inf)
    nxt = jax.vmap(jax.random.categorical)(ks[:, 1], logits).astype(jnp.int32)
    return n_acc, path, nxt
