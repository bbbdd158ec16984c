"""Drafting a tree level by level through a draft network, inside the compiled loop.

Also :func:`run_if`, the zero-or-one-trip loop every "maybe run this step" piece of the loop
uses instead of ``lax.cond``."""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from specjax.cache import KVCache
from specjax.drafters._chain import call_stop, stop_carry0
from specjax.drafters.base import StepContext
from specjax.policies.base import DraftStep
from specjax.rng import Stream, stream_keys
from specjax.sampling import process_logits
from specjax.tree import DraftTree, TreeSpec, node_depths


def _gumbel(key_data, step: int, shape):
    keys = stream_keys(key_data, Stream.GUMBEL, step)
    return jax.vmap(lambda k: jax.random.gumbel(k, shape))(keys)


def _level_plan(spec: TreeSpec):
    """Static per-depth plan of a tree's drafting.

    Returns a list over depths ``d = 1..D`` of dicts: ``frontier`` (size of the set of nodes of
    depth ``d - 1`` that get children; the root for ``d = 1``), ``fed`` (how many nodes of
    depth ``d`` are fed through the drafter to expand depth ``d + 1``), ``slot0`` (scratch slot
    of the first fed node of depth ``d``; the root is slot 0), and for fixed trees the node
    range, each node's frontier position and sibling rank.
    """
    D = spec.depth
    plan = []
    if spec.kind == "fixed":
        parents = spec.parents
        depths = node_depths(parents)
        has_child = {p for p in parents if p >= 0}
        slot = 1
        prev_front = [-1]
        for d in range(1, D + 1):
            nodes = [i for i in range(len(parents)) if depths[i] == d]
            fpos = [prev_front.index(parents[i]) for i in nodes]
            rank, seen = [], {}
            for i in nodes:
                rank.append(seen.get(parents[i], 0))
                seen[parents[i]] = rank[-1] + 1
            front = [i for i in nodes if i in has_child]
            plan.append(dict(start=nodes[0], stop=nodes[-1] + 1, fpos=fpos, rank=rank,
                             cmax=max(rank) + 1, frontier=len(prev_front), fed_nodes=front,
                             fed=len(front), slot0=slot))
            slot += len(front)
            prev_front = front
        return plan, slot
    W = spec.width
    slot = 1
    for d in range(1, D + 1):
        fed = W if d < D else 0
        plan.append(dict(frontier=1 if d == 1 else W, fed=fed, slot0=slot))
        slot += fed
    return plan, slot


def run_if(pred, fn: Callable, default, cache):
    """``fn(cache) -> (out, cache)`` if ``pred`` else ``(default, cache)``.

    A ``while_loop`` of zero or one trip rather than ``lax.cond``: XLA updates a loop's
    carried cache in place, while a conditional whose branch writes the cache copies every
    layer's buffer into and out of the branch on every call."""
    def body(c):
        _, out, cache = c
        out, cache = fn(cache)
        return jnp.bool_(False), out, cache

    _, out, cache = jax.lax.while_loop(lambda c: c[0], body,
                                       (jnp.asarray(pred, bool), default, cache))
    return out, cache


def append_pending(state, live, value, flush: Callable, buf: str = "pend",
                   count: str = "pend_n"):
    """An idle step's bookkeeping for a head that defers its prefix pass (EAGLE, Hydra++):
    ``value`` ([B, h], the committed token's feature) joins each live row's pending buffer
    ``state.<buf>`` ([B, P, h], ``state.<count>`` filled). If a live row's buffer is already
    full, ``flush(state)`` (which must empty it) runs first, once for the whole batch."""
    pend, n = getattr(state, buf), getattr(state, count)
    B, P = pend.shape[:2]
    _, state = run_if(jnp.any(live & (n >= P)), lambda st: ((), flush(st)), (), state)
    pend, n = getattr(state, buf), getattr(state, count)
    slot = jnp.where(live, n, P)  # out of range: dropped
    return dataclasses.replace(state, **{
        buf: pend.at[jnp.arange(B), slot].set(value.astype(pend.dtype), mode="drop"),
        count: n + live})


def draft_tree_or_nothing(draft_fn: Callable, cache: KVCache, spec: TreeSpec, kmax, greedy,
                          vocab: int):
    """Runs ``draft_fn(cache) -> (DraftTree, cache)`` unless no row drafts (``kmax == 0``),
    in which case an empty tree comes back at no cost."""
    B, N = cache.lengths.shape[0], spec.num_nodes
    z = jnp.zeros((B, N), jnp.int32)
    stochastic = (not greedy) and spec.kind == "fixed"
    empty = DraftTree(tokens=z, parent=z - 1, depth=z + 1, valid=z > 0,
                      q=jnp.zeros((B, N, vocab), jnp.float32) if stochastic else None,
                      slot=z - 1)
    return run_if(kmax > 0, draft_fn, empty, cache)


