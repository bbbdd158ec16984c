"""The drafter protocol, the per-step context it sees, and a registry by name.

A drafter is a frozen, hashable object (it is a static argument of the compiled loop); the
arrays it needs (a draft model's weights) are returned by :meth:`Drafter.params` and passed
into the jit separately. Inside the loop it is called as::

    state = drafter.init(params, target, prompt_tokens, prompt_lens, cache_len)
    tree, state, target_cache = drafter.propose(params, target, state, ctx, k, greedy)
    state = drafter.update(params, state, ctx_after, n_acc, tree, path)

``propose`` returns a :class:`specjax.tree.DraftTree` (a chain is the one-branch tree) with
at most ``k[b]`` levels per row; ``update`` gets the accepted count and path (node indices,
root to leaf) of each row.

``propose`` may write scratch entries into the target cache past its committed length
(self-speculative drafters draft through the target's own layers); it returns that cache so
the verify pass, which overwrites the scratch, does not force a copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from specjax.cache import KVCache
from specjax.sampling import process_logits
from specjax.tree import DraftTree, TreeSpec, node_depths
from specjax.errors import DrafterError  # noqa: F401  (re-exported)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a drafter may read at the start of a step.

    Attributes:
      seq: ``int32[B, L]`` every token of each row so far: prompt, committed output and the
        pending token (the newest, not yet in the target cache).
      seq_len: ``int32[B]`` valid tokens in ``seq``; the pending token is ``seq[b, seq_len-1]``.
      target_cache: the target KV cache; its committed length is ``seq_len - 1``.
      keys: ``uint32[B, 2]`` fresh raw PRNG keys for this step, one per row.
      live: ``bool[B]`` rows still generating.
      temperature, top_k, top_p: sampling parameters (traced scalars).
    """

    seq: jax.Array
    seq_len: jax.Array
    target_cache: KVCache
    keys: jax.Array
    live: jax.Array
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array

    @property
    def pending(self) -> jax.Array:
        return jnp.take_along_axis(self.seq, (self.seq_len - 1)[:, None], axis=1)[:, 0]


class Drafter(Protocol):
    name: str
    max_k: int  # maximum draft length (tree depth)
    deterministic: bool  # proposals are a function of the context (q = one-hot)
    tree: TreeSpec | None  # None: a chain of max_k tokens

    def params(self) -> Any: ...

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len: int) -> Any: ...

    def propose(self, params, target, state, ctx: StepContext, k: jax.Array, greedy: bool
                ) -> tuple[DraftTree, Any, KVCache]: ...

    def update(self, params, state, ctx: StepContext, n_acc: jax.Array, tree: DraftTree,
               path: jax.Array) -> Any: ...


def tree_spec(drafter) -> TreeSpec:
    """The drafter's static tree shape (a chain of ``max_k`` tokens unless it drafts trees)."""
    t = getattr(drafter, "tree", None)
    return t if t is not None else TreeSpec.chain(drafter.max_k)


def check_tree_option(tree, k: int, width: int = 0, nodes: int = 0,
                      sibling: str = "wor") -> TreeSpec | None:
    """Normalises a drafter's ``tree=`` option (a :class:`TreeSpec`, a string for
    :func:`specjax.tree.parse_tree` with ``k`` as the default depth and ``width`` / ``nodes``
    overriding the defaults when > 0, or None) to None for chains or a TreeSpec."""
    from specjax.tree import TreeError, parse_tree

    if tree is None:
        return None
    try:
        spec = tree if isinstance(tree, TreeSpec) else parse_tree(
            tree, k=k, width=width or None, nodes=nodes or None, sibling=sibling)
    except TreeError as e:
        raise DrafterError(str(e)) from None
    return None if spec.kind == "chain" and spec.depth == k else spec


# ----------------------------------------------------------------------------- helpers


def pick_token(logits, key_data, step: int, greedy: bool, temperature, top_k, top_p):
    """Draft token (and its processed distribution when sampling) from ``logits[B, V]``."""
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), None
    lp = process_logits(logits, temperature, top_k, top_p)
    keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k), 1000 + step)
                    )(key_data)
    tok = jax.vmap(jax.random.categorical)(keys, lp).astype(jnp.int32)
    return tok, jnp.exp(lp)


