"""Token Recycling (Luo et al., ACL 2025; card C16): the target's own top-k candidates,
recycled as drafts.

Every forward the target runs anyway (the prefill and each verify pass) ranks the whole
vocabulary at every position; Token Recycling keeps, per token id ``t``, the ``width`` best
next tokens the target last proposed after ``t``: an adjacency table ``table[t] = int32[width]``.
A step drafts a static tree from the pending token by table look-ups alone: the children of
a node holding token ``u`` are ``table[u][0], table[u][1], ...`` in the tree's sibling ranks.
No draft model, no training, a few gathers per step.

Here the table is per row (``int32[B, V, width]``; 1.5 MB per row for SmolLM2 at width 8),
so a row's drafts never depend on what else is in the batch, and it is filled from the
target's top ids at every prompt position (the prefill; with ``prompt="text"`` instead each
prompt token's successor in the prompt, in the first column only, so the prefill computes the
LM head at its last position alone) and at every committed position of each step (the verify
pass's features along the accepted path). The paper also recycles the rejected nodes'
candidates, whose contexts did not happen: ``record="tree"`` does so too (every verified
node's top ids, then the root's and the accepted nodes' over them); ``record="path"``, the
default, leaves them out. When a token occurs several times, its latest occurrence wins.
Entries never filled hold the prior's (below), else ``0, 1, ..., width - 1`` (junk that
verification rejects). With ``from_text`` (width 1, a source of the ``ngram`` drafter)
an entry is instead the token that followed ``t`` in the row's own text, prompt and output:
no top ids are asked of the target (greedy, the same entries along the output).

``memory`` keeps one table (``int32[V, width]``, 1.5 MB for SmolLM2) from batch to batch, as
the paper's global table does from request to request (a hot start): every row of the next
batch starts from it instead of from the prior or junk. ``none`` (the drafter's default):
each batch starts from the prior (junk without one); ``call``: within one ``generate`` call;
``keep``: across calls in this process; ``auto`` (the ``token_recycling`` method's default):
``none`` where the drafter has a prior, ``call`` where it has not; ``FILE.npz``: also saved
there after every batch and loaded on the next build (bound to the vocabulary, tokenizer and
width; another one, another format or a corrupt file is refused naming the file). With
``prompt="text"`` a prompt token's entry becomes its successor in the prompt followed by the
carried entry's candidates (without that successor). After a batch each token's carried
entry is the one of the first row that rewrote it (rows are padded with copies at the end of
a batch, so a real row wins). Over the 130 Spec-Bench questions at batch 1, carried from
question to question, it ran at 1.25x of plain decoding where each question starting from
junk ran at 1.20x, 6% fewer forwards (docs/benchmarks_notes.md).

``prior`` is the table a row starts from while nothing is carried (and what ``memory``
starts from): ``shipped`` (the default) is the table shipped for the target, found by its
vocabulary and tokenizer (none for other models: junk), ``none`` is junk, ``FILE.npz`` a
table file (the format ``memory`` saves; another width is cut, or padded with junk). The one
shipped for SmolLM2-135M (``data/smollm2-135m.token_recycling.npz``, 0.2 MB,
scripts/build_token_recycling_table.py) holds each token's 16 most frequent successors in the
model's own greedy answers to the 8,192 prompts of its self-distillation corpus (no
Spec-Bench prompt among them): a greedy answer's next token is the target's first choice
there, so an entry's first column is the choice the target made most often after that
token. A row overwrites an entry with the target's own candidates as soon as the target
proposes them after that token (the paper's rule; with ``prompt="text"`` a prompt token's
entry becomes its successor in the prompt followed by the prior's candidates). Replayed over
the Spec-Bench answers, carrying a table from question to question then loses against
starting each from the prior (1.71 accepted-plus-one tokens per step against 1.78: the
latest context's candidates replace the most frequent ones), hence ``memory=auto``.

The drafts are deterministic, so sampling uses the deterministic-candidate rule: lossless.
The default tree (``levels:3.2.2.1``: 8 nodes, depth 4; for another ``k`` its first
``k`` levels, one node per level past the fourth) is chosen for a CPU, where the engine
verifies a block in the next of 1, 2, 4, 8, ... and the whole tree's tokens
(``verify_buckets``) and a 4-token block costs about 1.0-1.2 plain steps at batch 1, an
8-token one 1.2-1.55 (docs/benchmarks.md): its first level (3 nodes and the root) fits the
4-token bucket, so a step that drafts one level is cheap, and the whole tree fits 9. The
earlier default ``levels:4.3.2.1`` (10 nodes) began at the 8-token bucket; over the 130
Spec-Bench questions at batch 1 it ran at 1.04x of plain decoding where this tree runs at
1.19x, no category below 1.11x (docs/benchmarks_notes.md, "Token Recycling's default tree
..."). Both are far from the paper's 80-node GPU tree.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from specjax.atomic import replacing
from specjax.drafters import _documents
from specjax.drafters.base import (DRAFTERS, StepContext, check_k, skip_as_update, target_ids,
                                   tree_field)
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.tree import DraftTree, TreeSpec, parse_tree, static_topology


# the default tree's widths per level (``levels:3.2.2.1``): see the module's docstring
DEFAULT_WIDTHS = (3, 2, 2, 1)


def _latest_only(tokens, valid):
    """``valid`` and no later valid entry of the row holds the same token ``[B, T]``: the
    entries a scatter keyed by token may write without a collision (the latest wins)."""
    T = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # [B, T(i), T(j)]
    later = jnp.arange(T)[None, :] > jnp.arange(T)[:, None]  # j > i
    shadowed = jnp.any(same & later[None] & valid[:, None, :], axis=2)
    return valid & ~shadowed


def record(table, tokens, top, valid):
    """``table[b, tokens[b, t]] = top[b, t]`` where ``valid`` (latest occurrence wins)."""
    B, V, _ = table.shape
    keep = _latest_only(tokens, valid)
    idx = jnp.where(keep, tokens, V)  # out of range: dropped
    rows = jnp.broadcast_to(jnp.arange(B)[:, None], tokens.shape)
    return table.at[rows, idx].set(top, mode="drop")


PROMPT_FILLS = ("top_ids", "text")
RECORDS = ("path", "tree")
FORMAT = "specjax-recycling-table"
VERSION = 1
SHIPPED = Path(__file__).parent / "data"  # tables shipped for models (``prior=shipped``)


def text_fill(rows, succ):
    """``[succ, rows without succ...]`` cut to the rows' width: a prompt token's entry when
    the table starts hot (``rows [..., W]`` its carried candidates, ``succ [...]`` its
    successor in the prompt)."""
    W = rows.shape[-1]
    keep = rows != succ[..., None]
    order = jnp.argsort(jnp.where(keep, 0, 1), axis=-1, stable=True)  # kept ones first
    rest = jnp.take_along_axis(rows, order, axis=-1)[..., :W - 1]
    return jnp.concatenate([succ[..., None], rest], axis=-1)


@jax.jit
def merge_rows(start, tables):
    """One table ``[V, W]`` from a batch's ``tables [B, V, W]`` that all began as ``start``:
    each entry from the first row that changed it, ``start``'s where none did."""
    changed = jnp.any(tables != start[None], axis=-1)  # [B, V]
    first = jnp.argmax(changed, axis=0)
    picked = tables[first, jnp.arange(start.shape[0])]
    return jnp.where(jnp.any(changed, axis=0)[:, None], picked, start)


