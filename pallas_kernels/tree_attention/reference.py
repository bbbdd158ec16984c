"""Tree attention in plain jnp: the split reference (the "xla" backend) and a dense oracle.

The op: the T tree nodes of each row attend to the row's committed KV prefix (slots
``< lengths[b]``) and to a tree block under ``tree_mask``, with one softmax over the union.
LongSpec's hybrid tree attention (METHODS.md card C30) computes the two parts separately and
merges them by log-sum-exp; every backend in this package follows that split:

* prefix part: mask-free apart from ``slot < length`` (the same mask for every query), so a
  flash-decoding kernel can stream the cache once for all queries of a kv head;
* tree part: a small ``[T, W]`` masked attention;
* merge: each part is an unnormalised triple ``(acc, m, l)``: the running max ``m`` of the
  scaled scores, ``l = sum(exp(s - m))`` and ``acc = sum(exp(s - m) * v)``. Parts are rescaled
  to their common max and summed; ``out = acc / l``, and a query that sees nothing gets zeros.

Layout used between the parts ("grouped"): queries ``[B, KVH, G, T, Dh]`` with ``G = H // KVH``
query heads per kv head (query head ``h`` uses kv head ``h // G``); statistics ``[B, KVH, G, T]``.

Entries no query may read (cache slots past a row's length, tree entries hidden from every
query) may hold anything, NaN included: their scores are masked to ``-inf`` and their values
are zeroed before any probability-times-value product (``0 * NaN`` is NaN).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

_HIGHEST = jax.lax.Precision.HIGHEST


class Partial(NamedTuple):
    """One unnormalised softmax part, grouped layout.

    Attributes:
      acc: f32[B, KVH, G, T, Dh], ``sum_j exp(s_j - m) * v_j`` over the part's visible entries.
      m: f32[B, KVH, G, T], max visible scaled score (``-inf`` when nothing is visible).
      l: f32[B, KVH, G, T], ``sum_j exp(s_j - m)`` (0 when nothing is visible).
    """

    acc: jax.Array
    m: jax.Array
    l: jax.Array


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def check_shapes(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask) -> tuple[int, ...]:
    """Validates the op's shapes; returns ``(B, T, H, Dh, S, KVH, W)``."""
    if q.ndim != 4:
        raise ValueError(f"q must be [B, T, H, Dh], got shape {q.shape}")
    b, t, h, dh = q.shape
    if k_cache.ndim != 4 or k_cache.shape[0] != b or k_cache.shape[3] != dh:
        raise ValueError(f"k_cache must be [B={b}, S, KVH, Dh={dh}], got {k_cache.shape}")
    s, kvh = k_cache.shape[1], k_cache.shape[2]
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {v_cache.shape} != k_cache shape {k_cache.shape}")
    if kvh == 0 or h % kvh:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({kvh})")
    if lengths.shape != (b,):
        raise ValueError(f"lengths must be [B={b}], got {lengths.shape}")
    if k_tree.ndim != 4 or k_tree.shape[0] != b or k_tree.shape[2:] != (kvh, dh):
        raise ValueError(f"k_tree must be [B={b}, W, KVH={kvh}, Dh={dh}], got {k_tree.shape}")
    w = k_tree.shape[1]
    if v_tree.shape != k_tree.shape:
        raise ValueError(f"v_tree shape {v_tree.shape} != k_tree shape {k_tree.shape}")
    if tree_mask.shape != (b, t, w):
        raise ValueError(f"tree_mask must be [B={b}, T={t}, W={w}], got {tree_mask.shape}")
    return b, t, h, dh, s, kvh, w


def group_queries(q: jax.Array, kv_heads: int) -> jax.Array:
    """``[B, T, H, Dh] -> [B, KVH, G, T, Dh]`` (query head ``h = kvh * G + g``)."""
    b, t, h, dh = q.shape
    return q.reshape(b, t, kv_heads, h // kv_heads, dh).transpose(0, 2, 3, 1, 4)


def ungroup_output(out: jax.Array) -> jax.Array:
    """``[B, KVH, G, T, Dh] -> [B, T, H, Dh]``."""
    b, kvh, g, t, dh = out.shape
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, kvh * g, dh)


def _masked_partial(qg, k, v, visible, scale) -> Partial:
    """One part over keys ``k, v: [B, N, KVH, Dh]`` with ``visible`` broadcastable to
    ``[B, 1, 1, T, N]``. Scores of hidden keys are masked to -inf (a NaN key is harmless);
    values that no query sees are zeroed before the probability-times-value product."""
    keep = jnp.any(visible, axis=(1, 2, 3))[:, :, None, None]  # [B, N, 1, 1]
    v = jnp.where(keep, v, jnp.zeros((), v.dtype))
    s = jnp.einsum("bhgtd,bnhd->bhgtn", qg, k, precision=_HIGHEST,
                   preferred_element_type=jnp.float32) * scale
    s = jnp.where(visible, s, -jnp.inf)
    m = jnp.max(s, axis=-1)
    m_safe = jnp.where(jnp.isneginf(m), 0.0, m)
    p = jnp.exp(s - m_safe[..., None])
    l = jnp.sum(p, axis=-1)
    acc = jnp.einsum("bhgtn,bnhd->bhgtd", p, v.astype(jnp.float32), precision=_HIGHEST,
                     preferred_element_type=jnp.float32)
    return Partial(acc, m, l)


