"""The kernel's arithmetic in plain jnp: ``x @ w.T`` summed over fixed blocks of the input axis
in order (``acc = 0; acc += x[:, blk_0] @ w[:, blk_0].T; acc += ...``), float32 accumulation.

It states what :func:`.kernel.invariant_matmul` computes, for the tests. On its own it is not a
batch-invariant product: each block's product here is XLA's, whose summation order XLA:CPU
chooses by the row count (a one-row product is a matrix-vector kernel)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def blocked_matmul_reference(x: jax.Array, w: jax.Array, block_k: int,
                             out_dtype=jnp.float32) -> jax.Array:
    """``x [M, K] @ w [N, K].T`` as the sum over ``K / block_k`` blocks in order."""
    m, k = x.shape
    if w.ndim != 2 or w.shape[1] != k:
        raise ValueError(f"w must be [N, K={k}], got {w.shape}")
    if k % block_k:
        raise ValueError(f"block_k={block_k} must divide K={k}")
    precision = (jax.lax.Precision.HIGHEST if jnp.dtype(x.dtype) == jnp.float32
                 else jax.lax.Precision.DEFAULT)
    acc = jnp.zeros((m, w.shape[0]), jnp.float32)
    for i in range(k // block_k):
        blk = slice(i * block_k, (i + 1) * block_k)
        acc = acc + jax.lax.dot_general(x[:, blk], w[:, blk], (((1,), (1,)), ((), ())),
                                        precision=precision,
                                        preferred_element_type=jnp.float32)
    return acc.astype(out_dtype)
