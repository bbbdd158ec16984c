"""What every head-training task reads from the frozen target: one pass over whole sequences
giving the hidden states a head needs, the normed last hidden state, and the target's
distribution over the next token restricted to the head's draft vocabulary; and the draft
vocabulary itself, chosen from a corpus's answer-token counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


class TargetPass(NamedTuple):
    """Per position ``t`` of ``tokens[B, T]`` (all stop-gradient):

    Attributes:
      target: the merged frozen target (for its embedding).
      hidden: the requested layers' output residual streams, each ``[B, T, h]``.
      final_hidden: the normed last hidden state ``[B, T, h]``.
      logits: ``[B, T, draft_vocab]`` the target's logits at ``t`` over the draft vocabulary.
      inside: ``bool[B, T]`` whether the target's argmax at ``t`` lies in the draft vocabulary.
    """

    target: Any
    hidden: tuple
    final_hidden: jax.Array
    logits: jax.Array
    inside: jax.Array


def target_pass(target_graphdef, frozen, tokens, layers: tuple[int, ...] = ()) -> TargetPass:
    """``frozen`` holds ``target`` (its parameters) and ``draft_ids``."""
    target = nnx.merge(target_graphdef, frozen["target"])
    B, T = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    o = target(tokens, pos, target.init_cache(B, T), prefix_empty=True,
               hidden_layers=tuple(layers), compute_logits=False)
    w = target.embed[...] if target.lm_head is None else target.lm_head[...]
    ids = frozen["draft_ids"]

    def per_row(hrow):  # [T, h]: full logits one row at a time (memory)
        full = hrow @ w.astype(jnp.float32).T
        sub = full[:, ids]
        return sub, jnp.max(full, -1) <= jnp.max(sub, -1)

    sub, inside = jax.lax.map(per_row, o.final_hidden.astype(jnp.float32))
    sg = jax.lax.stop_gradient
    return TargetPass(target=target, hidden=tuple(sg(x) for x in (o.hidden or ())),
                      final_hidden=sg(o.final_hidden), logits=sg(sub), inside=inside)


def draft_vocab_from_counts(counts: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    """The ``size`` most frequent token ids (ties: lower id first) and their coverage (share of
    all counted tokens they account for)."""
    size = min(size, len(counts))
    order = np.lexsort((np.arange(len(counts)), -counts))[:size]
    total = counts.sum()
    return np.sort(order).astype(np.int32), float(counts[order].sum() / total) if total else 0.0


def answer_token_counts(corpus_dir: str | Path, vocab_size: int) -> np.ndarray:
    """Counts of every token id over the answer tokens (``loss_mask == 1``) of a corpus."""
    from specjax.train.batches import Corpus

    corpus = Corpus.open(corpus_dir)
    counts = np.zeros(vocab_size, np.int64)
    for rec in corpus.iter_records():
        toks = np.asarray(rec["tokens"], np.int64)
        mask = np.asarray(rec["loss_mask"], bool)
        np.add.at(counts, toks[mask], 1)
    return counts


