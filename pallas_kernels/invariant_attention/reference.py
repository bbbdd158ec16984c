"""The product part of exact attention in plain jnp, for the tests: what
:func:`.kernel.invariant_attention_part` computes, without its fixed order."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def attention_part_reference(q, k_all, v_all, pre, m_t, dtype):
    """Scores of ``q [B, T, H, Dh]`` against ``k_all [B, KVH, S, Dh]`` where ``pre [B, T, S]``,
    scaled by ``1 / sqrt(Dh)``; their max with ``m_t [B, T, KVH, G]`` (``-inf`` -> 0); the
    exponentials' sums and their product with ``v_all`` (``dtype`` operands, float32 sums).
    Returns ``(out [B, T, KVH, G, Dh], l [B, KVH, G, T], m [B, KVH, G, T])``, float32."""
    B, T, H, hd = q.shape
    kvh = k_all.shape[1]
    G = H // kvh
    f32 = jnp.float32

    def rounded(a):  # operands rounded to ``dtype``, products and sums in float32 (exact)
        return a.astype(dtype).astype(f32)

    hi = jax.lax.Precision.HIGHEST
    qg = rounded(q.reshape(B, T, kvh, G, hd))
    s = jnp.einsum("btkgd,bksd->bkgts", qg, rounded(k_all), precision=hi) / math.sqrt(hd)
    s = jnp.where(pre[:, None, None], s, -jnp.inf)
    m = jnp.maximum(jnp.max(s, axis=-1), jnp.transpose(m_t, (0, 2, 3, 1)))
    m = jnp.where(jnp.isneginf(m), 0.0, m)
    p = jnp.exp(s - m[..., None])
    v = rounded(jnp.where(jnp.isfinite(v_all), v_all, 0))
    out = jnp.einsum("bkgts,bksd->btkgd", rounded(p), v, precision=hi)
    return out, jnp.sum(p, axis=-1), m