def successor_table(docs, vocab_size: int, width: int) -> np.ndarray:
    """A table ``int32[vocab_size, width]`` of every token's ``width`` most frequent
    successors in ``docs`` (pairs of int arrays ``(tokens, keep)``: a pair ``tokens[i] ->
    tokens[i + 1]`` counts where ``keep[i + 1]``; ties go to the smaller id); junk
    (``0, 1, ...``) past a token's distinct successors. Built over the target's own greedy
    answers, an entry's first column is the token the target most often chose after it: a
    start for every row that has seen nothing yet (``prior``)."""
    keys = []
    for n, (tokens, keep) in enumerate(docs):
        t = np.asarray(tokens, np.int64)
        k = np.asarray(keep, bool)[1:]
        if t.ndim != 1 or k.size != max(t.size - 1, 0):
            raise DrafterError(f"token_recycling: document {n} has {t.size} tokens but "
                               f"{k.size + 1} keep flags")
        if t.size and (t.min() < 0 or t.max() >= vocab_size):
            raise DrafterError(f"token_recycling: token ids outside [0, {vocab_size}) in the "
                               "documents")
        keys.append(t[:-1][k] * vocab_size + t[1:][k])
    table = np.broadcast_to(np.arange(width, dtype=np.int32), (vocab_size, width)).copy()
    if not keys:
        return table
    uniq, counts = np.unique(np.concatenate(keys), return_counts=True)
    a, b = uniq // vocab_size, uniq % vocab_size
    order = np.lexsort((b, -counts, a))  # by token, then by count (most first), then by id
    a, b = a[order], b[order]
    rank = np.arange(a.size) - np.searchsorted(a, a, side="left")
    top = rank < width
    table[a[top], rank[top]] = b[top]
    return table


