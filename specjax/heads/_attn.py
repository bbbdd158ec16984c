"""Attention of a one-layer draft network with its own KV cache (EAGLE heads, Hydra++'s
prefix layer): a block of new entries written at ``lengths + write_offset``, seeing the
committed prefix plus a mask over the scratch window."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.cache import KVCache, slots_of, write_block
from specjax.models.llama import split_attention


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, cache: KVCache, *,
                     attn_mask: jax.Array | None = None, write_offset: int = 0,
                     prefix_empty: bool = False) -> tuple[jax.Array, KVCache]:
    """``q[B, T, H, Dh]``, ``k, v[B, T, KVH, Dh]`` (rotary applied) of a block of ``T`` new
    entries written at ``cache.lengths + write_offset + [0, T)``.

    ``attn_mask[B, T, W]`` says which of the ``W`` scratch slots past ``cache.lengths`` each
    query sees (default: causal within the block); every query sees the committed prefix.
    Returns ``(attention output [B, T, H * Dh], cache with the block written)`` (lengths
    unchanged)."""
    B, T, nh, hd = q.shape
    kvh = k.shape[2]
    if attn_mask is None:
        attn_mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool))[None], (B, T, T))
    W = attn_mask.shape[2]
    in_cache = cache.lengths[:, None] + jnp.arange(W)[None] < cache.max_len
    mask = attn_mask.astype(bool) & in_cache[:, None, :]
    kc = write_block(cache.k[0], k, cache.lengths + write_offset)
    vc = write_block(cache.v[0], v, cache.lengths + write_offset)
    if write_offset == 0 and W == T:
        k_win, v_win = k, v
    else:
        win = jnp.minimum(cache.lengths[:, None] + jnp.arange(W, dtype=jnp.int32)[None],
                          cache.max_len - 1)
        k_win, v_win = slots_of(kc, win), slots_of(vc, win)
    att = split_attention(q.reshape(B, T, kvh, nh // kvh, hd), kc, vc, cache.lengths,
                          k_win, v_win, mask, jnp.float32, prefix_empty)
    return att.reshape(B, T, nh * hd), KVCache(k=(kc,), v=(vc,), lengths=cache.lengths)
