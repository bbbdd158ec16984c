"""Prompt lookup (n-gram matching over the prompt and the generated text), inside jit.

For n from ``max_ngram`` down to ``min_ngram``, the last n tokens of a row (ending with the
pending token) are searched for earlier in the same row; the most recent match wins and the
up to ``k`` tokens that followed it are proposed. No match: nothing is drafted, and the engine
verifies a one-token block (a plain decoding step) instead of a padded one.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.drafters.base import DrafterError, StepContext, check_k, register
from specjax.tree import DraftTree


def ngram_lookup(seq, seq_len, K: int, max_ngram: int, min_ngram: int):
    """Returns (proposal tokens ``[B, K]``, available count ``[B]``) for each row."""
    B, L = seq.shape
    j = jnp.arange(L, dtype=jnp.int32)
    best_start = jnp.full((B,), -1, jnp.int32)  # start of the continuation
    for n in range(max_ngram, min_ngram - 1, -1):
        suffix_idx = seq_len[:, None] - n + jnp.arange(n, dtype=jnp.int32)[None]  # [B, n]
        suffix = jnp.take_along_axis(seq, jnp.clip(suffix_idx, 0, L - 1), axis=1)
        match = jnp.ones((B, L), bool)
        for t in range(n):
            shifted = jnp.roll(seq, -t, axis=1)  # shifted[b, j] = seq[b, j + t]
            match = match & (shifted == suffix[:, t:t + 1])
        # window [j, j+n) must end before the pending token (a continuation must exist)
        ok = match & (j[None] + n <= seq_len[:, None] - 1) & (seq_len[:, None] >= n + 1)
        last = jnp.max(jnp.where(ok, j[None], -1), axis=1)
        start = jnp.where(last >= 0, last + n, -1)
        best_start = jnp.where(best_start >= 0, best_start, start)
    idx = jnp.clip(best_start[:, None] + jnp.arange(K, dtype=jnp.int32)[None], 0, L - 1)
    tokens = jnp.take_along_axis(seq, idx, axis=1)
    avail = jnp.where(best_start >= 0, jnp.minimum(K, seq_len - best_start), 0)
    return tokens, avail.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class PromptLookupDrafter:
    max_k: int
    max_ngram: int = 3
    min_ngram: int = 1
    tree: None = None  # model-free n-gram drafts are chains
    name: str = "prompt_lookup"
    deterministic: bool = True

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len):
        return ()

    def propose(self, params, target, state, ctx: StepContext, k, greedy):
        tokens, avail = ngram_lookup(ctx.seq, ctx.seq_len, self.max_k, self.max_ngram,
                                     self.min_ngram)
        return DraftTree.chain(tokens, jnp.minimum(k, avail)), state, ctx.target_cache

    def update(self, params, state, ctx, n_acc, tree, path):
        return state


@register("prompt_lookup")
def make_prompt_lookup(target_lm, k: int = 8, max_ngram: int = 3, min_ngram: int = 1
                       ) -> PromptLookupDrafter:
    check_k(k)
    if not (isinstance(min_ngram, int) and isinstance(max_ngram, int) and
            1 <= min_ngram <= max_ngram):
        raise DrafterError(
            f"need integers 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram!r}, "
            f"max_ngram={max_ngram!r}"
        )
    return PromptLookupDrafter(max_k=k, max_ngram=max_ngram, min_ngram=min_ngram)

