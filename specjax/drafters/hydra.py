"""Hydra / Hydra++ drafter (card C20): sequentially dependent heads on the target's last
hidden state, a chain or any tree (each node's children come from the head of its depth,
reading the node's own path), with no draft forward beyond the heads.

State per row: the context vector ``c_t`` of the newest committed position (Hydra: the
target's normed last hidden state; Hydra++: the prefix layer's output, whose one-layer KV
cache holds every committed position) from the features the verify forward computes.

Idle steps (a policy that backs off, ``DecodeLoop.idle_skip``): Hydra++ defers its prefix
pass. The committed token's target feature joins a row's pending features (``pend``, up to
``D + 1`` of them), and the pending features go through the prefix layer in one pass when the
buffer is full or before the next draft (``propose``), as the EAGLE head defers its pass: one
pass per ``D + 1`` idle steps instead of one every step (on the project's 2-core CPU an idle
Hydra++ step cost 1.06 plain steps with a pass every step).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache
from specjax.drafters._chain import keep_q, pick_with_stop, stop_carry0
from specjax.drafters._tree import append_pending, draft_tree_or_nothing, run_if, tree_draft
from specjax.drafters.base import (DRAFTERS, StepContext, check_k, skip_as_update,
                                   tree_field, tree_option)
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.heads.hydra import HydraHeadConfig, init_hydra_heads
from specjax.heads.shipped import resolve_head
from specjax.tree import DraftTree, TreeSpec


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HydraState:
    """``ctx[B, h]``: context vector of the newest committed position whose feature went
    through the prefix layer; ``cache``: the prefix layer's cache (Hydra++), lengths = the
    positions fed; a zero-size cache for Hydra. ``pend[B, P, h]``: target features of the
    positions ``cache.lengths + j``, ``j < pend_n``, not yet fed (Hydra++ after idle steps;
    ``P = 0`` for Hydra)."""

    ctx: jax.Array
    cache: KVCache
    pend: jax.Array
    pend_n: jax.Array


@dataclasses.dataclass(frozen=True)
class HydraDrafter:
    head_cfg: HydraHeadConfig
    graphdef: Any
    max_k: int
    tree: TreeSpec | None = None
    description: str = ""
    # the head directory loaded (None: untrained); its config.json may record what the head
    # was measured to accept (specjax.heads.measured)
    head_dir: str | None = dataclasses.field(default=None, compare=False)
    name: str = "hydra"
    deterministic: bool = False
    features: FeatureSpec = FeatureSpec(final_hidden=True)
    _params: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    def params(self):
        return self._params

    def _heads(self, params):
        return nnx.merge(self.graphdef, params["heads"])

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        heads = self._heads(params)
        g = features.final_hidden
        B = g.shape[0]
        D = self.tree.depth if self.tree is not None else self.max_k
        if heads.prefix is None:
            cache = KVCache(k=(), v=(), lengths=prompt_lens)
            c = jnp.take_along_axis(g.astype(jnp.float32), (prompt_lens - 1)[:, None, None],
                                    axis=1)[:, 0]
            pend = jnp.zeros((B, 0, g.shape[-1]), g.dtype)
        else:  # the prompt's keys and values, and the output at its last position only
            c, cache = heads.prefix.prompt(
                g, prompt_lens, heads.prefix.init_cache(B, cache_len + D + 2))
            pend = jnp.zeros((B, D + 1, g.shape[-1]), g.dtype)
        return HydraState(ctx=c, cache=cache, pend=pend, pend_n=jnp.zeros((B,), jnp.int32))

    def _flush(self, heads, state: HydraState, rows) -> HydraState:
        """Feeds the pending features of ``rows`` (bool[B]) through the prefix layer in one
        pass; the context vector becomes the last one's. A row with nothing pending, or not
        in ``rows``, keeps its state (the pass writes past its ``lengths``, which the next
        write replaces before anything reads it)."""
        P = state.pend.shape[1]
        start = state.cache.lengths
        pos = start[:, None] + jnp.arange(P, dtype=jnp.int32)[None]
        out, cache = heads.context(state.pend, pos, state.cache)
        last = jnp.maximum(state.pend_n - 1, 0)[:, None, None]
        c = jnp.take_along_axis(out, last, axis=1)[:, 0].astype(jnp.float32)
        has = rows & (state.pend_n > 0)
        return dataclasses.replace(
            state, ctx=jnp.where(has[:, None], c, state.ctx),
            cache=cache.with_lengths(jnp.where(has, start + state.pend_n, start)),
            pend_n=jnp.where(has, 0, state.pend_n))

    def propose(self, params, target, state: HydraState, ctx: StepContext, k, greedy,
                stop=None):
        heads = self._heads(params)
        draft_ids = params["draft_ids"]
        K, h = self.head_cfg.num_heads, self.head_cfg.hidden_size
        V, Vd = self.head_cfg.vocab_size, self.head_cfg.draft_vocab
        embed = target.embed[...]

        # drafting runs in the draft vocabulary; ids are mapped to the target's at the end
        def emb_target(tok):
            return jnp.take(embed, tok, axis=0).astype(jnp.float32)

        def emb(draft_tok):
            return emb_target(jnp.take(draft_ids, draft_tok))

        if heads.prefix is not None:  # the features idle steps left pending, first
            _, state = run_if(jnp.any(ctx.live & (state.pend_n > 0)),
                              lambda st: ((), self._flush(heads, st, ctx.live)), (), state)
        B = state.ctx.shape[0]
        buf = jnp.zeros((B, K + 1, h), jnp.float32).at[:, 0].set(state.ctx)
        buf = buf.at[:, 1].set(emb_target(ctx.pending))
        k = jnp.where(ctx.live, k, 0).astype(jnp.int32)
        if self.tree is None:
            draft = self._chain(heads, buf, k, ctx, greedy, emb, stop)
        else:
            n = ctx.seq_len - 1

            def run(tokens, positions, c, offset, mask, feats):  # nodes of depth d >= 1
                d = jnp.clip(positions[0, 0] - n[0], 1, K - 1)  # the same on every row
                T = tokens.shape[1]
                b = feats.reshape(B, T, K + 1, h)
                slot = jnp.arange(K + 1) == d + 1
                b = jnp.where(slot[None, None, :, None], emb(tokens)[:, :, None, :], b)
                return heads.logits(b, d), c, b.reshape(B, T, (K + 1) * h)

            kmax = jnp.max(k)
            draft, _ = draft_tree_or_nothing(
                lambda c: tree_draft(run, heads.logits(buf, 0), c, self.tree, ctx, greedy,
                                     kmax, k, Vd, stop, root_hidden=buf.reshape(B, -1)),
                KVCache(k=(), v=(), lengths=n), self.tree, kmax, greedy, Vd)
        q = draft.q
        if q is not None:  # the draft distributions in the target vocabulary, for the verifier
            q = jnp.zeros(q.shape[:-1] + (V,), q.dtype).at[..., draft_ids].set(q)
        draft = dataclasses.replace(draft, tokens=jnp.take(draft_ids, draft.tokens), q=q)
        return draft, state, ctx.target_cache

    def _chain(self, heads, buf, k_rows, ctx, greedy, emb, stop) -> DraftTree:
        """Draft tokens 1..k (draft-vocabulary ids): token ``i`` from head ``i`` reading the
        context, the pending token and drafts ``1..i - 1``; stops at the longest row's k."""
        K, M = self.head_cfg.num_heads, self.max_k
        B = buf.shape[0]
        Vd = self.head_cfg.draft_vocab
        tokens = jnp.zeros((B, M), jnp.int32)
        q = jnp.zeros((B, M, Vd), jnp.float32) if keep_q(greedy, ctx) else None

        def body(c):
            i, buf, tokens, q, k_rows, carry = c
            tok, qi, k_rows, carry = pick_with_stop(heads.logits(buf, i), i, k_rows, ctx,
                                                    greedy, stop, carry)
            tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, i, axis=1)
            if q is not None:
                q = jax.lax.dynamic_update_index_in_dim(q, qi, i, axis=1)
            slot = (jnp.arange(K + 1) == i + 2)[None, :, None]  # no slot past K: a no-op
            buf = jnp.where(slot, emb(tok)[:, None, :], buf)
            return i + 1, buf, tokens, q, k_rows, carry

        _, _, tokens, q, k_rows, _ = jax.lax.while_loop(
            lambda c: c[0] < jnp.max(c[4]), body,
            (jnp.int32(0), buf, tokens, q, k_rows, stop_carry0(B)))
        return DraftTree.chain(tokens, jnp.minimum(k_rows, M), q)

    def skip(self, params, target, state: HydraState, ctx, features):
        """A step that drafted nothing (``DecodeLoop.idle_skip``). Hydra: the committed
        token's feature becomes the context (``update``). Hydra++: the feature joins the
        row's pending ones, with no prefix pass; a row whose buffer is full first has every
        live row's pending features fed (:meth:`_flush`)."""
        heads = self._heads(params)
        if heads.prefix is None:
            return skip_as_update(self, params, target, state, ctx, features)
        live = ctx.live
        return append_pending(state, live, features.final_hidden[:, 0],
                              lambda st: self._flush(heads, st, live))

    def update(self, params, state: HydraState, ctx, n_acc, tree, path, features):
        heads = self._heads(params)
        g = features.final_hidden  # [B, D + 1, h]: the root, then the accepted nodes
        live = ctx.live
        if heads.prefix is None:
            c = jnp.take_along_axis(g, n_acc[:, None, None], axis=1)[:, 0]
            return dataclasses.replace(
                state, ctx=jnp.where(live[:, None], c.astype(jnp.float32), state.ctx))
        start = ctx.target_cache.lengths - (n_acc + 1)  # the root's position
        B, T, _ = g.shape
        pos = start[:, None] + jnp.arange(T, dtype=jnp.int32)[None]
        out, cache = heads.context(g, pos, state.cache.with_lengths(start))
        c = jnp.take_along_axis(out, n_acc[:, None, None], axis=1)[:, 0]
        lengths = jnp.where(live, start + n_acc + 1, state.cache.lengths)
        return dataclasses.replace(state, ctx=jnp.where(live[:, None], c, state.ctx),
                                   cache=cache.with_lengths(lengths))


