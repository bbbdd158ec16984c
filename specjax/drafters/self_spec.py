"""Self-speculative drafters: the target's own early layers, or the target minus some sublayers.

Both draft through the target's weights and its KV cache. The committed prefix is read from the
target cache (for an early exit at layer ``l`` that is exactly what a truncated model would
have cached, since the first ``l`` layers see the same inputs); drafted entries are written as
scratch past the committed length and overwritten by the verify pass, which computes every
layer for the whole block and so leaves the cache as plain decoding would.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.drafters._chain import chain_draft
from specjax.drafters._tree import draft_tree_or_nothing, tree_draft
from specjax.drafters.base import DRAFTERS, StepContext, check_k, tree_field, tree_option
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.tree import DraftTree, TreeSpec


def _target_model(target_lm):
    return getattr(target_lm, "model", target_lm)


@dataclasses.dataclass(frozen=True)
class EarlyExitDrafter:
    """LayerSkip/DEL-style drafting with the first ``exit_layer`` blocks and the shared head."""

    exit_layer: int
    max_k: int
    num_layers: int
    tree: TreeSpec | None = None
    name: str = "early_exit"
    deterministic: bool = False
    features: FeatureSpec = FeatureSpec()

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        return ()

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        return self_spec_propose(target, dict(exit_layer=self.exit_layer), self.max_k,
                                 self.tree, state, ctx, k, greedy, stop)

    def skip(self, params, target, state, ctx, features):
        """A step that drafted nothing (``DecodeLoop.idle_skip``): nothing to record, the
        committed prefix is the target cache itself."""
        return state

    def update(self, params, state, ctx, n_acc, tree, path, features):
        return state


@dataclasses.dataclass(frozen=True)
class LayerSkipDrafter:
    """SWIFT-style drafting with a fixed set of skipped attention / MLP sublayers."""

    skip_attn: tuple[int, ...]
    skip_mlp: tuple[int, ...]
    max_k: int
    tree: TreeSpec | None = None
    name: str = "layer_skip"
    deterministic: bool = False
    features: FeatureSpec = FeatureSpec()

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        return ()

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        return self_spec_propose(target, dict(skip_attn=self.skip_attn, skip_mlp=self.skip_mlp),
                                 self.max_k, self.tree, state, ctx, k, greedy, stop)

    skip = EarlyExitDrafter.skip  # the prefix is the target cache: nothing to record

    def update(self, params, state, ctx, n_acc, tree, path, features):
        return state


def self_spec_propose(target, variant: dict, K: int, tree: TreeSpec | None, state,
                      ctx: StepContext, k, greedy, stop=None):
    """Drafts through the target itself with ``variant`` (exit layer or skipped sublayers),
    writing scratch into the target cache past the committed length (the verify pass
    overwrites it)."""
    V = target.cfg.vocab_size
    n = ctx.seq_len - 1  # committed length = position of the pending token
    k = jnp.where(ctx.live, k, 0)
    kmax = jnp.max(k)
    if tree is None:
        def step(tokens, positions, cache):
            o = target(tokens, positions, cache, **variant)
            return o.logits[:, -1], o.cache

        tokens, q, cache, k = chain_draft(step, ctx.target_cache, ctx.pending[:, None],
                                          n[:, None], K, k, ctx, greedy, V, skip_if_zero=True,
                                          stop=stop)
        draft = DraftTree.chain(tokens, k, q)
    else:
        def run(tokens, positions, cache, offset, mask):
            o = target(tokens, positions, cache, attn_mask=mask, write_offset=offset,
                       **variant)
            return o.logits, o.cache

        def draft_fn(cache):
            o = target(ctx.pending[:, None], n[:, None], cache.with_lengths(n), **variant)
            return tree_draft(run, o.logits[:, -1], o.cache, tree, ctx, greedy, kmax, k, V,
                              stop)

        draft, cache = draft_tree_or_nothing(draft_fn, ctx.target_cache, tree, kmax, greedy, V)
    return draft, state, cache.with_lengths(ctx.target_cache.lengths)


def _parse_layers(v, name) -> tuple[int, ...]:
    if v is None or v == "":
        return ()
    if isinstance(v, int):  # one layer (``--method-arg skip_attn=5`` arrives as an int)
        return (v,)
    if isinstance(v, str):
        out = []
        for part in v.replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if "-" in part:
                    a, b = part.split("-", 1)
                    out.extend(range(int(a), int(b) + 1))
                else:
                    out.append(int(part))
            except ValueError:
                raise DrafterError(f"{name} takes layer indices and ranges like '2,4,6-9', "
                                   f"got {v!r}") from None
        return tuple(sorted(set(out)))
    try:
        return tuple(sorted(set(int(i) for i in v)))
    except TypeError:
        raise DrafterError(f"{name} must be a list of layer indices, got {v!r}") from None


def default_skip_set(num_layers: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A fixed skip set until the SWIFT search exists: every other middle layer's attention and
    MLP (first and last layers kept), within SWIFT's budget of 0.45 * 2(L - 2) sublayers."""
    middle = list(range(1, num_layers - 1))
    chosen = middle[1::2]
    budget = int(0.45 * 2 * (num_layers - 2)) // 2
    chosen = tuple(chosen[:max(budget, 1)])
    if not chosen:  # 2-3 layers: the one middle layer, or the last one of two
        chosen = (middle[0],) if middle else (num_layers - 1,)
    return chosen, chosen