def chain_draft(step_fn: Callable, cache: KVCache, first_tokens, first_pos, K: int, kmax,
                ctx: StepContext, greedy: bool, vocab: int, skip_if_zero: bool = False):
    """Autoregressive drafting of up to ``kmax`` (traced, ``<= K``) tokens.

    ``step_fn(tokens[B, T], positions[B, T], cache) -> (logits[B, V] of the last token, cache)``
    runs the draft network with ``cache.lengths`` set to the first position of ``tokens``.
    The first call feeds ``first_tokens`` (ending with the pending token); each later call
    feeds the previous draft token.

    ``skip_if_zero``: ``kmax == 0`` runs nothing. The first feed (a single pending token) is
    then the loop's first iteration rather than a ``lax.cond``, which would copy the cache it
    updates on every step. Without it the first feed always runs (a draft model keeps its
    cache in sync that way) and may hold several tokens.
    """
    B = first_tokens.shape[0]
    tokens = jnp.zeros((B, K), jnp.int32)
    q = None if greedy else jnp.zeros((B, K, vocab), jnp.float32)
    if skip_if_zero:
        if first_tokens.shape[1] != 1:
            raise ValueError("skip_if_zero drafts from a single pending token")
        start = 0
    else:
        logits, cache = step_fn(first_tokens, first_pos, cache.with_lengths(first_pos[:, 0]))
        tok, q0 = pick_token(logits, ctx.keys, 0, greedy, ctx.temperature, ctx.top_k,
                             ctx.top_p)
        tokens = tokens.at[:, 0].set(tok)
        q = None if q is None else q.at[:, 0].set(q0)
        start = 1
    base = first_pos[:, -1]  # position of the pending token

    def body(c):
        i, cache, tokens, q = c
        prev = jax.lax.dynamic_index_in_dim(tokens, jnp.maximum(i - 1, 0), axis=1,
                                            keepdims=False)
        prev = jnp.where(i == 0, first_tokens[:, -1], prev)  # i == 0: the pending token
        pos = base + i
        logits, cache = step_fn(prev[:, None], pos[:, None], cache.with_lengths(pos))
        tok, qi = pick_token(logits, ctx.keys, i, greedy, ctx.temperature, ctx.top_k, ctx.top_p)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, i, axis=1)
        if q is not None:
            q = jax.lax.dynamic_update_index_in_dim(q, qi, i, axis=1)
        return i + 1, cache, tokens, q

    _, cache, tokens, q = jax.lax.while_loop(lambda c: c[0] < kmax, body,
                                             (jnp.int32(start), cache, tokens, q))
    return tokens, q, cache


# ----------------------------------------------------------------------------- registry

_REGISTRY: dict[str, Callable[..., Drafter]] = {}


def register(name: str):
    def deco(factory):
        _REGISTRY[name] = factory
        return factory

    return deco


def available() -> list[str]:
    return sorted(_REGISTRY)


def make(name: str, target_lm, **kwargs) -> Drafter:
    """Builds drafter ``name`` for the loaded target (``specjax.LoadedModel`` or ``Llama``)."""
    if name not in _REGISTRY:
        raise DrafterError(f"unknown drafter {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name](target_lm, **kwargs)


def check_k(k) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DrafterError(f"k (the maximum draft length) must be an integer >= 1, got {k!r}")
    return k


# ----------------------------------------------------------------------------- trees


def _gumbel(key_data, step: int, shape):
    keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k), 2000 + step)
                    )(key_data)
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
               greedy: bool, kmax, k_rows, vocab: int):
    """Drafts a tree level by level through a draft network (pure, inside the loop).

    ``run(tokens[B, T], positions[B, T], cache, offset, mask[B, T, W]) -> (logits[B, T, V],
    cache)`` feeds the nodes of one depth, written at scratch slots ``offset + [0, T)`` past
    the root (``cache.lengths`` is the root's slot), each seeing the committed prefix and the
    scratch slots ``mask`` allows (its ancestors and itself). ``root_logits[B, V]`` are the
    draft network's logits at the pending token. Depths beyond ``kmax`` (traced) are not fed;
    nodes deeper than ``k_rows[b]`` are invalid.

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
    rows = jnp.arange(B)[:, None]
    cands = []  # per depth: that depth's candidates
    next_id = 0
    for d, lv in enumerate(plan, start=1):
        F = f_lp.shape[1]
        if spec.kind == "fixed":
            C = lv["cmax"]
            if stochastic and spec.sibling == "iid":
                keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k),
                                                             3000 + d))(ctx.keys)
                ch = jax.vmap(lambda k, l: jax.random.categorical(k, l, shape=(C, F)).T)(
                    keys, f_lp)  # [B, F, C] independent draws
            else:  # top-C, or Gumbel-top-C = C draws without replacement
                noisy = f_lp + _gumbel(ctx.keys, d, f_lp.shape[1:]) if stochastic else f_lp
                ch = jax.lax.top_k(noisy, C)[1]
            fpos = jnp.asarray(lv["fpos"], jnp.int32)
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
            par = f_id[:, fidx]
            anc_par = f_anc[:, fidx]
            q_lv = None
            ids = jnp.broadcast_to(next_id + jnp.arange(F * W, dtype=jnp.int32)[None], tok.shape)
            # this depth's frontier: its W best candidates (ties: lower index first)
            sel = jax.lax.top_k(score, W)[1].astype(jnp.int32)
        next_id += tok.shape[1]
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

            def feed(c, f_tok=f_tok, pos=pos, f_anc=f_anc, off=lv["slot0"]):
                logits, c = run(f_tok, pos, c, off, f_anc)
                return logp(logits), c

            f_lp, cache = run_if(d < kmax, feed, jnp.zeros((B, T, vocab), jnp.float32), cache)
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
