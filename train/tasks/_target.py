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


def draft_vocab_from_counts(counts: np.ndarray, size: int, fill: np.ndarray | None = None
                            ) -> tuple[np.ndarray, float]:
    """The ``size`` most frequent token ids of ``counts`` and their coverage (share of all
    counted tokens they account for). Ties (in practice: tokens never counted, once a corpus
    has fewer distinct tokens than ``size``) go to the higher ``fill`` count, then the lower
    id. Returned ids are sorted."""
    size = min(size, len(counts))
    keys = (np.arange(len(counts)),) + ((-fill,) if fill is not None else ()) + (-counts,)
    order = np.lexsort(keys)[:size]
    total = counts.sum()
    return np.sort(order).astype(np.int32), float(counts[order].sum() / total) if total else 0.0


def token_counts(corpus_dir: str | Path, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts of every token id over a corpus's answer tokens (``loss_mask == 1``) and over
    its prompt tokens."""
    from specjax.train.batches import Corpus

    corpus = Corpus.open(corpus_dir)
    answer = np.zeros(vocab_size, np.int64)
    prompt = np.zeros(vocab_size, np.int64)
    for rec in corpus.iter_records():
        toks = np.asarray(rec["tokens"], np.int64)
        mask = np.asarray(rec["loss_mask"], bool)
        np.add.at(answer, toks[mask], 1)
        np.add.at(prompt, toks[~mask], 1)
    return answer, prompt


def answer_token_counts(corpus_dir: str | Path, vocab_size: int) -> np.ndarray:
    """Counts of every token id over the answer tokens (``loss_mask == 1``) of a corpus."""
    return token_counts(corpus_dir, vocab_size)[0]


def draft_vocabulary(corpus_dir: str | Path | None, vocab_size: int, size: int) -> np.ndarray:
    """A head's draft vocabulary: the ``size`` most frequent answer tokens of the corpus, then
    (when the answers hold fewer distinct tokens) the most frequent prompt tokens, which the
    target often copies: on a 384-prompt SmolLM2 corpus this filling raised the coverage of
    held-out answers by an 8192-token vocabulary from 88.3% to 93.7% (docs/training.md).
    Without a corpus: the first ``size`` ids."""
    if corpus_dir is None:
        return np.arange(min(size, vocab_size), dtype=np.int32)
    answer, prompt = token_counts(corpus_dir, vocab_size)
    return draft_vocab_from_counts(answer, size, fill=prompt)[0]