@dataclasses.dataclass(frozen=True)
class HydraConfig:
    """Options of ``hydra``."""

    k: int = dataclasses.field(default=3, metadata={"help": "draft depth (<= trained heads)"})
    head: str | None = dataclasses.field(default=None, metadata={
        "help": "trained heads (directory written by `specjax train hydra`); default: "
                "the heads shipped for the target, else untrained heads (identity start); "
                "head=random: untrained heads"})
    prefix: bool = dataclasses.field(default=True, metadata={
        "help": "untrained heads: Hydra++'s prefix attention layer (false: plain Hydra)"})
    mlp_layers: int = dataclasses.field(default=4, metadata={
        "help": "untrained heads: residual blocks per head"})
    draft_vocab: int | None = None
    seed: int = 0
    tree: TreeSpec | None = tree_field(3)

    def __post_init__(self):
        check_k(self.k)


@DRAFTERS.register("hydra", config=HydraConfig,
                   doc="Hydra/Hydra++ sequentially dependent heads on the target's last hidden "
                       "state (chains and trees)")
def make_hydra(cfg: HydraConfig, target_lm) -> HydraDrafter:
    target = getattr(target_lm, "model", target_lm)
    spec = tree_option(cfg.tree, cfg.k)
    depth = spec.depth if spec else cfg.k
    head = resolve_head("hydra", cfg.head, target_lm)
    if head is not None:
        from specjax.heads.hydra import load_hydra_heads

        hcfg, graphdef, state, ids, desc = load_hydra_heads(
            head, target, getattr(target_lm, "tokenizer", None))
        if depth > hcfg.num_heads:
            raise DrafterError(f"{head}: {hcfg.num_heads} trained heads cannot draft "
                               f"depth {depth} (k or the tree's depth): give "
                               f"k={hcfg.num_heads} or a tree no deeper")
    else:
        V = target.cfg.vocab_size
        ids = jnp.arange(cfg.draft_vocab or V, dtype=jnp.int32)
        hcfg = HydraHeadConfig.for_target(target.cfg, depth, len(ids),
                                          mlp_layers=cfg.mlp_layers,
                                          prefix_attention=cfg.prefix)
        graphdef, state = init_hydra_heads(hcfg, target, ids, seed=cfg.seed)
        desc = f"untrained {'hydra++' if cfg.prefix else 'hydra'} heads (seed {cfg.seed})"
    return HydraDrafter(head_cfg=hcfg, graphdef=graphdef, max_k=depth, tree=spec,
                        description=desc,
                        head_dir=None if head is None else str(head),
                        _params={"heads": state, "draft_ids": jnp.asarray(ids, jnp.int32)})