@functools.partial(jax.jit, static_argnums=(0, 3))
def _teacher_top_ids(graphdef, params, tokens, width):
    from flax import nnx

    model = nnx.merge(graphdef, params)
    B, T = tokens.shape
    out = model(tokens, jnp.broadcast_to(jnp.arange(T)[None], (B, T)), model.init_cache(B, T),
                prefix_empty=True)
    return jax.lax.top_k(out.logits, width)[1].astype(jnp.int32)


def teacher_top_ids(model, tokens, width: int) -> np.ndarray:
    """The target's ``width`` best next tokens at every position of ``tokens`` (one forward
    over the whole text, padded to a multiple of 256 positions): ``int32[len(tokens), W]``."""
    from flax import nnx

    n = len(tokens)
    T = -(-max(n, 1) // 256) * 256
    padded = np.zeros((1, T), np.int32)
    padded[0, :n] = tokens
    graphdef, params = nnx.split(model)
    return np.asarray(_teacher_top_ids(graphdef, params, jnp.asarray(padded), width))[0, :n]


@dataclasses.dataclass(eq=False)
class RecyclingMemory:
    """The table a ``token_recycling`` drafter carries from one batch to the next (a host
    copy, replaced after every batch; forgotten at the start of each ``generate`` call when
    ``per_call``; saved to ``path`` when set)."""

    width: int
    vocab_size: int
    tokenizer: str | None = None
    path: Path | None = None
    table: np.ndarray | None = None
    batches: int = 0
    per_call: bool = False

    @property
    def mode(self) -> str:
        return "call" if self.per_call else ("keep" if self.path is None else "file")

    def start(self, prior: np.ndarray | None = None) -> np.ndarray:
        """The table the next batch starts from: the carried one, else ``prior`` (the
        drafter's), else junk."""
        if self.table is not None:
            return self.table
        if prior is not None:
            return prior
        return np.broadcast_to(np.arange(self.width, dtype=np.int32),
                               (self.vocab_size, self.width))

    def header(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "width": self.width,
                "vocab_size": self.vocab_size, "tokenizer": self.tokenizer,
                "batches": self.batches}

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path or self.path)
        if self.table is None:
            raise DrafterError("token_recycling: nothing to save yet (no batch has been "
                               "decoded)")
        return write_table(path, self.header(), self.table)

    @classmethod
    def load(cls, path: str | Path, width: int, vocab_size: int,
             tokenizer: str | None) -> "RecyclingMemory":
        header, table = read_table(path, vocab_size, tokenizer, width)
        return cls(width, vocab_size, tokenizer, Path(path), table,
                   int(header.get("batches", 0)))


def write_table(path: str | Path, header: dict, table, *, compressed: bool = False) -> Path:
    """Writes a table file (``header`` as JSON, ``table`` as int32) atomically."""
    path = Path(path)
    save = np.savez_compressed if compressed else np.savez
    with replacing(path) as tmp, open(tmp, "wb") as f:
        save(f, header=np.frombuffer(json.dumps(header).encode(), np.uint8),
             table=np.asarray(table, np.int32))
    return path


def read_table(path: str | Path, vocab_size: int, tokenizer: str | None,
               width: int | None = None) -> tuple[dict, np.ndarray]:
    """``(header, table)`` of a table file, checked (format, version, vocabulary, tokenizer,
    shape, ids; the width too unless ``width`` is None); a bad one is refused naming it."""
    path = Path(path)
    header, arrays = _documents.read_tables(
        path, "token_recycling", "table file", FORMAT, VERSION, ("table",),
        {"width": width, "vocab_size": vocab_size}, tokenizer, "its token ids mean other text")
    table = arrays["table"]
    if width is None:
        width = header.get("width")
    if table.shape != (vocab_size, width) or table.dtype != np.int32:
        raise DrafterError(f"token_recycling: {path}: the table is {table.dtype} "
                           f"{table.shape}, expected int32 {(vocab_size, width)} "
                           "(truncated or corrupt)")
    if table.size and (table.min() < 0 or table.max() >= vocab_size):
        raise DrafterError(f"token_recycling: {path}: token ids outside [0, {vocab_size}) "
                           "(corrupt)")
    return header, table


