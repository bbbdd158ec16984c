"""Medusa drafter (card C19): ``K`` heads on the target's last hidden state draft the tokens
after the pending one, a chain or a static tree (level ``d``'s children are the top-ranked
tokens of head ``d``), with no draft forward beyond the heads themselves.

The heads read the target's normed last hidden state of the newest committed position (the
pending token's predecessor), which the verify forward computes (declared feature
``final_hidden``) and ``update`` keeps; the prefill provides the prompt's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache
from specjax.drafters._chain import keep_q, pick_with_stop, stop_carry0
from specjax.drafters._tree import draft_tree_or_nothing, tree_draft
from specjax.drafters.base import (DRAFTERS, StepContext, check_k, skip_as_update,
                                   tree_field, tree_option)
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.heads.medusa import MedusaHeadConfig, init_medusa_heads
from specjax.heads.shipped import resolve_head
from specjax.tree import DraftTree, TreeSpec


@dataclasses.dataclass(frozen=True)
class MedusaDrafter:
    head_cfg: MedusaHeadConfig
    graphdef: Any
    max_k: int
    tree: TreeSpec | None = None
    description: str = ""
    # the head directory loaded (None: untrained); its config.json may record what the head
    # was measured to accept (specjax.heads.measured)
    head_dir: str | None = dataclasses.field(default=None, compare=False)
    name: str = "medusa"
    deterministic: bool = False
    features: FeatureSpec = FeatureSpec(final_hidden=True)
    _params: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    def params(self):
        return self._params

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        return jnp.take_along_axis(features.final_hidden, (prompt_lens - 1)[:, None, None],
                                   axis=1)[:, 0]

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        heads = nnx.merge(self.graphdef, params["heads"])
        draft_ids = params["draft_ids"]
        # [B, K, Vd]: head d drafts depth d + 1, in the draft vocabulary (ids mapped at the end)
        logits = heads(state)
        k = jnp.where(ctx.live, k, 0).astype(jnp.int32)
        B, Vd = logits.shape[0], logits.shape[-1]
        if self.tree is None:
            tokens, qs = [], []
            carry = stop_carry0(B)
            for i in range(self.max_k):
                tok, q_i, k, carry = pick_with_stop(logits[:, i], i, k, ctx, greedy, stop,
                                                    carry)
                tokens.append(tok)
                qs.append(q_i)
            q = jnp.stack(qs, axis=1) if keep_q(greedy, ctx) else None
            draft = DraftTree.chain(jnp.stack(tokens, axis=1), k, q)
        else:
            def run(tokens, positions, c, offset, mask):  # level d + 1: head d + 1, every node
                d = jnp.clip(positions[:, 0] - ctx.seq_len + 1, 1, self.max_k - 1)
                lg = jnp.take_along_axis(logits, d[:, None, None], axis=1)  # [B, 1, Vd]
                return jnp.broadcast_to(lg, (B, tokens.shape[1], Vd)), c

            dummy = KVCache(k=(), v=(), lengths=ctx.seq_len - 1)
            kmax = jnp.max(k)
            draft, _ = draft_tree_or_nothing(
                lambda c: tree_draft(run, logits[:, 0], c, self.tree, ctx, greedy, kmax, k, Vd,
                                     stop), dummy, self.tree, kmax, greedy, Vd)
        q = draft.q
        if q is not None:  # the draft distributions in the target vocabulary, for the verifier
            V = self.head_cfg.vocab_size
            q = jnp.zeros(q.shape[:-1] + (V,), q.dtype).at[..., draft_ids].set(q)
        draft = dataclasses.replace(draft, tokens=jnp.take(draft_ids, draft.tokens), q=q)
        return draft, state, ctx.target_cache

    skip = skip_as_update  # a step that drafted nothing (``DecodeLoop.idle_skip``)

    def update(self, params, state, ctx, n_acc, tree, path, features):
        last = jnp.take_along_axis(features.final_hidden, n_acc[:, None, None], axis=1)[:, 0]
        return jnp.where(ctx.live[:, None], last, state)


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
    """Options of ``medusa``."""

    k: int = dataclasses.field(default=3, metadata={"help": "heads used = draft depth"})
    head: str | None = dataclasses.field(default=None, metadata={
        "help": "trained heads (directory written by `specjax train medusa`); default: "
                "the heads shipped for the target, else untrained heads (identity residual, "
                "the target's LM head); head=random: untrained heads"})
    draft_vocab: int | None = None
    tree: TreeSpec | None = tree_field(3)

    def __post_init__(self):
        check_k(self.k)


@DRAFTERS.register("medusa", config=MedusaConfig,
                   doc="Medusa-1 heads on the target's last hidden state (chain or static tree)")
def make_medusa(cfg: MedusaConfig, target_lm) -> MedusaDrafter:
    target = getattr(target_lm, "model", target_lm)
    spec = tree_option(cfg.tree, cfg.k)
    if spec is not None and spec.kind != "fixed":
        raise DrafterError(f"medusa drafts static trees (fixed:<choices> or levels:<widths>); "
                           f"got {spec.describe()}: its heads do not see the drafted tokens")
    depth = spec.depth if spec else cfg.k
    head = resolve_head("medusa", cfg.head, target_lm)
    if head is not None:
        from specjax.heads.medusa import load_medusa_heads

        hcfg, graphdef, state, ids, desc = load_medusa_heads(
            head, target, getattr(target_lm, "tokenizer", None))
        if depth > hcfg.num_heads:
            raise DrafterError(f"{head}: {hcfg.num_heads} trained heads cannot draft "
                               f"depth {depth} (k or the tree's depth; at batch 1 `medusa` "
                               f"defaults to the tree fixed:0,1,0.0, of depth 2): "
                               f"give k={hcfg.num_heads} or a tree no deeper")
    else:
        V = target.cfg.vocab_size
        dv = cfg.draft_vocab or V
        ids = jnp.arange(dv, dtype=jnp.int32)
        hcfg = MedusaHeadConfig(num_heads=depth, hidden_size=target.cfg.hidden_size,
                                vocab_size=V, draft_vocab=dv,
                                target_layers=target.cfg.num_layers)
        graphdef, state = init_medusa_heads(hcfg, target, ids)
        desc = "untrained Medusa heads"
    return MedusaDrafter(head_cfg=hcfg, graphdef=graphdef, max_k=depth, tree=spec,
                         description=desc,
                         head_dir=None if head is None else str(head),
                         _params={"heads": state, "draft_ids": jnp.asarray(ids, jnp.int32)})
