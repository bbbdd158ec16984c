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
pass's features along the accepted path; the paper also recycles the rejected nodes'
candidates: their contexts did not happen, so they are left out here). When a
token occurs several times, its latest occurrence wins. Entries never filled hold ``0, 1,
..., width - 1`` (junk that verification rejects). The table lives for one ``generate`` call
(the paper keeps it across requests: a hot start, not done here). With ``from_text`` (width
1, the ``ngram`` drafter's default source) an entry is instead the token that followed ``t``
in the row's own text, prompt and output: no top ids are asked of the target (greedy, the
same entries along the output).

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
from typing import ClassVar

import jax.numpy as jnp

from specjax.drafters.base import DRAFTERS, StepContext, check_k, skip_as_update, tree_field
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

    def __post_init__(self):
        check_k(self.k)
        if not isinstance(self.width, int) or isinstance(self.width, bool) or self.width < 1:
            raise DrafterError(f"token_recycling: width must be an integer >= 1, got "
                               f"{self.width!r}")


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
    name: str = "token_recycling"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = True

    def __post_init__(self):
        if self.prompt not in PROMPT_FILLS:
            raise DrafterError(f"token_recycling: prompt must be one of {PROMPT_FILLS}, got "
                               f"{self.prompt!r}")
        if self.from_text and self.width != 1:
            raise DrafterError(f"token_recycling: from_text keeps one successor per token "
                               f"(width 1), got width {self.width}")

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec() if self.from_text else FeatureSpec(top_ids=self.width)

    @property
    def prefill_features(self) -> FeatureSpec:
        return FeatureSpec() if self.prompt == "text" else self.features

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B, P = prompt_tokens.shape
        junk = jnp.arange(self.width, dtype=jnp.int32)
        table = jnp.broadcast_to(junk, (B, self.vocab_size, self.width))
        if self.from_text or self.prompt == "text":  # prompt[i] -> prompt[i + 1]
            nxt = jnp.concatenate([prompt_tokens[:, 1:], prompt_tokens[:, :1]], axis=1)
            valid = jnp.arange(P)[None] < prompt_lens[:, None] - 1
            top = jnp.concatenate(  # the other columns: the junk of an unfilled entry
                [nxt[..., None], jnp.broadcast_to(junk[1:], (B, P, self.width - 1))], axis=2)
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

    def update(self, params, state, ctx, n_acc, tree, path, features):
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
        return record(state, toks, features.top_ids, valid)


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
    return TokenRecyclingDrafter(max_k=cfg.k if tree is None else tree.depth, width=cfg.width,
                                 vocab_size=model.cfg.vocab_size, tree=tree, prompt=cfg.prompt)