@dataclasses.dataclass(frozen=True)
class EarlyExitConfig:
    """Options of ``early_exit``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft length"})
    exit_layer: int | None = dataclasses.field(default=None, metadata={
        "help": "draft with the first exit_layer blocks (default: a quarter of the layers)"})
    tree: TreeSpec | None = tree_field(4)

    def __post_init__(self):
        check_k(self.k)


@dataclasses.dataclass(frozen=True)
class LayerSkipConfig:
    """Options of ``layer_skip``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft length"})
    skip_attn: tuple[int, ...] | None = dataclasses.field(default=None, metadata={
        "parse": lambda v, args: _parse_layers(v, "skip_attn"),
        "help": "attention sublayers to skip, e.g. 2,4,6-9 (default: a fixed SWIFT-like set)"})
    skip_mlp: tuple[int, ...] | None = dataclasses.field(default=None, metadata={
        "parse": lambda v, args: _parse_layers(v, "skip_mlp"),
        "help": "MLP sublayers to skip"})
    tree: TreeSpec | None = tree_field(4)

    def __post_init__(self):
        check_k(self.k)


@DRAFTERS.register("early_exit", config=EarlyExitConfig,
                   doc="the target's first layers and its head draft (LayerSkip / DEL style)")
def make_early_exit(cfg: EarlyExitConfig, target_lm) -> EarlyExitDrafter:
    model = _target_model(target_lm)
    L = model.cfg.num_layers
    exit_layer = cfg.exit_layer if cfg.exit_layer is not None else max(1, L // 4)
    if not isinstance(exit_layer, int) or not 1 <= exit_layer < L:
        raise DrafterError(
            f"exit_layer must be an integer in [1, {L - 1}] for this {L}-layer model, "
            f"got {exit_layer!r}"
        )
    spec = tree_option(cfg.tree, cfg.k)
    return EarlyExitDrafter(exit_layer=exit_layer, max_k=spec.depth if spec else cfg.k,
                            num_layers=L, tree=spec)


@DRAFTERS.register("layer_skip", config=LayerSkipConfig,
                   doc="the target minus some attention/MLP sublayers drafts (SWIFT style)")
def make_layer_skip(cfg: LayerSkipConfig, target_lm) -> LayerSkipDrafter:
    model = _target_model(target_lm)
    L = model.cfg.num_layers
    if cfg.skip_attn is None and cfg.skip_mlp is None:
        sa, sm = default_skip_set(L)
    else:
        sa = tuple(sorted(set(cfg.skip_attn or ())))
        sm = tuple(sorted(set(cfg.skip_mlp or ())))
    for name, s in (("skip_attn", sa), ("skip_mlp", sm)):
        bad = [i for i in s if not 0 <= i < L]
        if bad:
            raise DrafterError(f"{name} names layers {bad} outside [0, {L})")
    if len(sa) == L and len(sm) == L:
        raise DrafterError("the skip set skips every sublayer: the draft would ignore its input")
    if not sa and not sm:
        raise DrafterError("the skip set is empty: the draft would be the target itself")
    spec = tree_option(cfg.tree, cfg.k)
    return LayerSkipDrafter(skip_attn=sa, skip_mlp=sm, max_k=spec.depth if spec else cfg.k,
                            tree=spec)
