"""Exact numerics' value product over the cache, timed in two forms: the one the model runs
(`specjax.models.numerics.value_product`: an einsum over a transposed copy of the values,
query rows padded to a two-row product when one query decodes) and an element-wise product
summed over the slots by `cache_axis_sum` (a fixed tree: batch-invariant by construction, no
row class to probe). SmolLM2's attention shape (3 key/value heads, 3 query heads each, head
dimension 64), float32, one layer, jitted alone; medians of 60 calls, best of two rounds.

    python scripts/measure_value_product.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.bench.timing import median_seconds
from specjax.models.numerics import cache_axis_sum, pad_rows, value_product

SHAPES = [(1, 256, 1), (1, 256, 4), (4, 256, 1), (4, 256, 4), (1, 1088, 1), (1, 1088, 4),
          (4, 1088, 1), (4, 1088, 2), (4, 1088, 4), (4, 1088, 8), (1, 1088, 16)]


def current(p, v):
    T = p.shape[3]
    return value_product(pad_rows(p, max(T, 2), axis=3), v, jnp.float32)[:, :T]


def elementwise(p, v):
    x = p[..., None] * v[:, :, None, None, :, :]  # [B, KVH, G, T, S, Dh]
    return jnp.transpose(cache_axis_sum(x, 4), (0, 3, 1, 2, 4))


def time_ms(fn, *args, calls: int = 60) -> float:
    return median_seconds(jax.jit(fn), *args, repeats=calls) * 1e3


def main() -> None:
    kvh, g, hd = 3, 3, 64
    print("rows  slots  queries  current_ms  elementwise_ms")
    for B, S, T in SHAPES:
        v = jax.random.normal(jax.random.PRNGKey(0), (B, kvh, S, hd), jnp.float32)
        p = jax.random.uniform(jax.random.PRNGKey(1), (B, kvh, g, T, S), jnp.float32)
        cur = min(time_ms(current, p, v) for _ in range(2))
        elt = min(time_ms(elementwise, p, v) for _ in range(2))
        print(f"{B:4d} {S:6d} {T:8d} {cur:11.3f} {elt:15.3f}", flush=True)


if __name__ == "__main__":
    main()
