"""STAND (Song et al., 2025; card C18): stochastic n-gram drafting from stored distributions.

Where prompt lookup stores which token followed an n-gram, STAND stores *the target's
distribution* after it: for every context of 1..``order`` tokens seen in the text (the prompt
and everything committed since), the ``width`` most likely next tokens with their
probabilities, averaged over the context's occurrences. A step looks up the longest stored
context ending at the pending token and *samples* the draft from that distribution (when
sampling), so the draft distribution ``q`` resembles the target's ``p`` and the lossless rule
accepts with ``min(1, p/q)`` more often than a one-hot draft would; trees draw siblings without
replacement (Gumbel-top-k from the same ``q``) and are verified with the recursive rule
(:func:`specjax.verify.sampling_tree_verify`), chains with standard speculative sampling.
Greedy decoding drafts the stored distribution's most likely tokens.

Where the distributions come from: the target's own top-``width`` probabilities at every
prompt position (the prefill) and at every committed position of each step (the verify pass
computes them anyway: :class:`specjax.features.FeatureSpec` ``top_probs``), at temperature 1.
A draft at temperature ``T`` samples ``q(x) ∝ w(x) ** (1 / T)`` over the stored ids (the
target's temperature-``T`` law restricted to them, when ``w`` is exact).

Tables (inside the compiled loop, static shapes): per order ``o = 1..order`` a hash table of
``buckets`` entries holding the context (checked on look-up, so a collision never drafts
from another context), ``width`` ids, their weights and an occurrence count. An update merges
the new distribution into the stored one as a running mean over the last ``window``
occurrences (``w <- (1 - a) w + a p``, ``a = 1 / min(count + 1, window)``), keeping the
``width`` heaviest ids of the union; a colliding context replaces the entry. When one update
holds several occurrences of a bucket, the latest wins.

``share="batch"`` (the default) keeps one table for the whole batch: the N samples of one
question decoded as N rows (best-of-N, self-consistency) draft from each other's text, which
is what the method is for. ``share="row"`` keeps one per row (memory times the batch). The
drafts of a row then depend on the other rows, which does not touch losslessness: a draft
may come from anywhere as long as the verifier knows the distribution it was drawn from.
``memory`` carries the tables from one batch to the next, so N samples of one question decoded
one after another (``batch_size`` < N) teach each other too: ``call`` (the default with
``share=batch``) within one ``generate`` call, fresh tables at the start of each call;
``keep`` across calls in this process; a file path across processes (saved after every batch,
loaded on the next build); ``none``: fresh tables for every batch (the default with
``share=row``, whose rows change between batches).

Memory: ``order * buckets * (order + 2 * width + 1) * 4`` bytes per table (``order=3,
buckets=65536, width=8``: 14.2 MB); a configuration past ``max_table_mb`` (default 1024) is
refused.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from specjax.atomic import replacing
from specjax.drafters import _documents
from specjax.drafters._chain import call_stop, keep_q, stop_carry0
from specjax.drafters.base import DRAFTERS, StepContext, check_k, target_ids, tree_field
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.policies.base import DraftStep
from specjax.rng import Stream, stream_keys
from specjax.tree import DraftTree, TreeSpec, static_topology

FORMAT = "specjax-stand-tables"
VERSION = 1
_MIX = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1, 0xD3A2646C, 0xFD7046C5,
        0xB55A4F09)


def table_bytes(order: int, buckets: int, width: int, groups: int = 1) -> int:
    """Bytes of the tables: per order and bucket, the context, ids, weights and a count."""
    return groups * order * buckets * (order + 2 * width + 1) * 4


def empty_tables(groups: int, order: int, buckets: int, width: int) -> dict:
    shape = (groups, order, buckets)
    return {"ctx": jnp.full(shape + (order,), -1, jnp.int32),
            "ids": jnp.zeros(shape + (width,), jnp.int32),
            "w": jnp.zeros(shape + (width,), jnp.float32),
            "count": jnp.zeros(shape, jnp.int32)}


def bucket_of(rev: jax.Array, buckets: int) -> jax.Array:
    """``rev[..., order]`` (newest token first) -> ``int32[..., order]``: the bucket of the
    context of every order ``o`` (its ``o`` newest tokens)."""
    r = rev.astype(jnp.uint32)
    mix = jnp.asarray(_MIX[:rev.shape[-1]], jnp.uint32)
    h = jnp.cumsum(r * mix, axis=-1, dtype=jnp.uint32)  # order o: the sum of the first o terms
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x2C1B3C6D)
    h = h ^ (h >> 12)
    return (h % jnp.uint32(buckets)).astype(jnp.int32)


def lookup(tables: dict, group: jax.Array, rev: jax.Array):
    """The stored distribution after the longest stored context of ``rev[B, M, order]``
    (newest token first; -1 where the text is shorter). Returns ``(ids[B, M, W], w[B, M, W],
    found[B, M])`` (``w`` zero where nothing matched)."""
    G, O, H, _ = tables["ctx"].shape
    h = bucket_of(rev, H)  # [B, M, O]
    g = group[:, None, None]
    o = jnp.arange(O)[None, None, :]
    ctx = tables["ctx"][g, o, h]  # [B, M, O, O]
    upto = jnp.arange(O)[None, :] <= jnp.arange(O)[:, None]  # [order o, position j]: j <= o
    same = jnp.all(jnp.where(upto, ctx == rev[:, :, None, :], True), axis=-1)
    hit = same & (tables["count"][g, o, h] > 0) & jnp.all(
        jnp.where(upto, rev[:, :, None, :] >= 0, True), axis=-1)  # [B, M, O]
    best = O - 1 - jnp.argmax(hit[..., ::-1], axis=-1)  # the longest hit
    found = jnp.any(hit, axis=-1)
    hb = jnp.take_along_axis(h, best[..., None], axis=-1)[..., 0]
    ids = tables["ids"][group[:, None], best, hb]
    w = jnp.where(found[..., None], tables["w"][group[:, None], best, hb], 0.0)
    return ids, w, found


def _latest_per_key(key: jax.Array, valid: jax.Array) -> jax.Array:
    """``valid`` and no later valid entry (in flattened order) has the same ``key`` (1-D)."""
    n = key.shape[0]
    k = jnp.where(valid, key, jnp.iinfo(jnp.int32).max)
    order = jnp.lexsort((jnp.arange(n), k))  # by key, then position
    ks = k[order]
    last = jnp.concatenate([ks[1:] != ks[:-1], jnp.ones((1,), bool)])
    keep_sorted = last & valid[order]
    return jnp.zeros((n,), bool).at[order].set(keep_sorted)


def merge(old_ids, old_w, new_ids, new_w, a):
    """Running mean ``(1 - a) old + a new`` of two sparse distributions (``[..., W]`` ids and
    weights; ``a[...]``), keeping the ``W`` heaviest ids of the union (ids unique)."""
    W = old_ids.shape[-1]
    ids = jnp.concatenate([old_ids, new_ids], axis=-1)
    w = jnp.concatenate([old_w * (1 - a)[..., None], new_w * a[..., None]], axis=-1)
    same = ids[..., :, None] == ids[..., None, :]  # [..., 2W, 2W]
    total = jnp.sum(jnp.where(same, w[..., None, :], 0.0), axis=-1)
    earlier = jnp.tril(jnp.ones((2 * W, 2 * W), bool), -1)
    first = ~jnp.any(same & earlier, axis=-1)
    score = jnp.where(first & (total > 0), total, -1.0)
    top, idx = jax.lax.top_k(score, W)
    return jnp.take_along_axis(ids, idx, axis=-1), jnp.maximum(top, 0.0)


def record(tables: dict, group: jax.Array, rev: jax.Array, top_ids: jax.Array,
           top_probs: jax.Array, valid: jax.Array, window: int) -> dict:
    """Merges the next-token distributions ``top_ids/top_probs[B, T, W]`` observed after the
    contexts ``rev[B, T, order]`` (newest first) into every order's table where ``valid``."""
    G, O, H, _ = tables["ctx"].shape
    B, T, _ = rev.shape
    h = bucket_of(rev, H)  # [B, T, O]
    upto = jnp.arange(O)[None, :] <= jnp.arange(O)[:, None]
    full = jnp.all(jnp.where(upto[None, None], rev[:, :, None, :] >= 0, True), axis=-1)
    ok = valid[:, :, None] & full  # [B, T, O]: the context of order o exists
    g = jnp.broadcast_to(group[:, None, None], h.shape)
    o = jnp.broadcast_to(jnp.arange(O)[None, None], h.shape)
    flat = ((g * O + o) * H + h).reshape(-1)
    keep = _latest_per_key(flat, ok.reshape(-1)).reshape(h.shape)
    ctx_new = jnp.where(upto[None, None], rev[:, :, None, :], -1)  # [B, T, O, O]
    old_ctx = tables["ctx"][g, o, h]
    same = jnp.all(old_ctx == ctx_new, axis=-1)
    count = jnp.where(same, tables["count"][g, o, h], 0)
    a = 1.0 / jnp.minimum(count + 1, window).astype(jnp.float32)
    ids, w = merge(tables["ids"][g, o, h], tables["w"][g, o, h],
                   jnp.broadcast_to(top_ids[:, :, None], h.shape + top_ids.shape[-1:]),
                   jnp.broadcast_to(top_probs[:, :, None], h.shape + top_ids.shape[-1:]), a)
    hs = jnp.where(keep, h, H)  # out of range: dropped
    put = lambda name, v: tables[name].at[g, o, hs].set(v, mode="drop")  # noqa: E731
    return {"ctx": put("ctx", ctx_new), "ids": put("ids", ids), "w": put("w", w),
            "count": put("count", jnp.minimum(count + 1, jnp.iinfo(jnp.int32).max - 1))}