@dataclasses.dataclass(frozen=True)
class TokenRecyclingConfig:
    """Options of ``token_recycling``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft depth"})
    width: int = dataclasses.field(default=8, metadata={
        "help": "candidates kept per token (the table's width; >= the tree's widest fan-out)"})
    tree: TreeSpec | None = tree_field(4)
    prompt: str = dataclasses.field(default="top_ids", metadata={
        "help": "what fills the prompt's entries: top_ids (the target's top ids at every "
                "prompt position: the LM head over the whole prompt in the prefill) or text "
                "(each prompt token's successor in the prompt, first column only)"})

    record: str = dataclasses.field(default="path", metadata={
        "help": "what a verify pass records: path (the root and the accepted nodes: contexts "
                "that happened) | tree (every verified node's top ids too, rejected ones "
                "first, as the paper does)"})
    memory: str | None = dataclasses.field(default=None, metadata={
        "help": "the table carried to the next batch (a hot start): none (default): every "
                "batch starts from the prior (junk without one) | call: within one generate "
                "call | keep: across calls in "
                "this process | FILE.npz: also saved there after every batch, loaded next "
                "time | auto (the method's default): none where the drafter starts from a "
                "prior, call where it does not"})
    prior: str | None = dataclasses.field(default="shipped", metadata={
        "help": "the table a row starts from before it has learnt anything: shipped "
                "(default): the one shipped for the target (each token's most frequent "
                "successors in the target's own answers to varied prompts; none for other "
                "models) | none: junk | FILE.npz: a table file (another width is cut, or "
                "padded with junk)"})

    def __post_init__(self):
        check_k(self.k)
        if not isinstance(self.width, int) or isinstance(self.width, bool) or self.width < 1:
            raise DrafterError(f"token_recycling: width must be an integer >= 1, got "
                               f"{self.width!r}")
        if self.record not in RECORDS:
            raise DrafterError(f"token_recycling: record must be one of {RECORDS}, got "
                               f"{self.record!r}")


@dataclasses.dataclass(frozen=True)
class TokenRecyclingDrafter:
    max_k: int
    width: int
    vocab_size: int
    tree: TreeSpec | None = None
    # width 1 only: each token's successor in the row's own text (the prompt's next token,
    # then the committed output's) instead of the target's top id there: no top-id features
    # in the verify forward (greedy, the same entries along the output)
    from_text: bool = False
    # "text": the prompt's entries are filled from the prompt's text (first column; the
    # others stay junk until the output records them), so the prefill computes no top ids
    prompt: str = "top_ids"
    # "tree": every verified node's top ids are recorded too (rejected ones included)
    record: str = "path"
    name: str = "token_recycling"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = True
    # the table carried from batch to batch (``memory``), and the target it is rebuilt with
    # from a benchmark journal (``relearn``)
    memory: RecyclingMemory | None = dataclasses.field(default=None, compare=False,
                                                       hash=False, repr=False)
    target: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)
    # the table a row starts from while nothing is carried (``prior``; None: junk), and the
    # name it is described by
    prior: np.ndarray | None = dataclasses.field(default=None, compare=False, hash=False,
                                                 repr=False)
    prior_name: str | None = dataclasses.field(default=None, compare=False, hash=False)

    def __post_init__(self):
        if self.prompt not in PROMPT_FILLS:
            raise DrafterError(f"token_recycling: prompt must be one of {PROMPT_FILLS}, got "
                               f"{self.prompt!r}")
        if self.from_text and self.width != 1:
            raise DrafterError(f"token_recycling: from_text keeps one successor per token "
                               f"(width 1), got width {self.width}")

    @property
    def tree_features(self) -> bool:
        """``record="tree"``: the loop hands ``update`` every verified node's features."""
        return self.record == "tree" and not self.from_text

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec() if self.from_text else FeatureSpec(top_ids=self.width)

    @property
    def prefill_features(self) -> FeatureSpec:
        return FeatureSpec() if self.prompt == "text" else self.features

    def params(self):
        """The table every row starts from: the carried one (``memory``), else the prior,
        else None (junk)."""
        if self.memory is not None:
            return jnp.asarray(self.memory.start(self.prior))
        return None if self.prior is None else jnp.asarray(self.prior)

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B, P = prompt_tokens.shape
        junk = jnp.arange(self.width, dtype=jnp.int32)
        if params is None:
            table = jnp.broadcast_to(junk, (B, self.vocab_size, self.width))
        else:  # a hot start: the carried table, or the prior
            table = jnp.broadcast_to(params[None], (B,) + params.shape)
        if self.from_text or self.prompt == "text":  # prompt[i] -> prompt[i + 1]
            nxt = jnp.concatenate([prompt_tokens[:, 1:], prompt_tokens[:, :1]], axis=1)
            valid = jnp.arange(P)[None] < prompt_lens[:, None] - 1
            if params is None:  # the other columns: the junk of an unfilled entry
                top = jnp.concatenate(
                    [nxt[..., None], jnp.broadcast_to(junk[1:], (B, P, self.width - 1))],
                    axis=2)
            else:  # the successor, then the carried candidates
                top = text_fill(params[prompt_tokens], nxt)
            return record(table, prompt_tokens, top, valid)
        valid = jnp.arange(P)[None] < prompt_lens[:, None]
        return record(table, prompt_tokens, features.top_ids, valid)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        # no draft distribution: the mid-draft stop hook does not apply
        parents, ranks, depth = static_topology(self.tree, self.max_k)
        B = ctx.seq.shape[0]
        rows = jnp.arange(B)
        toks = []
        for p, r in zip(parents, ranks):
            src = ctx.pending if p < 0 else toks[p]
            toks.append(state[rows, src, r])
        tokens = jnp.stack(toks, axis=1)
        N = len(parents)
        parent = jnp.broadcast_to(jnp.asarray(parents, jnp.int32)[None], (B, N))
        dep = jnp.broadcast_to(jnp.asarray(depth, jnp.int32)[None], (B, N))
        valid = dep <= jnp.where(ctx.live, k, 0)[:, None]
        return DraftTree(tokens=tokens, parent=parent, depth=dep, valid=valid), state, \
            ctx.target_cache

    def skip(self, params, target, state, ctx, features):
        """A step that drafted nothing (``DecodeLoop.idle_skip``): the table records the
        committed token as ``update`` does with nothing accepted (the idle forward's top ids
        at the root, or the pair of the row's text)."""
        if not self.from_text:  # one position's top ids: the root's
            top = features.top_ids
            features = dataclasses.replace(features, top_ids=jnp.pad(
                top, ((0, 0), (0, self.max_k + 1 - top.shape[1]), (0, 0))))
        return skip_as_update(self, params, target, state, ctx, features)

    def update(self, params, state, ctx, n_acc, tree, path, features, tree_features=None):
        # committed this step: the root (the step's pending token), then the accepted nodes
        B, D = path.shape
        # ctx is after the step: the root sat at the committed cache length, which grew by
        # n_acc + 1 (seq grew by as much unless an accepted EOS cut the block short)
        root_at = ctx.target_cache.lengths - 1 - n_acc
        if self.from_text:
            # seq[j] -> seq[j + 1] from the token before the root through the new pending
            # token: the pair into the root is new on the first step (the prompt's last
            # token -> the prefill's token) and recorded again, harmlessly, after that
            j = jnp.arange(-1, D + 1)[None]  # [1, D + 2]
            at = root_at[:, None] + j
            L = ctx.seq.shape[1]
            toks = jnp.take_along_axis(ctx.seq, jnp.clip(at, 0, L - 1), axis=1)
            nxt = jnp.take_along_axis(ctx.seq, jnp.clip(at + 1, 0, L - 1), axis=1)
            valid = (j <= n_acc[:, None]) & (at >= 0) & ctx.live[:, None] & (
                at + 1 < ctx.seq_len[:, None])
            return record(state, toks, nxt[..., None], valid)
        root = jnp.take_along_axis(ctx.seq, jnp.maximum(root_at, 0)[:, None], axis=1)
        nodes = jnp.take_along_axis(tree.tokens, jnp.maximum(path, 0), axis=1)
        toks = jnp.concatenate([root, nodes], axis=1)  # [B, D + 1]
        valid = (jnp.arange(D + 1)[None] <= n_acc[:, None]) & ctx.live[:, None] & (
            root_at[:, None] + jnp.arange(D + 1)[None] < ctx.seq_len[:, None])
        top = features.top_ids
        if tree_features is not None:  # record="tree": every verified node first, the path
            # last (the latest occurrence wins, so the contexts that happened win)
            N = tree.tokens.shape[1]
            toks = jnp.concatenate([tree.tokens, toks], axis=1)
            top = jnp.concatenate([tree_features.top_ids[:, 1:N + 1], top], axis=1)
            valid = jnp.concatenate([tree.valid & ctx.live[:, None], valid], axis=1)
        return record(state, toks, top, valid)


    # ------------------------------------------------------------ the carried table
    def learns_across_calls(self) -> bool:
        """``memory=keep`` or a file: one call's table is the next one's start."""
        return self.memory is not None and not self.memory.per_call

    def describe_extra(self) -> dict:
        """For results files: the options that change the drafts beyond the tree (a table
        carried across calls, the table a row starts from, rejected nodes recorded)."""
        out = {"memory": self.memory.mode} if self.learns_across_calls() else {}
        if self.prior_name is not None:
            out["prior"] = self.prior_name
        if self.tree_features:
            out["record"] = "tree"
        return out

    def snapshot(self):
        m = self.memory
        return None if m is None else (m.table, m.batches)

    def restore(self, snap) -> None:
        if self.memory is not None and snap is not None:
            self.memory.table, self.memory.batches = snap

    def begin_call(self) -> None:
        """At the start of a ``generate`` call: ``memory=call`` starts from the prior again
        (junk without one)."""
        if self.memory is not None and self.memory.per_call:
            self.memory.table, self.memory.batches = None, 0

    def carry_over(self, draft_state) -> None:
        """After a batch: the rows' tables merged into the one the next batch starts from."""
        if self.memory is None:
            return
        start = jnp.asarray(self.memory.start(self.prior))
        self.memory.table = np.asarray(jax.device_get(merge_rows(start, draft_state)))
        self.memory.batches += 1
        if self.memory.path is not None:
            self.memory.save()

    def relearn(self, prompts, outputs) -> None:
        """A resumed benchmark journal: the table the finished batch left, rebuilt from its
        prompts and outputs with one forward of the target over each text (the top ids the
        verify passes gave at the committed positions, up to near-ties that the prefill's
        rounding may order otherwise). A file (``memory=FILE.npz``) kept the table itself."""
        m = self.memory
        if not self.learns_across_calls() or m.path is not None:
            return
        if self.target is None:
            raise DrafterError("token_recycling: relearn needs the target (build the drafter "
                               "with drafters.make or methods.build)")
        start = m.start(self.prior)
        rows = []
        for prompt, out in zip(prompts, outputs):
            prompt, out = list(prompt), list(out)
            table = start.copy()
            P = len(prompt)
            top = teacher_top_ids(self.target, prompt + out[:-1], self.width) if (
                out or self.prompt != "text") else None
            if self.prompt == "text":
                if P > 1:  # the latest occurrence wins, each from the start's entry
                    filled = np.asarray(text_fill(jnp.asarray(start[prompt[:-1]]),
                                                  jnp.asarray(prompt[1:], jnp.int32)))
                    for i in range(P - 1):
                        table[prompt[i]] = filled[i]
            else:
                for i in range(P):
                    table[prompt[i]] = top[i]
            for j in range(len(out) - 1):  # every committed token but the last was a root
                table[out[j]] = top[P + j]
            rows.append(table)
        if rows:
            m.table = np.asarray(merge_rows(jnp.asarray(start), jnp.asarray(np.stack(rows))))
            m.batches += 1


