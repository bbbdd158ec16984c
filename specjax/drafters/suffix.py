"""Suffix decoding (Oliaro et al., SuffixDecoding; card C17): drafts from the longest match of
the text's suffix in the request itself and in a global cache of earlier requests' outputs.

Each step, the last ``max_depth`` tokens of a row (ending with the pending token) are matched
against every position of two texts: the global cache (earlier outputs, kept across
``generate`` calls in a :class:`SuffixCache` the user holds) and the row's own prompt and
output. The positions whose preceding tokens match the row's suffix longest (capped at
``max_depth``) are the occurrences of that context; among the ``candidates`` most recent of
them the draft follows the most frequent continuation token by token (the suffix tree's
greedy path: the count of a continuation over the count of the context is its empirical
probability) and stops where that probability falls below ``min_prob``. The length is capped
at ``ceil(factor * match length)`` (the paper's and vLLM's ``max_spec_factor``): a long match
earns a long draft, a one-token match at most ``factor`` tokens.

The suffix *tree* of the paper is a host-side structure; here the same question ("which
positions are preceded by this context, and what follows them") is answered inside the
compiled loop by comparing the row's suffix against the cache laid out as a padded array
(``int32[capacity]``, documents separated by ``-1``): ``max_depth`` vectorised comparisons
over ``capacity + L`` positions per row and step, no host round trip (docs/benchmarks.md has
the per-step cost). Matches never cross a document boundary; drafts never run past one.

The cache learns after every batch (``observe``: each row's output is appended as a
document; the oldest documents are evicted first when ``capacity`` would be exceeded), so
later batches and later calls draft from earlier answers. It is saved and loaded as a
``.npz`` file that records the vocabulary size and the tokenizer it was built with; a file
for another tokenizer, another format version, or a corrupt one is refused with an error
naming the file.

With ``nodes=N`` the draft is the paper's speculation tree instead of the chain: every
distinct continuation prefix of those occurrences is a candidate node, its empirical
probability the share of the occurrences that continue that way; the most shared ones are
verified at once, as many as pay on the machine's verify-cost curve (on the project's CPU
they do not: docs/benchmarks.md).

Drafts are deterministic given the context and the cache, so verification is exact (greedy:
the plain-decoding tokens; sampling: the deterministic-candidate rule).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path
from typing import ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import _documents
from specjax.drafters.base import (DRAFTERS, StepContext, check_k, target_ids,
                                   tokenizer_digest)
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.policies.adaptive import _parse_cost, bucketed_cost, default_cost
from specjax.tree import DraftTree, TreeSpec

FORMAT = "specjax-suffix-cache"
VERSION = 1
MAX_CAPACITY = 1 << 22  # 4M tokens: 16 MB as int32; the per-step match is O(capacity)
_SEP = -1  # separator / padding in the cache array
_NONE = -2  # an unavailable suffix position (before the row's start): matches nothing


class SuffixCache:
    """Earlier requests' outputs, kept across ``generate`` calls (FIFO, bounded).

    ``capacity`` is the number of token slots of the array the compiled loop searches (one
    slot per token plus one separator per document); when a new output would not fit, the
    oldest documents are evicted. ``path``: where :meth:`save` writes by default (and where
    ``autosave`` writes after every batch).

    The cache is bound to one vocabulary (and tokenizer, when known) by the first drafter
    built over it; using it with another target is an error.
    """

    def __init__(self, capacity: int = 1 << 16, *, path: str | os.PathLike | None = None,
                 autosave: bool = False):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or not (
                2 <= capacity <= MAX_CAPACITY):
            raise DrafterError(f"suffix cache capacity must be an integer in [2, "
                               f"{MAX_CAPACITY}] tokens (4 bytes each, searched every step), "
                               f"got {capacity!r}")
        self.capacity = capacity
        self.path = Path(path) if path is not None else None
        self.autosave = autosave
        self.vocab_size: int | None = None
        self.tokenizer: str | None = None
        self._docs: collections.deque[np.ndarray] = collections.deque()
        self._used = 0  # slots used: tokens + one separator per document
        self.evicted = 0  # documents evicted so far

    # -------------------------------------------------------------------------- contents
    def __len__(self) -> int:
        return len(self._docs)

    @property
    def num_tokens(self) -> int:
        return self._used - len(self._docs)

    def documents(self) -> list[list[int]]:
        return [d.tolist() for d in self._docs]

    def bind(self, vocab_size: int, tokenizer: str | None, where: str = "this cache"):
        """Ties the cache to a vocabulary; refuses another one."""
        _documents.check_binding("suffix cache", where, self.vocab_size, self.tokenizer,
                                 vocab_size, tokenizer)
        self.vocab_size = vocab_size
        self.tokenizer = self.tokenizer or tokenizer

    def add(self, tokens: Sequence[int]):
        """Appends one document (an output), evicting the oldest ones while it does not fit.
        A document longer than the whole cache keeps its last ``capacity - 1`` tokens."""
        doc = np.asarray(list(tokens), np.int32).reshape(-1)
        if doc.size == 0:
            return
        if self.vocab_size is not None and (doc.min() < 0 or doc.max() >= self.vocab_size):
            raise DrafterError(f"suffix cache: token ids must be in [0, {self.vocab_size}), "
                               f"got [{doc.min()}, {doc.max()}]")
        doc = doc[-(self.capacity - 1):]
        while self._docs and self._used + doc.size + 1 > self.capacity:
            old = self._docs.popleft()
            self._used -= old.size + 1
            self.evicted += 1
        self._docs.append(doc)
        self._used += doc.size + 1

    def array(self) -> np.ndarray:
        """``int32[capacity]``: the documents oldest first, each followed by ``-1``, then
        ``-1`` padding."""
        out = np.full((self.capacity,), _SEP, np.int32)
        i = 0
        for d in self._docs:
            out[i:i + d.size] = d
            i += d.size + 1
        return out

    def snapshot(self):
        """The contents, to :meth:`restore` later (a benchmark that times a run twice must not
        let the second run draft from the first one's output)."""
        return (tuple(self._docs), self._used, self.evicted)

    def restore(self, snap):
        docs, self._used, self.evicted = snap
        self._docs = collections.deque(docs)

    # -------------------------------------------------------------------------- files
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Writes the cache to ``path`` (default: its own path) atomically."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise DrafterError("suffix cache: no path to save to (give one, or build the "
                               "cache with path=)")
        meta = {"format": FORMAT, "version": VERSION, "capacity": self.capacity,
                "vocab_size": self.vocab_size, "tokenizer": self.tokenizer,
                "evicted": self.evicted}
        return _documents.write(path, meta, self._docs)

    @classmethod
    def load(cls, path: str | os.PathLike, *, capacity: int | None = None,
             autosave: bool = False) -> "SuffixCache":
        """Reads a cache written by :meth:`save`; ``capacity`` overrides the saved one (the
        oldest documents are evicted if it is smaller)."""
        path = Path(path)
        meta, docs = _documents.read(path, FORMAT, VERSION, "suffix cache", "cache")
        vocab = meta.get("vocab_size")
        cache = cls(int(capacity or meta.get("capacity") or 1 << 16), path=path,
                    autosave=autosave)
        cache.vocab_size, cache.tokenizer = vocab, meta.get("tokenizer")
        cache.evicted = int(meta.get("evicted", 0))
        for doc in docs:
            cache.add(doc)
        return cache

    def __repr__(self):
        return (f"SuffixCache({len(self)} documents, {self.num_tokens} tokens, capacity "
                f"{self.capacity}, evicted {self.evicted})")


# ------------------------------------------------------------------------------ the search


def match_lengths(text, valid_end, suffix, max_depth: int):
    """For each position ``j`` of ``text [B, N]``: how many tokens ending at ``j`` equal the
    row's suffix (``suffix[b, t]`` is the token ``t`` places before the pending one), capped at
    ``max_depth``; 0 where ``valid_end`` is False. ``int32[B, N]``."""
    B, N = text.shape
    padded = jnp.concatenate([jnp.full((B, max_depth), _NONE - 1, text.dtype), text], axis=1)
    run = valid_end
    length = jnp.zeros((B, N), jnp.int32)
    for t in range(max_depth):
        shifted = jax.lax.dynamic_slice_in_dim(padded, max_depth - t, N, axis=1)  # text[j - t]
        run = run & (shifted == suffix[:, t:t + 1])
        length = length + run
    return length


def latest_true(mask, M: int, block: int = 128):
    """The positions of the last ``M`` True entries of each row of ``mask [B, N]``, the
    latest first, ``-1`` where a row has fewer.

    A cumulative count over all ``N`` positions is what this costs at its simplest, and on
    XLA:CPU that count was most of a suffix step (0.5 ms of 1.0 at 67k positions), where
    ``lax.top_k`` cost 5x more. So the mask is cut into blocks of ``block`` positions: the
    last ``M`` True entries lie in the last ``M`` blocks that hold any (each holds at least
    one), and only those ``M * block`` positions are counted."""
    B, N = mask.shape
    nb = -(-N // block)
    if nb <= 2 * M:  # short: count them all
        return _latest_true_counted(mask, M)
    blocks = jnp.pad(mask, ((0, 0), (0, nb * block - N))).reshape(B, nb, block)
    chosen = _latest_true_counted(jnp.any(blocks, axis=2), M)[:, ::-1]  # oldest first, -1s
    ok = chosen >= 0
    first = jnp.maximum(chosen, 0)
    sub = jnp.take_along_axis(blocks, first[:, :, None], axis=1) & ok[:, :, None]
    pos = (first[:, :, None] * block + jnp.arange(block, dtype=jnp.int32)).reshape(B, -1)
    at = _latest_true_counted(sub.reshape(B, -1), M)
    return jnp.where(at >= 0, jnp.take_along_axis(pos, jnp.maximum(at, 0), axis=1), -1)


def _latest_true_counted(mask, M: int):
    """:func:`latest_true` by a cumulative count over every position and one scatter."""
    B, N = mask.shape
    from_end = jnp.cumsum(mask[:, ::-1].astype(jnp.int32), axis=1)[:, ::-1]  # trues at >= j
    slot = jnp.where(mask & (from_end <= M), from_end - 1, M)  # M: out of range, dropped
    pos = jnp.broadcast_to(jnp.arange(N, dtype=jnp.int32)[None], (B, N))
    rows = jnp.broadcast_to(jnp.arange(B)[:, None], (B, N))
    return jnp.full((B, M), -1, jnp.int32).at[rows, slot].set(pos, mode="drop")


def match_candidates(global_text, seq, seq_len, K: int, max_depth: int, candidates: int,
                     min_match: int):
    """The occurrences a draft follows: ``(best int32[B], cand_end int32[B, M], ctoks
    int32[B, M, K])``: each row's longest match length, the end positions of the ``M``
    latest occurrences of that context in the global text then the row's own (``-1`` past
    them, none below ``min_match``), and the ``K`` tokens after each (``-1`` past a document
    or the text's end)."""
    B, L = seq.shape
    C = global_text.shape[0]
    pos = jnp.arange(L, dtype=jnp.int32)
    own = jnp.where(pos[None] < seq_len[:, None], seq, _SEP)  # the row's text, -1 past it
    text = jnp.concatenate([jnp.broadcast_to(global_text[None], (B, C)), own], axis=1)
    N = C + L
    # a match may end anywhere but at the pending token itself (its continuation must exist)
    valid_end = jnp.concatenate(
        [jnp.broadcast_to(global_text[None] >= 0, (B, C)),
         (pos[None] < seq_len[:, None] - 1) & (seq >= 0)], axis=1)
    back = seq_len[:, None] - 1 - jnp.arange(max_depth, dtype=jnp.int32)[None]  # [B, D]
    suffix = jnp.where(back >= 0, jnp.take_along_axis(seq, jnp.maximum(back, 0), axis=1),
                       _NONE)
    ml = match_lengths(text, valid_end, suffix, max_depth)
    best = jnp.max(ml, axis=1)  # [B]
    # the most recent `candidates` occurrences of the longest matched context
    M = min(candidates, N)
    cand_end = latest_true((ml == best[:, None]) & (ml >= min_match), M)  # [B, M]
    cont = jnp.maximum(cand_end, 0)[:, :, None] + 1 + jnp.arange(K, dtype=jnp.int32)[None, None]
    ctoks = jnp.take_along_axis(text, jnp.minimum(cont, N - 1).reshape(B, M * K), axis=1)
    ctoks = jnp.where((cont < N).reshape(B, M * K), ctoks, _SEP).reshape(B, M, K)
    return best, cand_end, jnp.where((cand_end >= 0)[:, :, None], ctoks, _SEP)


def suffix_draft(global_text, seq, seq_len, K: int, max_depth: int, candidates: int,
                 min_match: int, min_prob: float, factor: float):
    """The draft of each row: ``(tokens int32[B, K], length int32[B], from_global bool[B],
    match int32[B])``."""
    B = seq.shape[0]
    C = global_text.shape[0]
    best, cand_end, ctoks = match_candidates(global_text, seq, seq_len, K, max_depth,
                                             candidates, min_match)
    cand_ok = cand_end >= 0
    n_root = jnp.maximum(jnp.sum(cand_ok, axis=1), 1)
    alive = cand_ok
    going = jnp.ones((B,), bool)
    toks, length = [], jnp.zeros((B,), jnp.int32)
    src_first = jnp.zeros((B,), jnp.int32)
    for d in range(K):
        tok = ctoks[:, :, d]
        ok = alive & (tok >= 0)
        same = (tok[:, :, None] == tok[:, None, :]) & ok[:, None, :]
        count = jnp.where(ok, jnp.sum(same, axis=2), 0)  # [B, M]
        pick = jnp.argmax(count, axis=1)  # ties: the most recent occurrence
        chosen = jnp.take_along_axis(tok, pick[:, None], axis=1)[:, 0]
        c = jnp.take_along_axis(count, pick[:, None], axis=1)[:, 0]
        if d == 0:
            src_first = jnp.take_along_axis(cand_end, pick[:, None], axis=1)[:, 0]
        going = going & (c > 0) & (c >= min_prob * n_root)
        length = length + going
        toks.append(jnp.where(going, chosen, 0))
        alive = ok & (tok == chosen[:, None])
    tokens = jnp.stack(toks, axis=1)
    cap = jnp.ceil(factor * best.astype(jnp.float32)).astype(jnp.int32)
    length = jnp.where(best >= min_match, jnp.minimum(length, cap), 0)
    from_global = (length > 0) & (src_first < C)
    return tokens, length.astype(jnp.int32), from_global, best


def suffix_tree_draft(global_text, seq, seq_len, K: int, max_depth: int, candidates: int,
                      min_match: int, min_prob: float, factor: float, nodes: int, step_cost):
    """The draft of each row as a tree (SuffixDecoding's speculation tree): every distinct
    continuation prefix of the matched occurrences is a candidate node whose empirical
    probability is the share of the occurrences that continue that way; the likeliest ones
    (at least ``min_prob``, depth at most ``ceil(factor * match)``) are kept, at most
    ``nodes``, as many as maximise expected accepted tokens + 1 per verify cost
    (``step_cost[n]``: the relative cost of verifying ``n`` nodes, ``n = 0..nodes``).

    Returns ``(DraftTree, n_nodes int32[B], from_global bool[B], match int32[B])``; the
    tree's nodes are breadth-first, its valid nodes a prefix."""
    B = seq.shape[0]
    C = global_text.shape[0]
    best, cand_end, ctoks = match_candidates(global_text, seq, seq_len, K, max_depth,
                                             candidates, min_match)
    M = ctoks.shape[1]
    n_root = jnp.maximum(jnp.sum(cand_end >= 0, axis=1), 1)
    tok_ok = jnp.cumprod(ctoks >= 0, axis=2).astype(bool)  # [B, M, K]: a prefix exists
    # prefix[b, m, m2, d]: occurrences m and m2 continue alike up to depth d
    prefix = jnp.cumprod(ctoks[:, :, None, :] == ctoks[:, None, :, :], axis=3).astype(bool)
    prefix = prefix & tok_ok[:, :, None, :] & tok_ok[:, None, :, :]
    count = jnp.sum(prefix, axis=2)  # [B, M, K]
    earlier = jnp.arange(M)[None, :, None, None] > jnp.arange(M)[None, None, :, None]
    first = tok_ok & ~jnp.any(prefix & earlier, axis=2)  # the latest occurrence of a prefix
    depth = jnp.arange(K, dtype=jnp.int32)
    cap = jnp.ceil(factor * best.astype(jnp.float32)).astype(jnp.int32)
    keep = first & (count >= min_prob * n_root[:, None, None]) & (depth < cap[:, None, None])
    # likelier first; a prefix before its extensions (equal count, shallower)
    score = jnp.where(keep, count * (K + 1) + (K - depth)[None, None], -1).reshape(B, M * K)
    top, at = jax.lax.top_k(score, nodes)  # [B, nodes]
    chosen = top >= 0
    prob = jnp.where(chosen, (top // (K + 1)) / n_root[:, None], 0.0)
    gain = (1.0 + jnp.concatenate([jnp.zeros((B, 1)), jnp.cumsum(prob, axis=1)], axis=1)
            ) / step_cost[None]  # [B, nodes + 1]: 0..nodes nodes verified
    n = jnp.argmax(jnp.where(jnp.arange(nodes + 1)[None] <= jnp.sum(chosen, axis=1)[:, None],
                             gain, -1.0), axis=1).astype(jnp.int32)
    chosen = chosen & (jnp.arange(nodes)[None] < n[:, None])
    occ, d = at // K, at % K
    # breadth-first: by depth, then by likelihood
    order = jnp.argsort(jnp.where(chosen, d * nodes + jnp.arange(nodes)[None], K * nodes),
                        axis=1)
    occ, d, chosen = (jnp.take_along_axis(x, order, axis=1) for x in (occ, d, chosen))
    # a node's parent: the latest occurrence sharing its prefix one token shorter
    rows = jnp.arange(B)[:, None]
    up = prefix[rows, occ, :, jnp.maximum(d - 1, 0)]  # [B, nodes, M]
    p_occ = jnp.argmax(up, axis=2)
    same = (occ[:, None, :] == p_occ[:, :, None]) & (d[:, None, :] == d[:, :, None] - 1)
    parent = jnp.where(d > 0, jnp.argmax(same & chosen[:, None, :], axis=2), -1)
    tokens = jnp.where(chosen, ctoks[rows, occ, d], 0)
    tree = DraftTree(tokens=tokens.astype(jnp.int32), parent=parent.astype(jnp.int32),
                     depth=(d + 1).astype(jnp.int32), valid=chosen)
    root_src = cand_end[rows[:, 0], occ[:, 0]]
    return tree, n, (n > 0) & (root_src < C), best


# ------------------------------------------------------------------------------ the drafter


@dataclasses.dataclass(frozen=True)
class SuffixConfig:
    """Options of ``suffix``."""

    k: int = dataclasses.field(default=16, metadata={"help": "maximum draft length"})
    max_depth: int = dataclasses.field(default=24, metadata={
        "help": "longest context matched (the suffix tree's depth; vLLM and SGLang use 24)"})
    factor: float = dataclasses.field(default=1.0, metadata={
        "help": "draft at most ceil(factor * match length) tokens (max_spec_factor)"})
    min_prob: float = dataclasses.field(default=0.1, metadata={
        "help": "stop where the continuation's empirical probability falls below this"})
    min_match: int = dataclasses.field(default=1, metadata={
        "help": "shortest context match that drafts"})
    candidates: int = dataclasses.field(default=32, metadata={
        "help": "most recent occurrences of the matched context whose continuations vote"})
    capacity: int = dataclasses.field(default=1 << 16, metadata={
        "help": "global cache slots (tokens + one separator per output) for a new cache"})
    cache: object = dataclasses.field(default=None, metadata={
        "help": "a SuffixCache, or a .npz path (loaded if it exists, else created; saved "
                "after every batch), or none: a fresh cache for this drafter"})
    learn: bool = dataclasses.field(default=True, metadata={
        "help": "append every output to the global cache after its batch"})
    nodes: int = dataclasses.field(default=0, metadata={
        "help": "0: draft a chain (the most frequent continuation); N >= 2: a tree of at most "
                "N <= k nodes, the likeliest continuations of the matched occurrences (at "
                "least min_prob each), as many as pay on the verify-cost curve"})
    cost: tuple[float, ...] | None = dataclasses.field(default=None, metadata={
        "parse": _parse_cost, "help": "with nodes: relative verify cost of T = 1, 2, ... "
        "tokens, or a verify-curve JSON; default: measured on this machine when built by "
        "name (specjax.cost_curves), else the built-in curve"})

    def __post_init__(self):
        check_k(self.k)
        for name in ("max_depth", "min_match", "candidates"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise DrafterError(f"suffix: {name} must be an integer >= 1, got {v!r}")
        if self.min_match > self.max_depth:
            raise DrafterError(f"suffix: min_match ({self.min_match}) cannot exceed max_depth "
                               f"({self.max_depth}): no match would ever draft")
        if not (isinstance(self.factor, (int, float)) and self.factor > 0):
            raise DrafterError(f"suffix: factor must be > 0, got {self.factor!r}")
        if not (isinstance(self.min_prob, (int, float)) and 0 <= self.min_prob <= 1):
            raise DrafterError(f"suffix: min_prob must be in [0, 1], got {self.min_prob!r}")
        if not isinstance(self.nodes, int) or isinstance(self.nodes, bool) or \
                not (self.nodes == 0 or 2 <= self.nodes <= self.k):
            raise DrafterError(f"suffix: nodes must be 0 (a chain) or an integer in [2, k = "
                               f"{self.k}], got {self.nodes!r}")
        if self.cost is not None and (len(self.cost) < 1 or any(c <= 0 for c in self.cost)):
            raise DrafterError("suffix: cost must be a non-empty list of positive relative "
                               "costs")
        if not (self.cache is None or isinstance(self.cache, (SuffixCache, str, os.PathLike))):
            raise DrafterError(f"suffix: cache must be a SuffixCache or a file path, got "
                               f"{type(self.cache).__name__}")


@dataclasses.dataclass(frozen=True)
class SuffixDrafter:
    max_k: int
    max_depth: int
    factor: float
    min_prob: float
    min_match: int
    candidates: int
    capacity: int
    learn: bool = True
    nodes: int = 0  # 0: a chain
    cost: tuple[float, ...] = ()  # the verify curve a tree is priced by
    # the cache's contents are an argument of the compiled loop (params), not part of it:
    # drafters over different caches of one capacity share a program
    cache: SuffixCache | None = dataclasses.field(default=None, compare=False, hash=False,
                                                  repr=False)
    name: str = "suffix"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = True
    features: FeatureSpec = FeatureSpec()

    @property
    def tree(self) -> TreeSpec | None:
        """None for a chain; with ``nodes``, a dynamic tree of that many nodes."""
        if not self.nodes:
            return None
        return TreeSpec.dynamic(min(self.candidates, self.nodes), self.max_k, self.nodes)

    def learns_across_calls(self) -> bool:
        return self.learn

    def relearn(self, prompts, outputs) -> None:
        """A resumed benchmark journal: learn the outputs of the finished runs again, unless
        the cache is a file that kept them (autosaved)."""
        if self.learn and not (self.cache.autosave and self.cache.path is not None):
            self.observe(prompts, outputs)

    def params(self):
        return jnp.asarray(self.cache.array())

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B = prompt_tokens.shape[0]
        z = jnp.zeros((B,), jnp.int32)
        return {"steps": z, "hits": z, "global_hits": z, "drafted": z}

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        if self.nodes:
            tree, _, from_global, _ = suffix_tree_draft(
                params, ctx.seq, ctx.seq_len, self.max_k, self.max_depth, self.candidates,
                self.min_match, self.min_prob, self.factor, self.nodes,
                bucketed_cost(self.cost, self.nodes))
            # the nodes the loop will verify (it applies the same limits to the tree)
            n = jnp.sum(tree.valid & (tree.depth <= k[:, None]) & ctx.live[:, None],
                        axis=1).astype(jnp.int32)
        else:
            tokens, length, from_global, _ = suffix_draft(
                params, ctx.seq, ctx.seq_len, self.max_k, self.max_depth, self.candidates,
                self.min_match, self.min_prob, self.factor)
            n = jnp.where(ctx.live, jnp.minimum(k, length), 0)
            tree = DraftTree.chain(tokens, n)
        live = ctx.live.astype(jnp.int32)
        state = {"steps": state["steps"] + live,
                 "hits": state["hits"] + (n > 0),
                 "global_hits": state["global_hits"] + ((n > 0) & from_global),
                 "drafted": state["drafted"] + n}
        return tree, state, ctx.target_cache

    def update(self, params, state, ctx, n_acc, tree, path, features):
        return state

    # host side, called by generate
    def stats(self, state) -> dict:
        """Per-row counters for ``GenerationResult.extra``: steps, steps that drafted
        (``suffix_hits``), and those whose draft came from the global cache."""
        return {"suffix_steps": state["steps"], "suffix_hits": state["hits"],
                "suffix_global_hits": state["global_hits"]}

    def snapshot(self):
        return self.cache.snapshot()

    def restore(self, snap):
        self.cache.restore(snap)

    def observe(self, prompts, outputs):
        """After a batch: every output joins the global cache (and the file, if autosaved)."""
        if not self.learn:
            return
        for out in outputs:
            self.cache.add(out)
        if self.cache.autosave and self.cache.path is not None:
            self.cache.save()


@DRAFTERS.register("suffix", config=SuffixConfig,
                   doc="longest suffix match over the request and a global cache of earlier "
                       "outputs, frequency-voted continuation (model-free)")
def make_suffix(cfg: SuffixConfig, target_lm) -> SuffixDrafter:
    cache = cfg.cache
    if isinstance(cache, str) and cache.strip().lower() in ("", "none"):
        cache = None
    where = "this cache"
    if cache is None:
        cache = SuffixCache(cfg.capacity)
    elif not isinstance(cache, SuffixCache):
        path = Path(cache)
        where = str(path)
        cache = (SuffixCache.load(path, autosave=True) if path.exists()
                 else SuffixCache(cfg.capacity, path=path, autosave=True))
    vocab, tok = target_ids(target_lm)
    cache.bind(vocab, tok, where)
    return SuffixDrafter(max_k=cfg.k, max_depth=cfg.max_depth, factor=float(cfg.factor),
                         min_prob=float(cfg.min_prob), min_match=cfg.min_match,
                         candidates=cfg.candidates, capacity=cache.capacity, learn=cfg.learn,
                         nodes=cfg.nodes,
                         cost=(tuple(cfg.cost) if cfg.cost is not None
                               else default_cost(target_lm)) if cfg.nodes else (),
                         cache=cache)


__all__ = ["SuffixCache", "SuffixConfig", "SuffixDrafter", "latest_true", "match_candidates",
           "match_lengths", "suffix_draft", "suffix_tree_draft", "tokenizer_digest"]
