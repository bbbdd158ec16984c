"""Sampling parameters and logit processing (temperature, top-k, top-p).

The same processing is applied to target and draft distributions, so that lossless speculative
sampling compares like with like.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from specjax.errors import SamplingError  # noqa: F401  (re-exported)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token.

    temperature: 0 means greedy (argmax); > 0 samples from softmax(logits / temperature).
    top_k: keep the k most likely tokens (0 = all).
    top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1.0 = all).
    seed: PRNG seed for sampling (ignored when greedy).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        t, k, p = self.temperature, self.top_k, self.top_p
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise SamplingError(f"temperature must be a finite number >= 0, got {t!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise SamplingError(f"top_k must be an integer >= 0 (0 disables), got {k!r}")
        if not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
            raise SamplingError(f"top_p must be in (0, 1], got {p!r}")
        if not isinstance(self.seed, int):
            raise SamplingError(f"seed must be an integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def greedy_token(logits: jax.Array) -> jax.Array:
    """``jnp.argmax(logits, axis=-1)`` as int32, the same index (the first maximum; a row with
    a NaN: its first NaN), computed as a max, a compare and a min over the indices: XLA:CPU
    lowers argmax to a two-operand reduce, which measured 1.5-4x slower than this over
    SmolLM2's 49,152 logits (docs/benchmarks_notes.md, "The greedy token ..."). Other
    backends (timed only on XLA:CPU) keep ``jnp.argmax``."""
    if jax.default_backend() != "cpu":
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    m = jnp.max(logits, axis=-1, keepdims=True)  # XLA:CPU's max may skip a NaN
    nan = jnp.isnan(logits)
    hit = jnp.where(jnp.any(nan, axis=-1, keepdims=True), nan, logits == m)
    idx = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    return jnp.min(jnp.where(hit, idx, logits.shape[-1]), axis=-1).astype(jnp.int32)


def process_logits(logits: jax.Array, temperature, top_k, top_p) -> jax.Array:
    """Log-probabilities after temperature, top-k and top-p (masked tokens get -inf).

    ``temperature`` must be > 0 here; ``top_k`` (0 = off) and ``top_p`` may be traced scalars,
    so changing them does not recompile. Works on any leading shape ``[..., V]``.

    Without top-k and top-p (``top_k == 0``, ``top_p >= 1``: plain temperature sampling) the
    vocabulary is not sorted (a runtime branch): the sort of every row costs more than the
    rest of a verify step's sampling on a CPU (a batch-8 block of 5 tokens sorts 40 rows of
    49,152 logits).
    """
    logits = logits.astype(jnp.float32) / temperature
    filtering = (top_k > 0) | (top_p < 1.0)
    return jax.lax.cond(filtering, functools.partial(_filtered, top_k=top_k, top_p=top_p),
                        lambda x: jax.nn.log_softmax(x, axis=-1), logits)


def _filtered(logits, top_k, top_p):
    V = logits.shape[-1]
    sorted_desc = -jnp.sort(-logits, axis=-1)
    # top-k: threshold at the k-th largest value (ties at the threshold are kept)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, V), V)
    kth = jnp.take_along_axis(sorted_desc, jnp.broadcast_to(k - 1, logits.shape[:-1])[..., None],
                              axis=-1)
    logits = jnp.where(logits < kth, -jnp.inf, logits)
    # top-p on what top-k kept: keep tokens whose preceding cumulative mass is < top_p
    sorted_desc = jnp.where(sorted_desc < kth, -jnp.inf, sorted_desc)
    probs = jax.nn.softmax(sorted_desc, axis=-1)
    cum_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = cum_before < top_p
    # smallest kept value = threshold
    thresh = jnp.min(jnp.where(keep_sorted, sorted_desc, jnp.inf), axis=-1, keepdims=True)
    logits = jnp.where(logits < thresh, -jnp.inf, logits)
    return jax.nn.log_softmax(logits, axis=-1)


def sample(key, logits: jax.Array, temperature, top_k, top_p) -> jax.Array:
    """Draws token ids ``[...]`` from processed logits ``[..., V]``."""
    return jax.random.categorical(key, process_logits(logits, temperature, top_k, top_p), axis=-1
                                  ).astype(jnp.int32)