@DRAFTERS.register("token_recycling", config=TokenRecyclingConfig,
                   doc="the target's own top-k candidates per token, from every verify pass, "
                       "drafted as a static tree (model-free)")
def make_token_recycling(cfg: TokenRecyclingConfig, target_lm) -> TokenRecyclingDrafter:
    tree = cfg.tree
    if tree is None:  # the default: the CPU tree's first k levels (one node per extra level)
        widths = [min(w, cfg.width) for w in (list(DEFAULT_WIDTHS) + [1] * cfg.k)[:cfg.k]]
        tree = parse_tree("levels:" + ".".join(map(str, widths)), k=cfg.k)
    if tree is not None and tree.kind == "chain":
        tree = None
    if tree is not None and tree.kind != "fixed":
        raise DrafterError(f"token_recycling drafts static trees (fixed:<choices> or "
                           f"levels:<widths>) or chains; got {tree.kind!r}")
    if tree is not None:
        _, ranks, _ = static_topology(tree, cfg.k)
        if max(ranks) >= cfg.width:
            raise DrafterError(f"token_recycling: the tree gives a node {max(ranks) + 1} "
                               f"children, more than the table's width {cfg.width}")
    model = getattr(target_lm, "model", target_lm)
    vocab, tok = target_ids(target_lm)
    prior, prior_name = _resolve_prior(cfg.prior, cfg.width, vocab, tok)
    memory = cfg.memory
    if isinstance(memory, str) and memory.strip().lower() == "auto":
        # carried, a table's entries are the latest context's candidates, which lose against
        # a prior's most frequent successors (replayed over Spec-Bench: 1.71 tokens per step
        # against 1.78) but win against junk (1.62 against 1.52)
        memory = "none" if prior is not None else "call"
    if isinstance(memory, str) and memory.strip().lower() in ("", "none"):
        memory = None
    if isinstance(memory, str):
        mode = memory.strip().lower()
        if mode in ("keep", "call"):
            memory = RecyclingMemory(cfg.width, vocab, tok, per_call=mode == "call")
        else:
            path = Path(memory)
            if path.suffix != ".npz":
                raise DrafterError(f"token_recycling: memory must be none, call, keep, auto "
                                   f"or a file path ending in .npz, got {memory!r}")
            memory = (RecyclingMemory.load(path, cfg.width, vocab, tok) if path.exists() else
                      RecyclingMemory(cfg.width, vocab, tok, path=path))
    elif memory is not None and not isinstance(memory, RecyclingMemory):
        raise DrafterError(f"token_recycling: memory must be a string or a RecyclingMemory, "
                           f"got {type(memory).__name__}")
    elif memory is not None and (memory.width, memory.vocab_size) != (cfg.width, vocab):
        raise DrafterError(f"token_recycling: the RecyclingMemory holds a table of width "
                           f"{memory.width} over {memory.vocab_size} tokens; this drafter "
                           f"needs width {cfg.width} over the target's {vocab}")
    return TokenRecyclingDrafter(max_k=cfg.k if tree is None else tree.depth, width=cfg.width,
                                 vocab_size=model.cfg.vocab_size, tree=tree, prompt=cfg.prompt,
                                 record=cfg.record, memory=memory,
                                 target=model if memory is not None else None,
                                 prior=prior, prior_name=prior_name)


