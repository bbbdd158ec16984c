"""The attention part's operands laid out per kv head, and its results back (shared by the
portable kernel, :mod:`.kernel`, and the Mosaic GPU one, :mod:`.mosaic_gpu`)."""

from __future__ import annotations

import jax.numpy as jnp
from jax.experimental import pallas as pl


def per_kv_head(q, k_all, v_all, pre, m_t, dtype, block_m: int, block_s: int, pre_dtype):
    """The operands laid out per kv head: queries as rows ``t * G + g`` of ``[B, KVH, Mp, Dh]``
    in ``dtype`` (``Mp``: ``T * G`` padded with zeros to a multiple of ``block_m``), the cache
    ``[B, KVH, Sp, Dh]`` (``Sp``: padded to a multiple of ``block_s``), the visibility
    ``[B, Mp, Sp]`` in ``pre_dtype`` (padding: not visible) and ``m_t`` as
    ``float32[B, KVH, Mp]`` (padding: ``-inf``)."""
    B, T, H, hd = q.shape
    kvh, S = k_all.shape[1], k_all.shape[2]
    G = H // kvh
    rows = T * G
    mp = pl.cdiv(max(rows, 1), block_m) * block_m
    sp = pl.cdiv(max(S, 1), block_s) * block_s
    qr = jnp.transpose(q.reshape(B, T, kvh, G, hd), (0, 2, 1, 3, 4)).reshape(B, kvh, rows, hd)
    qr = jnp.pad(qr.astype(dtype), ((0, 0), (0, 0), (0, mp - rows), (0, 0)))
    pre_r = jnp.repeat(pre.astype(pre_dtype), G, axis=1)  # [B, T * G, S], row t * G + g
    pre_r = jnp.pad(pre_r, ((0, 0), (0, mp - rows), (0, sp - S)))
    mt_r = jnp.transpose(m_t, (0, 2, 1, 3)).reshape(B, kvh, rows).astype(jnp.float32)
    mt_r = jnp.pad(mt_r, ((0, 0), (0, 0), (0, mp - rows)), constant_values=-jnp.inf)
    k, v = k_all.astype(dtype), v_all.astype(dtype)
    if sp != S:  # a copy; decoding's caches are multiples of 256 slots and skip it
        k = jnp.pad(k, ((0, 0), (0, 0), (0, sp - S), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, sp - S), (0, 0)))
    return qr, k, v, pre_r, mt_r


def from_kv_head_rows(out, l, m, T: int, G: int):
    """``out [B, KVH, Mp, Dh]``, ``l, m [B, KVH, Mp]`` (rows ``t * G + g``, padded) as the
    part's results ``(out [B, T, KVH, G, Dh], l [B, KVH, G, T], m [B, KVH, G, T])``."""
    B, kvh, _, hd = out.shape
    rows = T * G
    out = jnp.transpose(out[:, :, :rows].reshape(B, kvh, T, G, hd), (0, 2, 1, 3, 4))
    l = jnp.transpose(l[:, :, :rows].reshape(B, kvh, T, G), (0, 1, 3, 2))
    m = jnp.transpose(m[:, :, :rows].reshape(B, kvh, T, G), (0, 1, 3, 2))
    return out, l, m
