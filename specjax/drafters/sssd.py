"""SSSD (Marzollo et al., Simply-Scalable Speculative Decoding; card C9): training-free drafts
from the request's own text and from a datastore of earlier text, with a speculation budget
that follows the machine's verify-cost curve so drafting still pays at larger batches.

Two sources draft a chain each step, both inside the compiled loop:

* **the request itself** (prompt and output so far): the longest suffix match of the row's
  context in its own text, continued by the most frequent continuation
  (:func:`specjax.drafters.suffix.suffix_draft` over the row alone);
* **the datastore**: n-gram statistics of a large body of text (by default the target's own
  answers to 5,632 varied prompts, the self-distillation corpus of ``specjax train data``;
  no evaluation prompt is in it: the corpus builder refuses overlaps), kept as one hash table
  per context order ``n = 1 .. max_order`` mapping the ``n`` tokens before a position to the
  most frequent next token, its count and the context's count. A draft follows the table
  token by token from the longest order that has the context, and stops where the running
  product of the continuations' empirical probabilities falls below ``min_prob`` or where no
  order of at least ``min_order`` knows the context.

The row drafts its own text's chain when that match is at least as long as the datastore's
context order (the request is the more specific source), else the datastore's.

**The budget.** The paper sets the number of speculated tokens from a roofline budget: verifying
stays almost free while the batch's verified tokens stay within what the hardware processes at
about the latency of one token. Its exact formula is not in the abstract; here (card C9's
inferred rule) the budget is read off the verify-cost curve of the machine the drafter runs on
(:func:`specjax.cost_curves.measured_cost`, measured once and cached): at batch ``B`` a row
drafts at most the largest ``k`` with ``cost(B * T(k)) <= (1 + budget_tol) * cost(B)``,
where ``T(k)`` is the verify block the engine runs for ``k + 1`` tokens (its bucket) and
``cost(T)`` the relative time of a forward over ``T`` tokens at batch 1 (a batch of ``B``
rows of ``T`` tokens does about the work of one row of ``B * T``). On the AMD CPU of
docs/benchmarks.md with ``budget_tol = 0.5`` that is 7 tokens at batch 1 (the 8-token block
at 1.21 one-token forwards; the 9-token block costs 1.74), 3 at batch 2, 1 at batch 3 and 4,
none from 5 (curve of 2026-11-28): drafting backs off where verifying stops being cheap.

**The datastore** (:class:`Datastore`) is host side: token documents (bounded, FIFO eviction)
from which the hash tables are built with numpy (about a second per million tokens; after
that, the documents it learns and evicts are counted into the built tables, deciding again
only the slots they touch) and passed into the loop as arrays of a fixed size (``slots`` per
order, a power of two; a colliding context keeps the slot if it is the more frequent one), so
growing the datastore never recompiles. It learns every output after its batch (``observe``;
``learn=False`` turns it off), is saved and loaded as a ``.npz`` file recording the
vocabulary and tokenizer it was built with (another tokenizer, another format version or a
corrupt file is refused with an error naming the file), and a datastore for SmolLM2-135M
ships with specjax.

Drafts are deterministic given the context and the datastore, so verification is exact
(greedy: the plain-decoding tokens; sampling: the deterministic-candidate rule).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import ClassVar, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import _documents
from specjax.buckets import verify_block
from specjax.drafters.base import DRAFTERS, StepContext, check_k, target_ids
from specjax.drafters.suffix import suffix_draft
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.tree import DraftTree

FORMAT = "specjax-sssd-datastore"
VERSION = 1
MAX_TOKENS = 1 << 24  # 16M tokens (64 MB of documents; the tables do not grow with it)
MAX_SLOTS = 1 << 22  # per order: 4 int32 arrays of 4M entries = 64 MB per order
MAX_ORDER = 8
EMPTY_SLOTS, CORPUS_SLOTS = 1 << 16, 1 << 20  # default tables: an empty datastore, a corpus
SHIPPED = Path(__file__).parent / "data"

# 32-bit FNV-1a style hashing of a context (tokens as whole words), then a murmur3 finaliser;
# two independent hashes: one picks the slot, the other checks that the slot holds the context
_SEEDS = ((0x811C9DC5, 0x01000193), (0x3C6EF372, 0x5BD1E995))


def _fmix(h, xp):
    u = xp.uint32
    h = h ^ (h >> u(16))
    h = h * u(0x85EBCA6B)
    h = h ^ (h >> u(13))
    h = h * u(0xC2B2AE35)
    return h ^ (h >> u(16))


def context_hash(ctx, xp=np):
    """Two ``uint32`` hashes of each context ``ctx[..., n]`` (token ids, oldest first), the
    same in numpy (``xp=np``) and in jax (``xp=jnp``): ``(slot hash, check hash)``."""
    u = xp.uint32
    n = ctx.shape[-1]
    out = []
    for seed, prime in _SEEDS:
        h = xp.full(ctx.shape[:-1], seed, dtype=xp.uint32) ^ u((n * 0x9E3779B9) & 0xFFFFFFFF)
        for t in range(n):
            h = (h ^ ctx[..., t].astype(xp.uint32)) * u(prime)
        out.append(_fmix(h, xp))
    return out[0], out[1]


def _slot(key, mask):
    """The table slot of each context ``key`` (its slot hash's low bits)."""
    return (key >> np.uint64(32)) & np.uint64(mask)


def _aggregate(key, tok, cnt, mask):
    """``(key, tok, cnt)`` with the counts of equal (context key, next token) pairs summed,
    pairs whose count is 0 dropped, sorted by (slot, key, token): a slot's contexts together,
    each context's pairs together."""
    if key.size == 0:
        return key, tok, cnt
    order = np.lexsort((tok, key, _slot(key, mask)))
    key, tok, cnt = key[order], tok[order], cnt[order]
    new = np.ones(key.size, bool)
    new[1:] = (key[1:] != key[:-1]) | (tok[1:] != tok[:-1])
    starts = np.flatnonzero(new)
    cnt = np.add.reduceat(cnt, starts)
    key, tok = key[starts], tok[starts]
    keep = cnt != 0
    return key[keep], tok[keep], cnt[keep]


def _order_pairs(text: np.ndarray, n: int, mask: int):
    """Order ``n``'s (context key, next token, count) pairs of ``text`` (documents joined by
    -1: a window touching a -1 is not a context), by :func:`_aggregate`."""
    empty = (np.zeros(0, np.uint64), np.zeros(0, np.int32), np.zeros(0, np.int32))
    if text.size <= n:
        return empty
    win = np.lib.stride_tricks.sliding_window_view(text, n + 1)  # [P, n + 1]
    win = win[np.all(win >= 0, axis=1)]
    if win.shape[0] == 0:
        return empty
    h1, h2 = context_hash(win[:, :n], np)
    key = (h1.astype(np.uint64) << np.uint64(32)) | h2.astype(np.uint64)
    return _aggregate(key, win[:, n].astype(np.int32), np.ones(key.size, np.int32), mask)


def _slot_winners(key, tok, cnt, mask):
    """From pairs sorted as :func:`_aggregate` leaves them: per slot the context that holds
    it, ``(slot, check, next, count, total)``. A context's ``next`` is its most frequent token
    (ties: the smallest id); a slot shared by several contexts goes to the one whose next
    token was seen most often, then the one seen most often (ties: the smallest key)."""
    if key.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.astype(np.int32), z, z, z
    new_ctx = np.ones(key.size, bool)
    new_ctx[1:] = key[1:] != key[:-1]
    cstarts = np.flatnonzero(new_ctx)
    ctx_total = np.add.reduceat(cnt, cstarts)
    ctx_id = np.cumsum(new_ctx) - 1
    best = np.lexsort((tok, -cnt, ctx_id))  # by context, then count desc, id asc
    first = best[np.flatnonzero(np.r_[True, ctx_id[best][1:] != ctx_id[best][:-1]])]
    c_key, c_tok, c_cnt = key[first], tok[first], cnt[first]
    slot = _slot(c_key, mask).astype(np.int64)
    win_order = np.lexsort((-ctx_total, -c_cnt, slot))  # by slot, then most frequent
    keep = win_order[np.flatnonzero(np.r_[True, slot[win_order][1:] !=
                                            slot[win_order][:-1]])]
    check = (c_key[keep] & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
    top = np.iinfo(np.int32).max
    return (slot[keep], check, c_tok[keep], np.minimum(c_cnt[keep], top),
            np.minimum(ctx_total[keep], top))


def _write_winners(tables: dict, row: int, winners) -> None:
    s, check, nxt, count, total = winners
    tables["check"][row, s] = check
    tables["next"][row, s] = nxt
    tables["count"][row, s] = count
    tables["total"][row, s] = total


def _empty_tables(max_order: int, slots: int) -> dict:
    return {k: np.zeros((max_order, slots), np.int32) for k in ("check", "next", "count",
                                                               "total")}


def _joined(docs: Sequence[np.ndarray]) -> np.ndarray:
    docs = [np.asarray(d, np.int32) for d in docs if len(d) >= 2]
    if not docs:
        return np.zeros(0, np.int32)
    return np.concatenate([np.append(d, -1) for d in docs]).astype(np.int32)


def _build(docs: Sequence[np.ndarray], max_order: int, slots: int) -> tuple[dict, list]:
    """The tables of ``docs`` and each order's pairs (:func:`_order_pairs`)."""
    tables = _empty_tables(max_order, slots)
    text = _joined(docs)
    pairs = []
    for n in range(1, max_order + 1):
        pairs.append(_order_pairs(text, n, slots - 1))
        _write_winners(tables, n - 1, _slot_winners(*pairs[-1], slots - 1))
    return tables, pairs


def build_tables(docs: Sequence[np.ndarray], max_order: int, slots: int) -> dict:
    """The hash tables of ``docs`` (int32 token arrays): ``check, next, count, total``, each
    ``int32[max_order, slots]`` (order ``n`` in row ``n - 1``); ``count == 0`` marks an empty
    slot. ``next`` is the most frequent token after the context (ties: the smallest id),
    ``count`` its count and ``total`` the context's count."""
    return _build(docs, max_order, slots)[0]


def update_tables(tables: dict, pairs: list, added: Sequence[np.ndarray],
                  removed: Sequence[np.ndarray], slots: int) -> tuple[dict, list]:
    """The tables and pairs of :func:`_build` after documents are ``added`` and ``removed``
    (each one of the documents built from), without building again: only the slots whose
    contexts' counts changed are decided again. New arrays; ``tables`` and ``pairs`` are left
    as they were. The same tables as :func:`build_tables` of the new documents."""
    mask = slots - 1
    out = {k: v.copy() for k, v in tables.items()}
    new_pairs = []
    plus, minus = _joined(added), _joined(removed)
    for n, (key, tok, cnt) in enumerate(pairs, start=1):
        pk, pt, pc = _order_pairs(plus, n, mask)
        mk, mt, mc = _order_pairs(minus, n, mask)
        dk, dt, dc = _aggregate(np.concatenate([pk, mk]), np.concatenate([pt, mt]),
                                np.concatenate([pc, -mc]), mask)
        touched = np.unique(_slot(dk, mask))  # slots whose contexts' counts changed
        if touched.size == 0:
            new_pairs.append((key, tok, cnt))
            continue
        hit = np.isin(_slot(key, mask), touched)
        seg = _aggregate(np.concatenate([key[hit], dk]), np.concatenate([tok[hit], dt]),
                         np.concatenate([cnt[hit], dc]), mask)
        rest = key[~hit], tok[~hit], cnt[~hit]
        at = np.searchsorted(_slot(rest[0], mask), _slot(seg[0], mask))
        new_pairs.append(tuple(np.insert(r, at, g) for r, g in zip(rest, seg)))
        t = touched.astype(np.int64)
        for k in out:
            out[k][n - 1, t] = 0
        _write_winners(out, n - 1, _slot_winners(*seg, mask))
    return out, new_pairs


def _corpus_records(path: Path) -> list[dict]:
    """The records of one corpus shard (ArrayRecord of JSON objects, the format of
    :mod:`specjax.train.corpus`, read here without importing the training package)."""
    from array_record.python.array_record_module import ArrayRecordReader

    try:
        reader = ArrayRecordReader(str(path))
    except Exception as e:
        raise DrafterError(f"corpus shard {path} cannot be read ({type(e).__name__}: {e})"
                           ) from None
    try:
        return [json.loads(b) for b in reader.read_all()]
    finally:
        reader.close()


class Datastore:
    """Token documents and the n-gram hash tables built from them (host side).

    ``max_tokens`` bounds the documents (the oldest are evicted first); ``slots`` (a power of
    two) and ``max_order`` fix the tables' shape (``4 * max_order * slots`` int32 values:
    32 MB at the defaults 4 and 2^20). ``path``: where :meth:`save` writes by default (and
    where ``autosave`` writes after every batch). Bound to one vocabulary (and tokenizer, when
    known) by the first drafter built over it.
    """

    def __init__(self, *, max_order: int = 4, slots: int = 1 << 20,
                 max_tokens: int = 1 << 22, path: str | os.PathLike | None = None,
                 autosave: bool = False):
        if not isinstance(max_order, int) or isinstance(max_order, bool) or not (
                1 <= max_order <= MAX_ORDER):
            raise DrafterError(f"sssd datastore: max_order must be an integer in [1, "
                               f"{MAX_ORDER}], got {max_order!r}")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 2 or \
                slots > MAX_SLOTS or slots & (slots - 1):
            raise DrafterError(f"sssd datastore: slots must be a power of two in [2, "
                               f"{MAX_SLOTS}] (16 bytes each per order), got {slots!r}")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not (
                1 <= max_tokens <= MAX_TOKENS):
            raise DrafterError(f"sssd datastore: max_tokens must be an integer in [1, "
                               f"{MAX_TOKENS}], got {max_tokens!r}")
        self.max_order, self.slots, self.max_tokens = max_order, slots, max_tokens
        self.path = Path(path) if path is not None else None
        self.autosave = autosave
        self.vocab_size: int | None = None
        self.tokenizer: str | None = None
        self.source = "empty"
        self._docs: collections.deque[np.ndarray] = collections.deque()
        self._tokens = 0
        self.evicted = 0
        self._tables = None  # built lazily; after a build, documents added and evicted
        self._pairs = None  # are counted in (update_tables) when next asked for
        self._added: list[np.ndarray] = []
        self._removed: list[np.ndarray] = []
        self._device = None  # (the tables it copies, their device copy)

    # -------------------------------------------------------------------------- contents
    def __len__(self) -> int:
        return len(self._docs)

    @property
    def num_tokens(self) -> int:
        return self._tokens

    def bind(self, vocab_size: int, tokenizer: str | None, where: str = "this datastore"):
        """Ties the datastore to a vocabulary; refuses another one."""
        _documents.check_binding("sssd datastore", where, self.vocab_size, self.tokenizer,
                                 vocab_size, tokenizer)
        if self._docs:
            top = max(int(d.max()) for d in self._docs)
            if top >= vocab_size:
                raise DrafterError(f"sssd datastore {where} holds token id {top}, outside the "
                                   f"target's vocabulary of {vocab_size}")
        self.vocab_size = vocab_size
        self.tokenizer = self.tokenizer or tokenizer

    def add(self, tokens: Sequence[int]):
        """Appends one document, evicting the oldest while the total exceeds ``max_tokens``
        (a document longer than that keeps its last ``max_tokens`` tokens)."""
        doc = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens,
                         np.int32).reshape(-1)
        if doc.size == 0:
            return
        if doc.min() < 0 or (self.vocab_size is not None and doc.max() >= self.vocab_size):
            raise DrafterError(f"sssd datastore: token ids must be in [0, "
                               f"{self.vocab_size or 'vocab'}), got [{doc.min()}, {doc.max()}]")
        doc = doc[-self.max_tokens:]
        built = self._tables is not None
        while self._docs and self._tokens + doc.size > self.max_tokens:
            old = self._docs.popleft()
            self._tokens -= old.size
            self.evicted += 1
            if built:
                self._removed.append(old)
        self._docs.append(doc)
        self._tokens += doc.size
        if built:
            self._added.append(doc)

    def extend(self, docs: Iterable[Sequence[int]]):
        for d in docs:
            self.add(d)

    def tables(self) -> dict:
        """The hash tables (numpy), built on first use; documents added or evicted since are
        counted in (:func:`update_tables`: the shipped 1.8M-token datastore takes 2.5 s to
        build on a 2-core CPU, one answer's update a small part of that), or the tables are
        built again when the change is over a quarter of the documents' tokens. New arrays
        whenever they change."""
        changed = sum(d.size for d in self._added) + sum(d.size for d in self._removed)
        if self._tables is None or changed > max(self._tokens, 1) // 4:
            self._tables, self._pairs = _build(list(self._docs), self.max_order, self.slots)
        elif changed:
            self._tables, self._pairs = update_tables(self._tables, self._pairs, self._added,
                                                      self._removed, self.slots)
        self._added, self._removed = [], []
        return self._tables

    def device_tables(self) -> dict:
        """The hash tables as device arrays, copied once per change (64 MB at the defaults:
        25-50 ms on a 2-core CPU; ``generate`` waits for the copy before its timed prefill)."""
        t = self.tables()
        if self._device is None or self._device[0] is not t:
            self._device = (t, {k: jnp.asarray(v) for k, v in t.items()})
        return self._device[1]

    def lookup(self, context: Sequence[int]) -> tuple[int, int, int] | None:
        """``(next token, its count, the context's count)`` the tables hold for ``context``
        (its last ``max_order`` tokens at most; the longest order found wins), or None."""
        t = self.tables()
        ctx = np.asarray(list(context), np.int32)
        for n in range(min(self.max_order, ctx.size), 0, -1):
            h1, h2 = context_hash(ctx[None, -n:], np)
            s = int(h1[0]) & (self.slots - 1)
            if t["count"][n - 1, s] > 0 and t["check"][n - 1, s] == h2.view(np.int32)[0]:
                return int(t["next"][n - 1, s]), int(t["count"][n - 1, s]), int(
                    t["total"][n - 1, s])
        return None

    def snapshot(self):
        return (tuple(self._docs), self._tokens, self.evicted)

    def restore(self, snap):
        docs, self._tokens, self.evicted = snap
        self._docs = collections.deque(docs)
        self._tables = self._pairs = None
        self._added, self._removed = [], []

    # -------------------------------------------------------------------------- files
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Writes the documents (not the tables: they are rebuilt on load) atomically."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise DrafterError("sssd datastore: no path to save to (give one, or build the "
                               "datastore with path=)")
        meta = {"format": FORMAT, "version": VERSION, "max_order": self.max_order,
                "slots": self.slots, "max_tokens": self.max_tokens,
                "vocab_size": self.vocab_size, "tokenizer": self.tokenizer,
                "evicted": self.evicted, "source": self.source}
        return _documents.write(path, meta, self._docs, compressed=True)

    @classmethod
    def load(cls, path: str | os.PathLike, *, autosave: bool = False, **overrides):
        """Reads a datastore written by :meth:`save`; ``max_order``, ``slots`` and
        ``max_tokens`` may override the saved ones."""
        path = Path(path)
        meta, docs = _documents.read(path, FORMAT, VERSION, "sssd datastore", "datastore")
        vocab = meta.get("vocab_size")
        kw = {k: meta[k] for k in ("max_order", "slots", "max_tokens") if k in meta}
        kw.update({k: v for k, v in overrides.items() if v is not None})
        ds = cls(path=path, autosave=autosave, **kw)
        ds.vocab_size, ds.tokenizer = vocab, meta.get("tokenizer")
        ds.source = meta.get("source", str(path))
        for doc in docs:
            ds.add(doc)
        ds.evicted += int(meta.get("evicted", 0))
        return ds

    @classmethod
    def from_corpus(cls, corpus_dir: str | os.PathLike, *, answers_only: bool = False,
                    tokenizer_sha256: str | None = None, **kwargs) -> "Datastore":
        """A datastore of a ``specjax train data`` corpus: every record's tokens (prompt and
        answer; only the answer with ``answers_only``). ``tokenizer_sha256``: the target's
        tokenizer hash; a corpus written with another tokenizer is refused."""
        corpus_dir = Path(corpus_dir)
        try:
            manifest = json.loads((corpus_dir / "manifest.json").read_text())
            shards = [corpus_dir / str(s) for s in manifest["shards"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DrafterError(f"{corpus_dir} is not a specjax corpus (no readable "
                               f"manifest.json: {type(e).__name__}: {e})") from None
        theirs = manifest.get("tokenizer_sha256")
        if tokenizer_sha256 and theirs and theirs != tokenizer_sha256:
            raise DrafterError(f"corpus {corpus_dir} was written with another tokenizer "
                               f"(sha256 {theirs[:16]}..., the target's is "
                               f"{tokenizer_sha256[:16]}...): its token ids mean other text")
        ds = cls(**kwargs)
        for shard in shards:
            for rec in _corpus_records(shard):
                toks = np.asarray(rec["tokens"], np.int32)
                if answers_only:
                    toks = toks[np.asarray(rec["loss_mask"], bool)]
                ds.add(toks)
        ds.source = f"corpus {corpus_dir.name} ({len(shards)} shards)"
        return ds

    def __repr__(self):
        return (f"Datastore({len(self)} documents, {self.num_tokens} tokens, orders 1-"
                f"{self.max_order}, {self.slots} slots, from {self.source})")


# ------------------------------------------------------------------------------ in the loop


def order_hashes(window):
    """:func:`context_hash` of every suffix of ``window[B, O]`` at once: ``(slot hash, check
    hash)``, each ``uint32[B, O]`` with order ``n`` (the last ``n`` tokens) in column ``n - 1``
    (jax; one pass over the window instead of one per order)."""
    u = jnp.uint32
    B, O = window.shape
    orders = jnp.arange(1, O + 1, dtype=jnp.uint32)
    out = []
    for seed, prime in _SEEDS:
        h = jnp.broadcast_to(u(seed) ^ (orders * u(0x9E3779B9)), (B, O))
        for t in range(O):  # window position t belongs to order n's context iff t >= O - n
            inside = (t >= O - orders.astype(jnp.int32))[None]
            h = jnp.where(inside, (h ^ window[:, t:t + 1].astype(u)) * u(prime), h)
        out.append(_fmix(h, jnp))
    return out[0], out[1]


def datastore_draft(tables, seq, seq_len, K: int, max_order: int, min_order: int,
                    min_prob: float):
    """The datastore's chain of each row: ``(tokens int32[B, K], length int32[B],
    order int32[B])`` (``order``: the context order of the first token, 0 for none).

    Each token looks up every order at once (:func:`order_hashes`, one gather per table) and
    takes the highest order that knows the context; the chain grows in a ``while_loop`` that
    ends when no row is still going, so a step costs what its longest chain needs. (One
    order at a time over all ``K`` positions: 17 ms per call at batch 1 in an isolated jit on
    the project's 2-core CPU against 0.14 ms; inside the decode loop XLA made the old form
    far cheaper, and the step of SSSD fell by about 4%, 2026-11-28.)"""
    B, L = seq.shape
    O = max_order
    S = tables["check"].shape[1]
    back = seq_len[:, None] - O + jnp.arange(O, dtype=jnp.int32)[None]
    window = jnp.where(back >= 0, jnp.take_along_axis(seq, jnp.maximum(back, 0), axis=1), -1)
    col = jnp.arange(O, dtype=jnp.int32)[None]  # order n - 1

    def lookup(window):
        h1, h2 = order_hashes(window)
        slot = (h1 & jnp.uint32(S - 1)).astype(jnp.int32)
        cnt = tables["count"][col, slot]
        # order n needs its n tokens: the window's trailing run of real tokens
        known = jnp.sum(jnp.cumprod((window >= 0)[:, ::-1], axis=1), axis=1)
        hit = ((col < known[:, None]) & (cnt > 0)
               & (tables["check"][col, slot] == jax.lax.bitcast_convert_type(h2, jnp.int32)))
        found = jnp.max(jnp.where(hit, col + 1, 0), axis=1)  # highest order hit, 0 none
        pick = jnp.maximum(found - 1, 0)[:, None]
        at = jnp.take_along_axis(slot, pick, axis=1)[:, 0]
        row = pick[:, 0]
        tok = tables["next"][row, at]
        p = jnp.where(found > 0, tables["count"][row, at]
                      / jnp.maximum(tables["total"][row, at], 1), 0.0)
        return tok, p, found

    def body(c):
        d, window, prob, going, toks, length, first = c
        tok, p, found = lookup(window)
        prob = prob * p
        going = going & (found >= min_order) & (prob >= min_prob)
        first = jnp.where(d == 0, jnp.where(going, found, 0), first)
        toks = jax.lax.dynamic_update_slice(toks, jnp.where(going, tok, 0)[:, None], (0, d))
        window = jnp.concatenate([window[:, 1:], tok[:, None]], axis=1)
        return d + 1, window, prob, going, toks, length + going, first

    z = jnp.zeros((B,), jnp.int32)
    c = (jnp.int32(0), window, jnp.ones((B,), jnp.float32), jnp.ones((B,), bool),
         jnp.zeros((B, K), jnp.int32), z, z)
    c = jax.lax.while_loop(lambda c: (c[0] < K) & jnp.any(c[3]), body, c)
    return c[4], c[5].astype(jnp.int32), c[6]


def flat_budget(cost: Sequence[float], tol: float, K: int, max_batch: int = 64) -> tuple:
    """``caps[B - 1]``: the most tokens a row drafts at batch ``B`` (see the module docstring),
    from the relative cost curve ``cost[T - 1]`` (batch 1, linearly extrapolated). A draft of
    ``k`` tokens is verified as the engine's block for ``k + 1`` (its bucket,
    :func:`specjax.buckets.verify_buckets`), so that block's size is what is priced."""
    c = [float(x) for x in cost]
    slope = (c[-1] - c[-2]) if len(c) >= 2 else 1.0

    def at(T):
        return c[T - 1] if T <= len(c) else c[-1] + slope * (T - len(c))

    caps = []
    for B in range(1, max_batch + 1):
        k = 0
        while k < K and at(B * verify_block(k + 1, K)) <= (1 + tol) * at(B):
            k += 1
        caps.append(k)
    return tuple(caps)


@dataclasses.dataclass(frozen=True)
class SSSDConfig:
    """Options of ``sssd``."""

    k: int = dataclasses.field(default=8, metadata={"help": "maximum draft length"})
    datastore: object = dataclasses.field(default=None, metadata={
        "help": "a Datastore, a .npz path (loaded if it exists, else created; saved after "
                "every batch), a corpus directory (specjax train data), 'empty', or none: "
                "the datastore shipped for the model (empty for other models)"})
    max_order: int = dataclasses.field(default=4, metadata={
        "help": "longest datastore context (n-gram order) for a new datastore"})
    slots: int | None = dataclasses.field(default=None, metadata={
        "help": "hash-table slots per order (a power of two) for a new datastore (default: "
                "2^20 for one built from a corpus, 2^16 for an empty one)"})
    min_order: int = dataclasses.field(default=2, metadata={
        "help": "shortest datastore context that drafts"})
    min_prob: float = dataclasses.field(default=0.2, metadata={
        "help": "a datastore chain stops where the product of its continuations' "
                "empirical probabilities falls below this"})
    max_depth: int = dataclasses.field(default=16, metadata={
        "help": "longest context matched in the request's own text"})
    budget_tol: float = dataclasses.field(default=0.5, metadata={
        "help": "draft at most the k with cost(B(k+1)) <= (1 + budget_tol) cost(B) on this "
                "machine's verify-cost curve (inf: no budget)"})
    learn: bool = dataclasses.field(default=True, metadata={
        "help": "add every output to the datastore after its batch"})

    def __post_init__(self):
        check_k(self.k)
        for name in ("max_order", "min_order", "max_depth", "slots"):
            v = getattr(self, name)
            if name == "slots" and v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise DrafterError(f"sssd: {name} must be an integer >= 1, got {v!r}")
        if self.min_order > self.max_order:
            raise DrafterError(f"sssd: min_order ({self.min_order}) cannot exceed max_order "
                               f"({self.max_order}): the datastore would never draft")
        if not (isinstance(self.min_prob, (int, float)) and 0 <= self.min_prob <= 1):
            raise DrafterError(f"sssd: min_prob must be in [0, 1], got {self.min_prob!r}")
        if not (isinstance(self.budget_tol, (int, float)) and self.budget_tol >= 0):
            raise DrafterError(f"sssd: budget_tol must be >= 0 (inf for no budget), got "
                               f"{self.budget_tol!r}")
        if not (self.datastore is None or isinstance(self.datastore,
                                                     (Datastore, str, os.PathLike))):
            raise DrafterError(f"sssd: datastore must be a Datastore or a path, got "
                               f"{type(self.datastore).__name__}")


@dataclasses.dataclass(frozen=True)
class SSSDDrafter:
    max_k: int
    max_order: int
    min_order: int
    min_prob: float
    max_depth: int
    caps: tuple  # caps[B - 1]: the budget at batch B (B > len: the last)
    learn: bool = True
    # False: the datastore's chain only (``ngram``'s source: its suffix source already
    # drafts from the row's own text)
    own_text: bool = True
    # the tables are an argument of the compiled loop (params), not part of it
    datastore: Datastore | None = dataclasses.field(default=None, compare=False, hash=False,
                                                    repr=False)
    tree: None = None
    name: str = "sssd"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = True
    features: FeatureSpec = FeatureSpec()

    def learns_across_calls(self) -> bool:
        return self.learn

    def relearn(self, prompts, outputs) -> None:
        """A resumed benchmark journal: learn the outputs of the finished runs again, unless
        the datastore is a file that kept them (autosaved)."""
        if self.learn and not (self.datastore.autosave and self.datastore.path is not None):
            self.observe(prompts, outputs)

    def params(self):
        return self.datastore.device_tables()

    def cap(self, batch: int) -> int:
        return self.caps[min(batch, len(self.caps)) - 1]

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        z = jnp.zeros((prompt_tokens.shape[0],), jnp.int32)
        return {"steps": z, "own": z, "datastore": z}

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        B = ctx.seq.shape[0]
        K = self.max_k
        ds_tok, ds_len, ds_order = datastore_draft(params, ctx.seq, ctx.seq_len, K,
                                                   self.max_order, self.min_order,
                                                   self.min_prob)
        if self.own_text:
            own_tok, own_len, _, own_match = suffix_draft(
                jnp.zeros((0,), jnp.int32), ctx.seq, ctx.seq_len, K, self.max_depth, 8, 1,
                0.1, 1.0)
            own = (own_len > 0) & ((own_match >= ds_order) | (ds_len == 0))
        else:
            own_tok, own_len, own = ds_tok, ds_len, jnp.zeros((B,), bool)
        tokens = jnp.where(own[:, None], own_tok, ds_tok)
        length = jnp.where(own, own_len, ds_len)
        n = jnp.where(ctx.live, jnp.minimum(jnp.minimum(k, length), self.cap(B)), 0)
        live = ctx.live.astype(jnp.int32)
        state = {"steps": state["steps"] + live,
                 "own": state["own"] + ((n > 0) & own),
                 "datastore": state["datastore"] + ((n > 0) & ~own)}
        return DraftTree.chain(tokens, n), state, ctx.target_cache

    def update(self, params, state, ctx, n_acc, tree, path, features):
        return state

    # host side, called by generate
    def stats(self, state) -> dict:
        """Per-row counters: steps, and the steps that drafted from the row's own text
        (``sssd_own``) and from the datastore (``sssd_datastore``)."""
        return {"sssd_steps": state["steps"], "sssd_own": state["own"],
                "sssd_datastore": state["datastore"]}

    def snapshot(self):
        return self.datastore.snapshot()

    def restore(self, snap):
        self.datastore.restore(snap)

    def observe(self, prompts, outputs):
        """After a batch: every output joins the datastore (and its file, if autosaved)."""
        if not self.learn:
            return
        for out in outputs:
            self.datastore.add(out)
        if self.datastore.autosave and self.datastore.path is not None:
            self.datastore.save()


def shipped_datastore(target_lm) -> Path | None:
    """The datastore shipped for ``target_lm`` (matched by vocabulary size and tokenizer), or
    None (an unreadable one is skipped with a warning)."""
    vocab, tok = target_ids(target_lm)
    return _documents.shipped_file(SHIPPED, ".sssd.npz", "meta", vocab, tok, "SSSD datastore")


def _resolve_datastore(cfg: SSSDConfig, target_lm) -> tuple[Datastore, str]:
    ds = cfg.datastore
    if isinstance(ds, str) and ds.strip().lower() in ("", "none"):
        ds = None
    fresh = dict(max_order=cfg.max_order, slots=cfg.slots or EMPTY_SLOTS)
    if isinstance(ds, Datastore):
        return ds, "this datastore"
    if ds is None:
        path = shipped_datastore(target_lm)
        if path is None:
            return Datastore(**fresh), "this datastore"
        return Datastore.load(path), str(path)
    if isinstance(ds, str) and ds.strip().lower() == "empty":
        return Datastore(**fresh), "this datastore"
    path = Path(ds)
    if path.is_dir():
        tok = getattr(target_lm, "tokenizer", None)
        sha = None
        if tok is not None:
            from specjax.tokenizer import tokenizer_sha256

            sha = tokenizer_sha256(tok)
        return Datastore.from_corpus(path, tokenizer_sha256=sha, max_order=cfg.max_order,
                                     slots=cfg.slots or CORPUS_SLOTS), str(path)
    if path.exists():
        return Datastore.load(path, autosave=True), str(path)
    return Datastore(path=path, autosave=True, **fresh), str(path)


@DRAFTERS.register("sssd", config=SSSDConfig,
                   doc="n-grams of the request and of a growing datastore, with a speculation "
                       "budget from the machine's verify-cost curve (model-free)")
def make_sssd(cfg: SSSDConfig, target_lm) -> SSSDDrafter:
    ds, where = _resolve_datastore(cfg, target_lm)
    vocab, tok = target_ids(target_lm)
    ds.bind(vocab, tok, where)
    if cfg.min_order > ds.max_order:
        raise DrafterError(f"sssd: min_order ({cfg.min_order}) exceeds the datastore's "
                           f"max_order ({ds.max_order}, {where}): it would never draft")
    if math.isinf(cfg.budget_tol):
        caps = (cfg.k,)
    else:
        from specjax import cost_curves

        cost = cost_curves.measured_cost(target_lm, min(cfg.k, 16), 1)
        caps = flat_budget(cost, float(cfg.budget_tol), cfg.k)
    return SSSDDrafter(max_k=cfg.k, max_order=ds.max_order, min_order=cfg.min_order,
                       min_prob=float(cfg.min_prob), max_depth=cfg.max_depth, caps=caps,
                       learn=cfg.learn, datastore=ds)


__all__ = ["Datastore", "SSSDConfig", "SSSDDrafter", "build_tables", "context_hash",
           "datastore_draft", "order_hashes", "flat_budget", "shipped_datastore"]