def shipped_table(vocab_size: int, tokenizer: str | None) -> Path | None:
    """The table file shipped for a target of this vocabulary and tokenizer, or None (an
    unreadable one is skipped with a warning: rows start from junk)."""
    return _documents.shipped_file(SHIPPED, ".token_recycling.npz", "header", vocab_size,
                                   tokenizer, "token_recycling table")


def fit_width(table: np.ndarray, width: int) -> np.ndarray:
    """``table``'s first ``width`` columns, padded with junk (``W, W + 1, ...``) if fewer."""
    W = table.shape[1]
    if width <= W:
        return np.ascontiguousarray(table[:, :width])
    pad = np.broadcast_to(np.arange(W, width, dtype=np.int32) % table.shape[0],
                          (table.shape[0], width - W))
    return np.concatenate([table, pad], axis=1)


def _resolve_prior(prior, width: int, vocab: int, tok: str | None):
    """``(table or None, its name for describe or None)`` of the ``prior`` option."""
    if isinstance(prior, os.PathLike):
        prior = os.fspath(prior)
    if prior is None or (isinstance(prior, str) and prior.strip().lower() in ("", "none")):
        return None, None
    if not isinstance(prior, str):
        raise DrafterError(f"token_recycling: prior must be shipped, none or a file path "
                           f"ending in .npz, got a {type(prior).__name__}: {prior!r}")
    if prior.strip().lower() == "shipped":
        path = shipped_table(vocab, tok)
        if path is None:
            return None, None
        name = f"shipped:{path.name}"
    else:
        path = Path(prior)
        if path.suffix != ".npz":
            raise DrafterError(f"token_recycling: prior must be shipped, none or a file path "
                               f"ending in .npz, got {prior!r}")
        if not path.exists():
            raise DrafterError(f"token_recycling: prior {path} does not exist")
        name = str(path)
    _, table = read_table(path, vocab, tok)
    return fit_width(table, width), name
