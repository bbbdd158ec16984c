"""EAGLE drafters (EAGLE-1 and EAGLE-3 heads; EAGLE-2's dynamic tree with ``tree=dynamic``).

The head drafts from the target's own features, which the verify forward computes (the
drafter declares them: three hidden states for EAGLE-3, the normed last hidden state for
EAGLE-1), so no extra target forward runs. State per row:

* the head's one-layer KV cache, holding the pairs ``(g_t, x_{t+1})`` of committed positions;
* the *pending pairs*: the fused features of the positions committed by the last step (the
  root and the accepted nodes, from ``update``), whose pairs need the token after them, known
  only once the next pending token is.

``propose`` first feeds the pending pairs (one block, written at their positions, so the head
cache is exact after any acceptance length, chains and trees alike); the output at the last
pair predicts the first draft token. Each later draft step feeds ``(own hidden, draft token)``
at the next position. Trees are fed level by level through the same helper as the other
drafters, each node with its parent's output hidden state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache
from specjax.drafters._chain import keep_q, pick_with_stop, stop_carry0
from specjax.drafters._tree import append_pending, draft_tree_or_nothing, tree_draft
from specjax.drafters.base import DRAFTERS, StepContext, check_k, tree_field, tree_option
from specjax.errors import DrafterError
from specjax.features import FeatureSpec, Features
from specjax.heads.eagle import EagleHeadConfig, init_head, quantize_head
from specjax.heads.shipped import resolve_head
from specjax.tree import DraftTree, TreeSpec


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EagleState:
    """Per-row drafter state.

    Attributes:
      cache: the head's one-layer KV cache (entries ``< pend_start`` are committed pairs).
      pend_feat: ``[B, D + 1, h]`` fused features of positions ``pend_start + j``.
      pend_n: ``int32[B]`` how many pending pairs (``>= 1``).
      pend_start: ``int32[B]`` position of the first pending pair.
    """

    cache: KVCache
    pend_feat: jax.Array
    pend_n: jax.Array
    pend_start: jax.Array


@dataclasses.dataclass(frozen=True)
class EagleDrafter:
    head_cfg: EagleHeadConfig
    graphdef: Any
    max_k: int
    tree: TreeSpec | None = None
    description: str = ""
    # the head directory loaded (None: untrained); its config.json may record what the head
    # was measured to accept (specjax.heads.measured)
    head_dir: str | None = dataclasses.field(default=None, compare=False)
    name: str = "eagle"
    deterministic: bool = False
    _params: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)
    # what identifies the head for an acceptance head when ``_params`` hold it quantized
    # (w8a8): the digest of its parameters as trained (specjax.heads.acceptance.drafter_digest);
    # None: the digest of ``_params``
    identity_digest: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def features(self) -> FeatureSpec:
        if self.head_cfg.variant == "eagle3":
            return FeatureSpec(layers=self.head_cfg.feature_layers)
        return FeatureSpec(final_hidden=True)

    def params(self):
        return self._params

    @property
    def stop_hidden_size(self) -> int:
        """Size of the hidden state this drafter hands the mid-draft stop hook
        (``DraftStep.hidden``: the head's output feature that produced the distribution)."""
        return self.head_cfg.hidden_size

    def _head(self, params):
        return nnx.merge(self.graphdef, params["head"])

    def _raw(self, features: Features) -> jax.Array:
        if self.head_cfg.variant == "eagle3":
            return jnp.concatenate(features.hidden, axis=-1)
        return features.final_hidden

    def _depth(self) -> int:
        return self.tree.depth if self.tree is not None else self.max_k

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        head = self._head(params)
        B, P = prompt_tokens.shape
        D = self._depth()
        g = head.fuse(self._raw(features))  # [B, P, h]
        nxt = jnp.concatenate([prompt_tokens[:, 1:], jnp.zeros((B, 1), jnp.int32)], axis=1)
        emb = jnp.take(target.embed[...], nxt, axis=0).astype(jnp.float32)
        pos = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
        n_nodes = self.tree.num_nodes if self.tree is not None else D
        cache = head.init_cache(B, cache_len + n_nodes + D + 2)
        _, _, cache = head(emb, g, pos, cache, prefix_empty=True, compute_logits=False)
        last = jnp.take_along_axis(g, (prompt_lens - 1)[:, None, None], axis=1)  # [B, 1, h]
        pend = jnp.zeros((B, D + 1, g.shape[-1]), jnp.float32).at[:, :1].set(last)
        return EagleState(cache=cache, pend_feat=pend, pend_n=jnp.ones((B,), jnp.int32),
                          pend_start=prompt_lens - 1)

    def propose(self, params, target, state: EagleState, ctx: StepContext, k, greedy,
                stop=None):
        head = self._head(params)
        draft_ids = params["draft_ids"]
        V, Vd = self.head_cfg.vocab_size, self.head_cfg.draft_vocab
        embed = target.embed[...]
        n = ctx.seq_len - 1  # the pending token's position
        k = jnp.where(ctx.live, k, 0).astype(jnp.int32)

        # drafting runs in the draft vocabulary (top-k, argmax and sampling over Vd entries,
        # not a 49k-entry target-vocabulary copy per step); ids are mapped at the end
        def emb_target(tok):
            return jnp.take(embed, tok, axis=0).astype(jnp.float32)

        def emb(draft_tok):
            return emb_target(jnp.take(draft_ids, draft_tok))

        # the catch-up pass writes every pending pair into the head's cache; only the last
        # real pair's logits are used (the LM head over the draft vocabulary is most of the
        # pass: computing it for all K + 1 slots cost several times the layer itself)
        hid, cache = _catch_up(head, state, ctx, embed)
        last = (state.pend_n - 1)[:, None]
        root_hid = jnp.take_along_axis(hid, last[..., None], axis=1)[:, 0]
        root_logits = head.logits(root_hid)
        kmax = jnp.max(k)
        if self.tree is None:
            tokens, q, cache, k = self._chain(head, root_logits, root_hid, cache, n, k, ctx,
                                              greedy, emb, stop)
            draft = DraftTree.chain(tokens, k, q)
        else:
            def run(tokens, positions, c, offset, mask, feats):
                lg, h, c = head(emb(tokens), feats, positions, c, attn_mask=mask,
                                write_offset=offset)
                return lg, c, h

            draft, cache = draft_tree_or_nothing(
                lambda c: tree_draft(run, root_logits, c, self.tree, ctx, greedy, kmax, k, Vd,
                                     stop, root_hidden=root_hid),
                cache.with_lengths(n - 1), self.tree, kmax, greedy, Vd)
        q = draft.q
        if q is not None:  # the draft distributions in the target vocabulary, for the verifier
            q = jnp.zeros(q.shape[:-1] + (V,), q.dtype).at[..., draft_ids].set(q)
        draft = dataclasses.replace(draft, tokens=jnp.take(draft_ids, draft.tokens), q=q)
        new = dataclasses.replace(state, cache=cache)
        return draft, new, ctx.target_cache

    def _chain(self, head, root_logits, root_hid, cache, n, k_rows, ctx, greedy, emb, stop):
        """Draft tokens 1..k (draft-vocabulary ids): the first from the root logits, each next
        one from feeding ``(previous hidden, previous token)`` at the next position."""
        K = self.max_k
        B = root_logits.shape[0]
        V = root_logits.shape[-1]
        tokens = jnp.zeros((B, K), jnp.int32)
        q = jnp.zeros((B, K, V), jnp.float32) if keep_q(greedy, ctx) else None

        def pick(logits, i, k_rows, carry, hidden):
            return pick_with_stop(logits, i, k_rows, ctx, greedy, stop, carry, hidden)

        tok0, q0, k_rows, carry = pick(root_logits, 0, k_rows, stop_carry0(B), root_hid)
        tokens = tokens.at[:, 0].set(tok0)
        q = None if q is None else q.at[:, 0].set(q0)

        def body(c):
            i, cache, tokens, q, hid, k_rows, carry = c
            prev = jax.lax.dynamic_index_in_dim(tokens, i - 1, axis=1, keepdims=False)
            pos = n + i - 1
            lg, h, cache = head(emb(prev)[:, None], hid[:, None], pos[:, None],
                                cache.with_lengths(pos))
            tok, qi, k_rows, carry = pick(lg[:, 0], i, k_rows, carry, h[:, 0])
            tokens = jax.lax.dynamic_update_index_in_dim(tokens, tok, i, axis=1)
            if q is not None:
                q = jax.lax.dynamic_update_index_in_dim(q, qi, i, axis=1)
            return i + 1, cache, tokens, q, h[:, 0], k_rows, carry

        _, cache, tokens, q, _, k_rows, _ = jax.lax.while_loop(
            lambda c: c[0] < jnp.max(c[5]), body,
            (jnp.int32(1), cache, tokens, q, root_hid, k_rows, carry))
        return tokens, q, cache, jnp.minimum(k_rows, K)

    def skip(self, params, target, state: EagleState, ctx, features):
        """A step that drafted nothing (``DecodeLoop.idle_skip``): the committed token's
        fused feature joins the pending pairs, with no head pass. When a row's pending buffer
        is full, every live row's pending pairs are first written into the head cache (the
        catch-up pass ``propose`` runs, without logits): one head pass per ``D + 1`` idle
        steps instead of a pass and the root's logits every step. The head cache and the
        pending pairs stay exactly what ``update`` would have made of them."""
        head = self._head(params)
        g = head.fuse(self._raw(features))[:, 0]  # [B, h]: the committed (root) token
        live = ctx.live

        def flush(st: EagleState) -> EagleState:
            _, cache = _catch_up(head, st, ctx, target.embed[...])
            return EagleState(
                cache=cache, pend_feat=st.pend_feat,
                pend_n=jnp.where(live, 0, st.pend_n),
                pend_start=jnp.where(live, st.pend_start + st.pend_n, st.pend_start))

        return append_pending(state, live, g, flush, buf="pend_feat")

    def update(self, params, state: EagleState, ctx, n_acc, tree, path, features):
        head = self._head(params)
        g = head.fuse(self._raw(features))  # [B, D + 1, h]: the root, then accepted nodes
        start = ctx.target_cache.lengths - (n_acc + 1)  # the root's position
        live = ctx.live
        return EagleState(
            cache=state.cache,
            pend_feat=jnp.where(live[:, None, None], g, state.pend_feat),
            pend_n=jnp.where(live, n_acc + 1, state.pend_n),
            pend_start=jnp.where(live, start, state.pend_start))


def _catch_up(head, state: EagleState, ctx: StepContext, embed):
    """Feeds the pending pairs ``(g_t, x_{t+1})``, ``t = pend_start + j``, through the head
    (no logits), writing them into its cache: ``(hidden [B, D + 1, h], cache)``."""
    D1 = state.pend_feat.shape[1]
    pos = state.pend_start[:, None] + jnp.arange(D1, dtype=jnp.int32)[None]
    tok = jnp.take_along_axis(ctx.seq, jnp.clip(pos + 1, 0, ctx.seq.shape[1] - 1), axis=1)
    emb = jnp.take(embed, tok, axis=0).astype(jnp.float32)
    _, hid, cache = head(emb, state.pend_feat, pos, state.cache.with_lengths(state.pend_start),
                         compute_logits=False)
    return hid, cache


@dataclasses.dataclass(frozen=True)
class EagleConfig:
    """Options of ``eagle``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft length"})
    head: str | None = dataclasses.field(default=None, metadata={
        "help": "a trained head (directory written by `specjax train`, or an EAGLE-3 "
                "safetensors + config.json export); default: the head shipped for the target, "
                "else an untrained random head; head=random: an untrained head"})
    variant: str = dataclasses.field(default="eagle3", metadata={
        "help": "eagle3 | eagle1: the architecture of a random head (a trained head says "
                "its own)"})
    draft_vocab: int | None = dataclasses.field(default=None, metadata={
        "help": "draft vocabulary of a random head (default: the target's)"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of a random head"})
    quantize: str = dataclasses.field(default="auto", metadata={
        "help": "auto | none | w8a8: w8a8 runs the head's matrices as int8 rows with int8 "
                "products (drafts only: outputs stay exactly plain decoding's; a draft step "
                "on a CPU is the memory it reads: 1.52x -> 1.58x on the built-in prompts); "
                "auto: w8a8 on a CPU, none elsewhere (not measured on GPUs yet)"})
    tree: TreeSpec | None = tree_field(4)

    def __post_init__(self):
        check_k(self.k)
        if self.quantize not in ("auto", "none", "w8a8"):
            raise DrafterError(f"quantize must be 'auto', 'none' or 'w8a8', got "
                               f"{self.quantize!r}")


@DRAFTERS.register("eagle", config=EagleConfig,
                   doc="EAGLE-1/EAGLE-3 head drafting from the target's features (EAGLE-2 "
                       "dynamic trees with tree=dynamic)")
def make_eagle(cfg: EagleConfig, target_lm) -> EagleDrafter:
    target = getattr(target_lm, "model", target_lm)
    spec = tree_option(cfg.tree, cfg.k)
    max_k = spec.depth if spec else cfg.k
    head = resolve_head("eagle", cfg.head, target_lm)
    if head is not None:
        from specjax.heads.io import load_eagle_head

        head_cfg, graphdef, state, draft_ids, desc = load_eagle_head(
            head, target, getattr(target_lm, "tokenizer", None))
    else:
        if cfg.variant not in ("eagle1", "eagle3"):
            raise DrafterError(f"variant must be 'eagle1' or 'eagle3', got {cfg.variant!r}")
        head_cfg = EagleHeadConfig.for_target(target.cfg, cfg.variant, cfg.draft_vocab)
        graphdef, state, draft_ids = init_head(head_cfg, target, seed=cfg.seed)
        desc = f"untrained {cfg.variant} head (seed {cfg.seed})"
    quantize = cfg.quantize
    if quantize == "auto":
        quantize = "w8a8" if jax.default_backend() == "cpu" else "none"
    identity = None
    if quantize == "w8a8":  # identified by the float weights, not kept alive for it (4x)
        from specjax.heads.acceptance import params_digest

        identity = params_digest("eagle", {"head": state, "draft_ids": jnp.asarray(
            draft_ids, jnp.int32)})
        graphdef, state = quantize_head(graphdef, state)
        desc += ", w8a8"
    params = {"head": state, "draft_ids": jnp.asarray(draft_ids, jnp.int32)}
    return EagleDrafter(head_cfg=head_cfg, graphdef=graphdef, max_k=max_k, tree=spec,
                        description=desc, _params=params, identity_digest=identity,
                        head_dir=None if head is None else str(head))