def tree_draft(run: Callable, root_logits, cache: KVCache, spec: TreeSpec, ctx: StepContext,
               greedy: bool, kmax, k_rows, vocab: int, stop: Callable | None = None,
               root_hidden: jax.Array | None = None):
    """Drafts a tree level by level through a draft network (pure, inside the loop).

    ``run(tokens[B, T], positions[B, T], cache, offset, mask[B, T, W]) -> (logits[B, T, V],
    cache)`` feeds the nodes of one depth, written at scratch slots ``offset + [0, T)`` past
    the root (``cache.lengths`` is the root's slot), each seeing the committed prefix and the
    scratch slots ``mask`` allows (its ancestors and itself). ``root_logits[B, V]`` are the
    draft network's logits at the pending token. Depths beyond ``kmax`` (traced) are not fed;
    nodes deeper than ``k_rows[b]`` are invalid.

    ``root_hidden[B, H]`` (feature drafters such as EAGLE): each fed node also gets its
    parent's output hidden state, ``run(tokens, positions, cache, offset, mask, feats[B, T, H])
    -> (logits, cache, hidden[B, T, H])``; the root's is ``root_hidden``.

    ``stop(DraftStep) -> bool[B]`` (a policy's mid-draft hook, or None) sees each depth's best
    candidate (highest cumulative log-probability) with the distribution of its parent; a row
    for which it is True keeps no node of that depth or deeper.

    Children are the top-k of the draft distribution when greedy or when the tree chooses them
    deterministically (``topk`` / ``dynamic``, verified with the deterministic-candidate rule);
    ``fixed`` trees draw siblings without replacement (Gumbel-top-k) or independently
    (``sibling="iid"``) when sampling and record the distributions they were drawn from.

    Returns ``(DraftTree, cache)``.
    """
    B = root_logits.shape[0]
    plan, n_slots = _level_plan(spec)
    n = cache.lengths
    stochastic = (not greedy) and spec.kind == "fixed"

    def logp(logits):
        if greedy:
            return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return process_logits(logits, ctx.temperature, ctx.top_k, ctx.top_p)

    # frontier state: log-probs [B, F, V], cumulative scores [B, F], ancestor-slot rows
    # [B, F, n_slots], candidate/node id [B, F]
    f_lp = logp(root_logits)[:, None]
    f_score = jnp.zeros((B, 1), jnp.float32)
    f_anc = jnp.zeros((B, 1, n_slots), bool).at[:, :, 0].set(True)
    f_id = jnp.full((B, 1), -1, jnp.int32)
    f_hid = None if root_hidden is None else root_hidden[:, None]  # [B, F, H]
    rows = jnp.arange(B)[:, None]
    cands = []  # per depth: that depth's candidates
    next_id = 0
    carry = stop_carry0(B)  # the stop rule's running value (see specjax.policies.base)
    for d, lv in enumerate(plan, start=1):
        F = f_lp.shape[1]
        if spec.kind == "fixed":
            C = lv["cmax"]
            if stochastic and spec.sibling == "iid":
                keys = stream_keys(ctx.keys, Stream.SIBLING_DRAWS, d)
                ch = jax.vmap(lambda k, l: jax.random.categorical(k, l, shape=(C, F)).T)(
                    keys, f_lp)  # [B, F, C] independent draws
            else:  # top-C, or Gumbel-top-C = C draws without replacement
                noisy = f_lp + _gumbel(ctx.keys, d, f_lp.shape[1:]) if stochastic else f_lp
                ch = jax.lax.top_k(noisy, C)[1]
            fpos = jnp.asarray(lv["fpos"], jnp.int32)
            parent_pos = jnp.broadcast_to(fpos[None], (B, fpos.shape[0]))
            tok = ch[:, fpos, jnp.asarray(lv["rank"], jnp.int32)].astype(jnp.int32)
            par = f_id[:, fpos]
            lp_tok = jnp.take_along_axis(f_lp[:, fpos], tok[..., None], axis=-1)[..., 0]
            score = f_score[:, fpos] + lp_tok
            anc_par = f_anc[:, fpos]
            q_lv = jnp.exp(f_lp[:, fpos]) if stochastic else None
            ids = jnp.broadcast_to(jnp.arange(lv["start"], lv["stop"], dtype=jnp.int32)[None],
                                   tok.shape)
            sel = jnp.broadcast_to(jnp.asarray(
                [i - lv["start"] for i in lv["fed_nodes"]], jnp.int32)[None], (B, lv["fed"]))
        else:
            W = spec.width
            top_lp, top_tok = jax.lax.top_k(f_lp, W)  # [B, F, W]
            tok = top_tok.reshape(B, F * W).astype(jnp.int32)
            score = (f_score[:, :, None] + top_lp).reshape(B, F * W)
            fidx = jnp.repeat(jnp.arange(F, dtype=jnp.int32), W)
            parent_pos = jnp.broadcast_to(fidx[None], (B, F * W))
            par = f_id[:, fidx]
            anc_par = f_anc[:, fidx]
            q_lv = None
            ids = jnp.broadcast_to(next_id + jnp.arange(F * W, dtype=jnp.int32)[None], tok.shape)
            # this depth's frontier: its W best candidates (ties: lower index first)
            sel = jax.lax.top_k(score, W)[1].astype(jnp.int32)
        next_id += tok.shape[1]
        if stop is not None:
            best = jnp.argmax(score, axis=1)
            b_tok = jnp.take_along_axis(tok, best[:, None], axis=1)[:, 0]
            b_par = jnp.take_along_axis(parent_pos, best[:, None], axis=1)[:, 0]
            b_probs = jnp.exp(jnp.take_along_axis(f_lp, b_par[:, None, None], axis=1)[:, 0])
            b_hid = (None if f_hid is None else
                     jnp.take_along_axis(f_hid, b_par[:, None, None], axis=1)[:, 0])
            cut, carry, last = call_stop(stop, DraftStep(index=jnp.int32(d - 1), token=b_tok,
                                                         probs=b_probs, hidden=b_hid,
                                                         carry=carry))
            k_rows = jnp.where(last & (d < k_rows), d, k_rows)
            k_rows = jnp.where(cut & (d <= k_rows), d - 1, k_rows)
            kmax = jnp.max(k_rows)
        depth_ok = (d <= k_rows)[:, None]
        chosen = jnp.zeros(tok.shape, bool).at[rows, sel].set(True)
        slot = jnp.full(tok.shape, -1, jnp.int32)
        if lv["fed"]:
            T = lv["fed"]
            slots = lv["slot0"] + jnp.arange(T, dtype=jnp.int32)
            slot = slot.at[rows, sel].set(slots[None])
            f_tok = jnp.take_along_axis(tok, sel, axis=1)
            f_score = jnp.take_along_axis(score, sel, axis=1)
            f_id = jnp.take_along_axis(ids, sel, axis=1)
            f_anc = jnp.take_along_axis(anc_par, sel[..., None], axis=1) | (
                jnp.arange(n_slots)[None, None, :] == slots[None, :, None])
            pos = jnp.broadcast_to((n + d)[:, None], (B, T))

            if f_hid is None:
                def feed(c, f_tok=f_tok, pos=pos, f_anc=f_anc, off=lv["slot0"]):
                    logits, c = run(f_tok, pos, c, off, f_anc)
                    return logp(logits), c

                f_lp, cache = run_if(d < kmax, feed, jnp.zeros((B, T, vocab), jnp.float32),
                                     cache)
            else:  # each fed node reads its parent's output hidden state
                par_sel = jnp.take_along_axis(parent_pos, sel, axis=1)
                feats = jnp.take_along_axis(f_hid, par_sel[..., None], axis=1)

                def feed(c, f_tok=f_tok, pos=pos, f_anc=f_anc, off=lv["slot0"], feats=feats):
                    logits, c, hid = run(f_tok, pos, c, off, f_anc, feats)
                    return (logp(logits), hid), c

                (f_lp, f_hid), cache = run_if(
                    d < kmax, feed, (jnp.zeros((B, T, vocab), jnp.float32),
                                     jnp.zeros((B, T, f_hid.shape[-1]), jnp.float32)), cache)
        cands.append(dict(tok=tok, par=par, score=jnp.where(depth_ok, score, -jnp.inf),
                          ids=ids, slot=slot, chosen=chosen, q=q_lv,
                          depth=jnp.full(tok.shape, d, jnp.int32)))

    cat = {key: jnp.concatenate([c[key] for c in cands], axis=1)
           for key in ("tok", "par", "score", "ids", "slot", "chosen", "depth")}
    if spec.kind == "fixed":
        q = jnp.concatenate([c["q"] for c in cands], axis=1) if stochastic else None
        tree = DraftTree(tokens=cat["tok"], parent=cat["par"], depth=cat["depth"],
                         valid=cat["depth"] <= k_rows[:, None], q=q, slot=cat["slot"])
        return tree, cache
    if spec.kind == "topk":
        # the tree = every depth's W best candidates (D * W nodes)
        order = jax.lax.top_k(cat["chosen"].astype(jnp.int32), spec.num_nodes)[1]
    else:
        # EAGLE-2 rerank: the N best candidates overall (ancestors score at least as high as
        # their descendants and come first on ties, so the selection is ancestor-closed)
        order = jax.lax.top_k(cat["score"], spec.nodes)[1]
    order = jnp.sort(order, axis=1).astype(jnp.int32)  # candidate order is breadth-first
    g = lambda a: jnp.take_along_axis(a, order, axis=1)  # noqa: E731
    ids, par = g(cat["ids"]), g(cat["par"])
    # parent candidate id -> node index within the selection (ids are sorted)
    pidx = jax.vmap(jnp.searchsorted)(ids, par).astype(jnp.int32)
    depth = g(cat["depth"])
    tree = DraftTree(tokens=g(cat["tok"]), parent=jnp.where(par < 0, -1, pidx), depth=depth,
                     valid=depth <= k_rows[:, None], q=None, slot=g(cat["slot"]))
    return tree, cache