def reversed_context(seq: jax.Array, end: jax.Array, order: int) -> jax.Array:
    """``rev[B, T, order]``: for every ``end[B, T]`` index into ``seq[B, L]``, the tokens
    ``seq[end], seq[end - 1], ...`` (-1 before the start)."""
    B, T = end.shape
    at = end[..., None] - jnp.arange(order)  # [B, T, order]
    vals = jnp.take_along_axis(seq, jnp.clip(at, 0, seq.shape[1] - 1).reshape(B, -1), axis=1)
    return jnp.where(at >= 0, vals.reshape(at.shape), -1)


@dataclasses.dataclass(eq=False)
class StandMemory:
    """The tables a ``stand`` drafter carries from one batch to the next: host copies,
    replaced after every batch; forgotten at the start of each ``generate`` call when
    ``per_call``; saved to ``path`` when set."""

    order: int
    buckets: int
    width: int
    vocab_size: int
    tokenizer: str | None = None
    path: Path | None = None
    tables: dict | None = None
    batches: int = 0
    per_call: bool = False

    def header(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "order": self.order,
                "buckets": self.buckets, "width": self.width, "vocab_size": self.vocab_size,
                "tokenizer": self.tokenizer, "batches": self.batches}

    def save(self, path: Path | None = None) -> Path:
        path = Path(path or self.path)
        if self.tables is None:
            raise DrafterError("stand: nothing to save yet (no batch has been decoded)")
        with replacing(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, header=np.frombuffer(json.dumps(self.header()).encode(), np.uint8),
                         **{k: np.asarray(v) for k, v in self.tables.items()})
        return path

    @classmethod
    def load(cls, path: Path, order: int, buckets: int, width: int, vocab_size: int,
             tokenizer: str | None) -> "StandMemory":
        path = Path(path)
        header, arrays = _documents.read_tables(
            path, "stand", "STAND table file", FORMAT, VERSION, ("ctx", "ids", "w", "count"),
            {"order": order, "buckets": buckets, "width": width, "vocab_size": vocab_size},
            tokenizer, "its n-grams mean nothing for this target")
        shapes = {"ctx": (1, order, buckets, order), "ids": (1, order, buckets, width),
                  "w": (1, order, buckets, width), "count": (1, order, buckets)}
        for k, s in shapes.items():
            if arrays[k].shape != s:
                raise DrafterError(f"stand: {path}: array {k!r} has shape {arrays[k].shape}, "
                                   f"expected {s} (truncated or corrupt)")
        ids, w = arrays["ids"], arrays["w"]
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size) or not np.all(
                np.isfinite(w)) or (w < 0).any():
            raise DrafterError(f"stand: {path}: token ids outside the vocabulary, negative or "
                               "non-finite weights (corrupt)")
        used = arrays["count"] > 0
        # an entry in use holds distinct ids with positive weight (drafts without replacement
        # over entries are draws without replacement over tokens only then)
        tagged = np.where(w > 0, ids, -1 - np.arange(width))
        srt = np.sort(tagged, axis=-1)
        dup = (srt[..., 1:] == srt[..., :-1]).any(axis=-1)
        empty = ~(w > 0).any(axis=-1)
        if (used & (dup | empty)).any():
            raise DrafterError(f"stand: {path}: an entry holds a token twice or no positive "
                               "weight (corrupt)")
        return cls(order, buckets, width, vocab_size, tokenizer, path,
                   {k: np.asarray(v) for k, v in arrays.items()}, int(header.get("batches", 0)))