def prefix_partial_xla(qg, k_cache, v_cache, lengths, scale) -> Partial:
    """Prefix part in XLA: every query sees the slots ``< lengths[b]``."""
    s = k_cache.shape[1]
    visible = jnp.arange(s)[None, :] < lengths[:, None]  # [B, S]
    return _masked_partial(qg, k_cache, v_cache, visible[:, None, None, None, :], scale)


def tree_partial(qg, k_tree, v_tree, tree_mask, scale) -> Partial:
    """Tree part (small, in XLA on every backend): query ``i`` sees entry ``j`` iff
    ``tree_mask[b, i, j]``."""
    return _masked_partial(qg, k_tree, v_tree, tree_mask[:, None, None, :, :], scale)


def merge(parts: list[Partial]) -> jax.Array:
    """Log-sum-exp merge of partial softmaxes with one common max; returns f32 ``acc / l``
    (zeros where no part saw anything)."""
    m = parts[0].m
    for p in parts[1:]:
        m = jnp.maximum(m, p.m)
    m_safe = jnp.where(jnp.isneginf(m), 0.0, m)
    acc = jnp.zeros_like(parts[0].acc)
    l = jnp.zeros_like(parts[0].l)
    for p in parts:
        alpha = jnp.exp(p.m - m_safe)  # 0 for an empty part (m = -inf)
        acc = acc + alpha[..., None] * p.acc
        l = l + alpha * p.l
    return acc / jnp.where(l == 0.0, 1.0, l)[..., None]


def combine_with_tree(qg, prefix: Partial, k_tree, v_tree, tree_mask, scale,
                      dtype) -> jax.Array:
    """Adds the tree part to a prefix part, merges them, returns ``[B, T, H, Dh]`` in dtype."""
    tree = tree_partial(qg, k_tree, v_tree, tree_mask, scale)
    return ungroup_output(merge([prefix, tree])).astype(dtype)


def tree_attention_xla(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask, *,
                       scale: float | None = None) -> jax.Array:
    """The "xla" backend: split prefix/tree parts, LSE merge, f32 accumulation.

    Args:
      q: [B, T, H, Dh] queries of the T tree nodes (rotary already applied).
      k_cache, v_cache: [B, S, KVH, Dh] committed prefix; slots ``>= lengths[b]`` are ignored.
      lengths: int32[B] committed prefix length per row (0..S).
      k_tree, v_tree: [B, W, KVH, Dh] the tree block.
      tree_mask: bool[B, T, W] query ``i`` sees tree entry ``j`` iff ``tree_mask[b, i, j]``.
      scale: softmax scale, default ``1 / sqrt(Dh)``.

    Returns:
      [B, T, H, Dh] in ``q.dtype``.
    """
    _, _, _, dh, _, kvh, _ = check_shapes(q, k_cache, v_cache, lengths, k_tree, v_tree,
                                          tree_mask)
    scale = default_scale(dh) if scale is None else scale
    qg = group_queries(q, kvh)
    prefix = prefix_partial_xla(qg, k_cache, v_cache, lengths, scale)
    return combine_with_tree(qg, prefix, k_tree, v_tree, tree_mask, scale, q.dtype)


def tree_attention_dense(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask, *,
                         scale: float | None = None) -> jax.Array:
    """Test oracle: concatenate prefix and tree, one masked softmax, all in float32 at highest
    precision (inputs upcast). Returns float32 ``[B, T, H, Dh]``."""
    b, t, h, dh, s, kvh, w = check_shapes(q, k_cache, v_cache, lengths, k_tree, v_tree,
                                          tree_mask)
    scale = default_scale(dh) if scale is None else scale
    f32 = jnp.float32
    k = jnp.concatenate([k_cache, k_tree], axis=1).astype(f32)  # [B, S + W, KVH, Dh]
    v = jnp.concatenate([v_cache, v_tree], axis=1).astype(f32)
    prefix_visible = jnp.broadcast_to((jnp.arange(s)[None, :] < lengths[:, None])[:, None, :],
                                      (b, t, s))
    visible = jnp.concatenate([prefix_visible, tree_mask], axis=2)  # [B, T, S + W]
    keep = jnp.any(visible, axis=1)[:, :, None, None]
    k = jnp.where(keep, k, 0.0)
    v = jnp.where(keep, v, 0.0)
    qh = q.astype(f32).reshape(b, t, kvh, h // kvh, dh)
    scores = jnp.einsum("btkgd,bnkd->bkgtn", qh, k, precision=_HIGHEST) * scale
    scores = jnp.where(visible[:, None, None], scores, -jnp.inf)
    any_row = jnp.any(visible, axis=-1)[:, None, None, :, None]  # [B, 1, 1, T, 1]
    probs = jax.nn.softmax(jnp.where(any_row, scores, 0.0), axis=-1)
    probs = jnp.where(any_row, probs, 0.0)
    out = jnp.einsum("bkgtn,bnkd->bkgtd", probs, v, precision=_HIGHEST)
    return ungroup_output(out)