@dataclasses.dataclass(frozen=True)
class StandConfig:
    """Options of ``stand``."""

    k: int = dataclasses.field(default=3, metadata={"help": "maximum draft depth"})
    order: int = dataclasses.field(default=3, metadata={
        "help": "longest context (tokens) of the n-gram tables; the look-up backs off to "
                "shorter ones"})
    width: int = dataclasses.field(default=8, metadata={
        "help": "next-token candidates stored per context (the target's top ids)"})
    buckets: int = dataclasses.field(default=65536, metadata={
        "help": "hash buckets per order"})
    window: int = dataclasses.field(default=8, metadata={
        "help": "the stored distribution is the mean of a context's last ~window occurrences"})
    share: str = dataclasses.field(default="batch", metadata={
        "help": "batch: one table for all rows (N samples of one question learn from each "
                "other) | row: one per row"})
    memory: str | None = dataclasses.field(default=None, metadata={
        "help": "tables carried to the next batch: call (default with share=batch): within "
                "one generate call | keep: across calls in this process | FILE.npz: also "
                "saved there after every batch, loaded next time | none (default with "
                "share=row): fresh for every batch"})
    max_table_mb: float = dataclasses.field(default=1024.0, metadata={
        "help": "refuse tables larger than this (MB)"})
    tree: TreeSpec | None = tree_field(3)

    def __post_init__(self):
        check_k(self.k)
        for name, lo in (("order", 1), ("width", 1), ("buckets", 1), ("window", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise DrafterError(f"stand: {name} must be an integer >= {lo}, got {v!r}")
        if self.order > len(_MIX):
            raise DrafterError(f"stand: order must be at most {len(_MIX)}, got {self.order}")
        if self.buckets > 2 ** 30:
            raise DrafterError(f"stand: buckets must be at most 2**30, got {self.buckets}")
        if self.share not in ("batch", "row"):
            raise DrafterError(f"stand: share must be 'batch' or 'row', got {self.share!r}")


@dataclasses.dataclass(frozen=True)
class StandDrafter:
    max_k: int
    order: int
    width: int
    buckets: int
    window: int
    share: str
    vocab_size: int
    tree: TreeSpec | None = None
    # carried tables are an argument of the compiled loop (params), not part of it
    memory: StandMemory | None = dataclasses.field(default=None, compare=False, hash=False,
                                                   repr=False)
    name: str = "stand"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = False

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec(top_ids=self.width, top_probs=True)

    def params(self):
        if self.memory is None or self.memory.tables is None:
            return None
        return self.memory.tables

    def _groups(self, B: int) -> int:
        return 1 if self.share == "batch" else B

    def _group(self, B: int) -> jax.Array:
        return jnp.zeros((B,), jnp.int32) if self.share == "batch" else jnp.arange(B)

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B, P = prompt_tokens.shape
        if self._groups(B) * self.order * self.buckets >= 2 ** 31:
            raise DrafterError(f"stand: {self._groups(B)} tables x {self.order} orders x "
                               f"{self.buckets} buckets overflow int32 indices: lower buckets")
        tables = params if params is not None else empty_tables(
            self._groups(B), self.order, self.buckets, self.width)
        valid = jnp.arange(P)[None] < prompt_lens[:, None]
        rev = reversed_context(prompt_tokens, jnp.broadcast_to(jnp.arange(P)[None], (B, P)),
                               self.order)
        return record(tables, self._group(B), rev, features.top_ids, features.top_probs, valid,
                      self.window)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        parents, ranks, depth = static_topology(self.tree, self.max_k)
        N, O, V = len(parents), self.order, self.vocab_size
        B = ctx.seq.shape[0]
        group = self._group(B)
        root_rev = reversed_context(ctx.seq, (ctx.seq_len - 1)[:, None], O)[:, 0]  # [B, O]
        temp = jnp.float32(1.0) if greedy else ctx.temperature
        want_q = keep_q(greedy, ctx) or stop is not None
        k_rows = jnp.where(ctx.live, k, 0).astype(jnp.int32)
        toks = [None] * N
        ok = [None] * N  # drawn from a found distribution with positive weight
        qs = [None] * N
        score = [None] * N
        carry = stop_carry0(B)
        D = max(depth)
        for d in range(1, D + 1):
            level = [i for i in range(N) if depth[i] == d]
            fronts = sorted({parents[i] for i in level})  # -1: the root
            revs = []
            for f in fronts:  # the context of each expanded node: its path, then the text
                path = []
                u = f
                while u >= 0 and len(path) < O:
                    path.append(toks[u])
                    u = parents[u]
                tail = [root_rev[:, j] for j in range(O - len(path))]
                revs.append(jnp.stack(path + tail, axis=1))
            rev = jnp.stack(revs, axis=1)  # [B, F, O]
            ids, w, found = lookup(state, group, rev)
            logq = jnp.where(w > 0, jnp.log(jnp.maximum(w, 1e-30)) / temp[..., None], -jnp.inf)
            logq = logq - jax.nn.logsumexp(logq, axis=-1, keepdims=True)
            logq = jnp.where(found[..., None], logq, -jnp.inf)
            C = max(ranks[i] for i in level) + 1
            if greedy:
                noisy = logq
            else:
                keys = stream_keys(ctx.keys, Stream.GUMBEL, d)
                noisy = logq + jax.vmap(lambda kk: jax.random.gumbel(kk, logq.shape[1:]))(keys)
            pick = jax.lax.top_k(noisy, C)[1]  # [B, F, C]: draws without replacement
            q_small = jnp.exp(logq)  # [B, F, W]: what each expanded node's children come from
            q_front = None
            if want_q:  # over the vocabulary (the stored ids are distinct)
                q_front = jnp.zeros((B, len(fronts), V), jnp.float32).at[
                    jnp.arange(B)[:, None, None], jnp.arange(len(fronts))[None, :, None],
                    ids].add(q_small)
            for i in level:
                fi = fronts.index(parents[i])
                j = pick[:, fi, ranks[i]]
                toks[i] = jnp.take_along_axis(ids[:, fi], j[:, None], axis=1)[:, 0]
                lq = jnp.take_along_axis(logq[:, fi], j[:, None], axis=1)[:, 0]
                q_x = jnp.take_along_axis(q_small[:, fi], j[:, None], axis=1)[:, 0]
                par_ok = jnp.ones((B,), bool) if parents[i] < 0 else ok[parents[i]]
                ok[i] = par_ok & (q_x > 0)  # never a token the verifier sees with q = 0
                score[i] = (0.0 if parents[i] < 0 else score[parents[i]]) + jnp.where(
                    ok[i], lq, -jnp.inf)
                if want_q:
                    qs[i] = q_front[:, fi]
            if stop is not None:  # the policy sees the depth's best node
                lv = jnp.stack([score[i] for i in level], axis=1)
                best = jnp.argmax(lv, axis=1)
                b_tok = jnp.take_along_axis(jnp.stack([toks[i] for i in level], 1),
                                            best[:, None], axis=1)[:, 0]
                b_q = jnp.take_along_axis(jnp.stack([qs[i] for i in level], 1),
                                          best[:, None, None], axis=1)[:, 0]
                cut, carry, last = call_stop(stop, DraftStep(index=jnp.int32(d - 1), token=b_tok,
                                                             probs=b_q, carry=carry))
                k_rows = jnp.where(last & (d < k_rows), d, k_rows)
                k_rows = jnp.where(cut & (d <= k_rows), d - 1, k_rows)
            # nothing to draw from at this depth: the row drafts no deeper
            any_ok = jnp.any(jnp.stack([ok[i] for i in level], axis=1), axis=1)
            k_rows = jnp.where(~any_ok & (d <= k_rows), d - 1, k_rows)
        tokens = jnp.stack(toks, axis=1).astype(jnp.int32)
        dep = jnp.broadcast_to(jnp.asarray(depth, jnp.int32)[None], (B, N))
        valid = (dep <= k_rows[:, None]) & jnp.stack(ok, axis=1)
        parent = jnp.broadcast_to(jnp.asarray(parents, jnp.int32)[None], (B, N))
        q = jnp.stack(qs, axis=1) if keep_q(greedy, ctx) else None
        return DraftTree(tokens=tokens, parent=parent, depth=dep, valid=valid, q=q), state, \
            ctx.target_cache

    def update(self, params, state, ctx, n_acc, tree, path, features):
        B, D = path.shape
        # the step's root (its pending token) sat at the committed cache length, which grew
        # by n_acc + 1; seq grew by as much unless an accepted EOS cut the block short
        root_at = ctx.target_cache.lengths - 1 - n_acc
        at = root_at[:, None] + jnp.arange(D + 1)[None]
        rev = reversed_context(ctx.seq, at, self.order)
        # rows done before this step committed nothing; tokens past an EOS were not written
        valid = (jnp.arange(D + 1)[None] <= n_acc[:, None]) & (at < ctx.seq_len[:, None]) & (
            (root_at >= 0) & ctx.live)[:, None]
        return record(state, self._group(B), rev, features.top_ids, features.top_probs, valid,
                      self.window)

    def learns_across_calls(self) -> bool:
        """``memory=keep`` or a file: the tables of one call are the next one's start."""
        return self.memory is not None and not self.memory.per_call

    def relearn(self, prompts, outputs) -> None:
        """A resumed benchmark journal: the tables come from the target's features, which a
        journal does not keep; a file (``memory=FILE.npz``) kept them, ``memory=keep`` did
        not."""
        if self.learns_across_calls() and self.memory.path is None:
            raise DrafterError("stand with memory=keep: the tables carried between calls "
                               "cannot be rebuilt from a benchmark journal; use "
                               "memory=FILE.npz (kept on disk) or memory=call")

    def snapshot(self):
        """What the tables carried over hold now (the benchmark times a run from it again)."""
        m = self.memory
        return None if m is None else (m.tables, m.batches)

    def restore(self, snap) -> None:
        if self.memory is not None and snap is not None:
            self.memory.tables, self.memory.batches = snap

    def begin_call(self) -> None:
        """At the start of a ``generate`` call: ``memory=call`` starts from fresh tables."""
        if self.memory is not None and self.memory.per_call:
            self.memory.tables = None

    def carry_over(self, draft_state) -> None:
        """After a batch: keep the tables for the next one (``memory``), saved if a file."""
        if self.memory is None:
            return
        self.memory.tables = jax.device_get(draft_state)
        self.memory.batches += 1
        if self.memory.path is not None:
            self.memory.save()


@DRAFTERS.register("stand", config=StandConfig,
                   doc="the target's own next-token distributions per n-gram, drafted "
                       "stochastically (chains or Gumbel-top-k trees; model-free, lossless)")
def make_stand(cfg: StandConfig, target_lm) -> StandDrafter:
    tree = cfg.tree
    if tree is not None and tree.kind == "chain":
        tree = None
    if tree is not None and tree.kind != "fixed":
        raise DrafterError(f"stand drafts chains or static trees (fixed:<choices> or "
                           f"levels:<widths>); got {tree.kind!r}")
    if tree is not None and tree.sibling != "wor":
        raise DrafterError("stand draws siblings without replacement (Gumbel-top-k): the "
                           "tree's sibling rule must be 'wor', not 'iid'")
    if tree is not None:
        _, ranks, _ = static_topology(tree, cfg.k)
        if max(ranks) >= cfg.width:
            raise DrafterError(f"stand: the tree gives a node {max(ranks) + 1} children, more "
                               f"than the {cfg.width} candidates stored per context (width)")
    vocab, tok = target_ids(target_lm)
    mb = table_bytes(cfg.order, cfg.buckets, cfg.width) / 2 ** 20
    if mb > cfg.max_table_mb:
        raise DrafterError(f"stand: order={cfg.order}, buckets={cfg.buckets}, width={cfg.width} "
                           f"make tables of {mb:.0f} MB per group (per batch, or per row with "
                           f"share=row), over max_table_mb={cfg.max_table_mb:g}: lower buckets "
                           "or width")
    memory = cfg.memory
    if memory is None:
        memory = "call" if cfg.share == "batch" else "none"
    if isinstance(memory, str) and memory.strip().lower() in ("", "none"):
        memory = None
    if memory is not None:
        if cfg.share != "batch":
            raise DrafterError("stand: memory carries one table from batch to batch; it needs "
                               "share=batch (a per-row table's rows change between batches)")
        mode = memory.strip().lower() if isinstance(memory, str) else None
        if isinstance(memory, StandMemory):
            pass
        elif mode in ("keep", "call"):
            memory = StandMemory(cfg.order, cfg.buckets, cfg.width, vocab, tok,
                                 per_call=mode == "call")
        else:
            path = Path(memory)
            memory = (StandMemory.load(path, cfg.order, cfg.buckets, cfg.width, vocab, tok)
                      if path.exists() else
                      StandMemory(cfg.order, cfg.buckets, cfg.width, vocab, tok, path=path))
    return StandDrafter(max_k=cfg.k if tree is None else tree.depth, order=cfg.order,
                        width=cfg.width, buckets=cfg.buckets, window=cfg.window,
                        share=cfg.share, vocab_size=vocab, tree=tree, memory=memory)
