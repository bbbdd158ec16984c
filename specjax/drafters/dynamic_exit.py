"""DEL (Zarch et al., COLM 2025; card C6): the early-exit drafter that picks its exit layer and
its draft length per row and per step from live per-layer acceptance estimates.

DEL chooses the exit layer ``l`` and the length ``d`` together, by one argmax, so it lives in
the drafter (the exit layer is how the drafter drafts) rather than in a length policy: the
policy's ``k`` (``fixed`` by default) caps the length DEL picks, and ``--method del`` is DEL.

**Per-layer acceptance.** For every candidate exit layer the drafter keeps a decayed count of
matches and comparisons per row, from two kinds of evidence:

* direct: the layer that drafted a step gets ``n_acc`` matches out of ``min(n_acc + 1, d)``
  comparisons (the drafts up to and including the first rejection);
* shadow tokens: the verify pass returns the hidden states at every candidate layer; the
  token layer ``l`` would have drafted at the step's first position (final norm and LM head on
  its hidden state, top-1) is compared with the token the target emitted there. Only that
  position is used: it is conditioned on committed text alone, so it measures the layer and
  not earlier draft errors.

A shadow token costs one LM-head matmul. On the paper's 7B-class models the head is ~2-3% of a
forward; on SmolLM2-135M (49k vocabulary, 576 hidden) it is ~21%, more than seven of its 30
blocks, so shadow tokens every step would cost more than they save. ``shadow_budget`` bounds
what they cost per step on average: one candidate layer (round robin) every
``ceil(head_fraction / shadow_budget)`` steps (every step on a 7B model at the default 3%,
every 7th on SmolLM2-135M); 0 switches them off.

**Choice (token-per-layer, TPL).** With ``a_l`` the row's acceptance estimate at layer ``l``
(the decayed counts plus ``prior_weight`` pseudo-comparisons at ``prior``)::

    TPL(l, d) = (1 + a_l + ... + a_l^d) / (d * c(l) + v(d + 1))

``c(l) = (l * P_block + P_head) / (L * P_block + P_head)`` is the cost of one draft token at
exit ``l`` relative to a one-token forward (weights read, memory-bound decoding), ``v(T)`` the
machine's measured verify-cost curve (:mod:`specjax.cost_curves`, as the cost-aware policies
use). With ``P_head = 0`` and ``v = 1`` this is the paper's ``(1 - a^(d+1)) / (1 - a) /
(d l + L)`` up to the constant ``L``; the two terms it lacks matter at this model size (the
head) and on CPUs (the verify cost grows with ``T``). ``d = 0`` (plain decoding for the step)
is a choice too, so a row backs off where no layer pays. The paper's mid-draft confidence
exit is not reproduced (its threshold rule is not in the abstract or the card).

**Batching.** Rows draft at different layers: each draft forward runs to the deepest layer
any drafting row chose (a ``lax.switch`` over the candidates) and each row takes the logits
of its own layer. KV entries it writes past a row's layer are scratch, overwritten by the
verify pass like every draft entry. Chains only. Lossless: verification is unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from specjax.drafters._chain import chain_draft
from specjax.drafters.base import DRAFTERS, StepContext, check_k
from specjax.drafters.self_spec import _parse_layers, _target_model
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.policies.adaptive import _parse_cost, bucketed_cost, default_cost
from specjax.sampling import greedy_token
from specjax.tree import DraftTree


def block_and_head_params(cfg) -> tuple[int, int]:
    """Weights of one decoder block and of the LM head (what one token's forward reads)."""
    H, hd = cfg.hidden_size, cfg.head_dim
    attn = H * cfg.num_heads * hd * 2 + H * cfg.num_kv_heads * hd * 2
    mlp = 3 * H * cfg.intermediate_size
    return attn + mlp, cfg.vocab_size * H


def draft_token_cost(cfg, layers) -> tuple[float, ...]:
    """Cost of one draft token exiting after each of ``layers`` blocks, relative to a
    one-token forward of the whole model."""
    blk, head = block_and_head_params(cfg)
    full = cfg.num_layers * blk + head
    return tuple((layer * blk + head) / full for layer in layers)


def tpl_choice(alpha, layer_cost, verify_cost, k, first=None, reach=None):
    """DEL's argmax of tokens per unit cost over (candidate layer, length).

    Args:
      alpha: ``float32[B, C]`` acceptance estimate per row and candidate layer (with
        ``first``: of each token after the first, given the one before it was accepted).
      layer_cost: ``float32[C]`` cost of one draft token at each candidate.
      verify_cost: ``float32[K + 1]`` cost of verifying ``d + 1`` tokens, ``d = 0..K``.
      k: ``int32[B]`` the longest draft allowed per row, or ``int32[B, C]`` per row and
        candidate.
      first: optional ``float32[B, C]`` acceptance estimate of the first drafted token; the
        chance that the first ``d`` tokens are all accepted is then ``first * alpha ** (d - 1)``
        (default: ``alpha ** d``).
      reach: optional ``float32[B, C, K]``, the chance that the first ``d = 1..K`` tokens are
        all accepted, given outright (``alpha`` and ``first`` then give only the shape).
    Returns ``(layer_index int32[B], length int32[B], tpl float32[B])``; rows whose best is
    ``d = 0`` get layer index 0 (nothing is drafted).
    """
    K = verify_cost.shape[0] - 1
    d = jnp.arange(K + 1)
    if reach is not None:
        powers = jnp.concatenate([jnp.ones_like(reach[..., :1]), reach], axis=-1)
    elif first is None:
        powers = alpha[..., None] ** d  # [B, C, K+1]: a^0 .. a^K
    else:  # 1, f, f a, f a^2, ...
        powers = jnp.where(d == 0, 1.0, first[..., None] * alpha[..., None] ** jnp.maximum(
            d - 1, 0))
    expected = jnp.cumsum(powers, axis=-1)
    cost = d[None] * layer_cost[:, None] + verify_cost[None]  # [C, K+1]
    tpl = expected / cost[None]
    k = k[:, None] if k.ndim == 1 else k  # [B, C] or [B, 1]
    tpl = jnp.where(d[None, None] <= k[..., None], tpl, -jnp.inf)
    B, C = alpha.shape
    flat = tpl.reshape(B, C * (K + 1))
    # d = 0 costs the same at every layer: read it once so a tie goes to "no draft"
    flat = flat.at[:, 1:].set(jnp.where((jnp.arange(1, C * (K + 1)) % (K + 1) == 0)[None],
                                        -jnp.inf, flat[:, 1:]))
    best = jnp.argmax(flat, axis=1)
    layer, length = best // (K + 1), best % (K + 1)
    return (jnp.where(length > 0, layer, 0).astype(jnp.int32), length.astype(jnp.int32),
            jnp.max(flat, axis=1))


@dataclasses.dataclass(frozen=True)
class DynamicExitDrafter:
    """Early exit with a per-row, per-step exit layer and length (DEL)."""

    exit_layers: tuple[int, ...]
    max_k: int
    num_layers: int
    layer_cost: tuple[float, ...]
    cost: tuple[float, ...]
    prior: float = 0.5
    prior_weight: float = 2.0
    decay: float = 0.9
    shadow_every: int = 0
    name: str = "del"
    deterministic: bool = False
    tree: None = None

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec(layers=tuple(layer - 1 for layer in self.exit_layers))

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B = prompt_tokens.shape[0]
        C = len(self.exit_layers)
        zc = jnp.zeros((B, C), jnp.float32)
        root = jnp.stack([h[jnp.arange(B), prompt_lens - 1] for h in features.hidden], axis=1)
        return {"match": zc, "seen": zc, "layer": jnp.zeros((B,), jnp.int32),
                "length": jnp.zeros((B,), jnp.int32),
                # the hidden states of the newest committed position at every candidate and
                # the token the target put after it (the prefill's first token: not known
                # here, so the first step has no shadow evidence)
                "root": root, "root_token": jnp.zeros((B,), jnp.int32),
                "have_root": jnp.zeros((B,), bool), "step": jnp.zeros((), jnp.int32),
                "drafts": jnp.zeros((B, C), jnp.int32)}

    def alpha(self, state):
        w = self.prior_weight
        return (state["match"] + self.prior * w) / (state["seen"] + w)

    def _observe(self, state, col, matched, compared):
        """Adds ``matched`` of ``compared`` comparisons (per row) to the candidates ``col``
        (``bool[B, C]``), older evidence decayed."""
        m = jnp.asarray(matched, jnp.float32)
        n = jnp.broadcast_to(jnp.asarray(compared, jnp.float32), m.shape)
        match, seen = state["match"], state["seen"]
        return {**state, "match": jnp.where(col, self.decay * match + m[:, None], match),
                "seen": jnp.where(col, self.decay * seen + n[:, None], seen)}

    def _shadow(self, target, state):
        """One candidate layer's shadow token at the last step's first position, every
        ``shadow_every`` steps (round robin over the candidates)."""
        C = len(self.exit_layers)
        every = self.shadow_every
        c = (state["step"] // every) % C
        due = (state["step"] % every == 0) & jnp.any(state["have_root"])

        def look(s):
            h = jax.lax.dynamic_index_in_dim(s["root"], c, axis=1, keepdims=False)  # [B, H]
            tok = greedy_token(target.final_logits(h))
            hit = ((tok == s["root_token"]) & s["have_root"]).astype(jnp.float32)
            col = (jnp.arange(C) == c)[None] & s["have_root"][:, None]
            return self._observe(s, col, hit, 1.0)

        return jax.lax.cond(due, look, lambda s: s, state)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        K, C = self.max_k, len(self.exit_layers)
        if self.shadow_every > 0:
            state = self._shadow(target, state)
        k = jnp.where(ctx.live, k, 0)
        layer, length, _ = tpl_choice(self.alpha(state),
                                      jnp.asarray(self.layer_cost, jnp.float32),
                                      bucketed_cost(self.cost, K), k)
        length = jnp.minimum(jnp.where(ctx.live, length, 0), k)
        deepest = jnp.max(jnp.where(length > 0, layer, 0))
        n = ctx.seq_len - 1
        L = self.num_layers
        top = self.exit_layers[-1]  # blocks past the deepest candidate are never run

        def branch(j):
            exit_at = self.exit_layers[j]
            hidden_at = tuple(x - 1 for x in self.exit_layers[:j + 1])

            def run(tokens, positions, cache):
                o = target(tokens, positions, cache, exit_layer=exit_at, hidden_layers=hidden_at,
                           compute_logits=False, defer_cache_write=True)
                hs = jnp.stack(o.hidden + (jnp.zeros_like(o.hidden[0]),) * (C - j - 1))
                def every_layer(new):  # zeros up to the deepest candidate, None past it
                    return tuple(new[i] if i < exit_at else
                                 (jnp.zeros_like(new[0]) if i < top else None)
                                 for i in range(L))

                nk, nv = o.new_kv
                return hs[:, :, -1], every_layer(nk), every_layer(nv)  # hs: [C, B, D]

            return run

        def step(tokens, positions, cache):
            hs, ks, vs = jax.lax.switch(deepest, [branch(j) for j in range(C)],
                                        tokens, positions, cache)
            own = jnp.take_along_axis(hs, layer[None, :, None], axis=0)[0]  # [B, D]
            return target.final_logits(own), cache.write(ks, vs, cache.lengths)

        tokens, q, cache, length = chain_draft(step, ctx.target_cache, ctx.pending[:, None],
                                               n[:, None], K, length, ctx, greedy,
                                               target.cfg.vocab_size, skip_if_zero=True,
                                               stop=stop)
        drafted = (jnp.arange(C)[None] == layer[:, None]) & (length > 0)[:, None]
        state = {**state, "layer": layer, "length": length, "step": state["step"] + 1,
                 "drafts": state["drafts"] + drafted}
        return (DraftTree.chain(tokens, length, q), state,
                cache.with_lengths(ctx.target_cache.lengths))

    def update(self, params, state, ctx, n_acc, tree, path, features):
        C = len(self.exit_layers)
        d = state["length"]
        drafted = d > 0
        col = (jnp.arange(C)[None] == state["layer"][:, None]) & drafted[:, None]
        compared = jnp.minimum(n_acc + 1, d).astype(jnp.float32)
        state = self._observe(state, col, n_acc, compared)
        # the step's first position: hidden states at every candidate, and the token the
        # target emitted after it (committed length now = old length + n_acc + 1)
        B = n_acc.shape[0]
        root = jnp.stack([h[:, 0] for h in features.hidden], axis=1)
        at = jnp.clip(ctx.target_cache.lengths - n_acc, 0, ctx.seq.shape[1] - 1)
        token = ctx.seq[jnp.arange(B), at]
        return {**state, "root": root.astype(state["root"].dtype),
                "root_token": token, "have_root": ctx.live}

    # host side, called by generate
    def stats(self, state) -> dict:
        """Per row: steps that drafted at each candidate exit layer (``del_layer<l>``) and the
        final acceptance estimate of each, in thousandths (``del_alpha<l>``)."""
        alpha = jnp.round(1000 * self.alpha(state)).astype(jnp.int32)
        out = {f"del_layer{x}": state["drafts"][:, i] for i, x in enumerate(self.exit_layers)}
        out.update({f"del_alpha{x}": alpha[:, i] for i, x in enumerate(self.exit_layers)})
        return out


def default_candidates(num_layers: int) -> tuple[int, ...]:
    """A quarter, half and three quarters of the blocks (distinct, within 1..L-1)."""
    return tuple(sorted({min(max(1, round(num_layers * f)), num_layers - 1)
                         for f in (0.25, 0.5, 0.75)}))


@dataclasses.dataclass(frozen=True)
class DynamicExitConfig:
    """Options of ``del``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft length"})
    exit_layers: tuple[int, ...] | None = dataclasses.field(default=None, metadata={
        "parse": lambda v, args: _parse_layers(v, "exit_layers"),
        "help": "candidate exit layers (blocks run before the head), e.g. 4,8,16 "
        "(default: a quarter, half and three quarters of the blocks)"})
    prior: float = dataclasses.field(default=0.5, metadata={
        "help": "acceptance assumed before any evidence"})
    prior_weight: float = dataclasses.field(default=2.0, metadata={
        "help": "how many comparisons the prior counts as"})
    decay: float = dataclasses.field(default=0.9, metadata={
        "help": "weight of older evidence at each new observation"})
    shadow_budget: float = dataclasses.field(default=0.03, metadata={
        "help": "shadow-token cost per step, as a fraction of a one-token forward (0: off)"})
    cost: tuple[float, ...] | None = dataclasses.field(default=None, metadata={
        "parse": _parse_cost, "help": "relative verify cost of T = 1, 2, ... tokens, or a "
        "verify-curve JSON; default: measured on this machine (specjax.cost_curves)"})

    def __post_init__(self):
        check_k(self.k)
        if not 0.0 <= self.prior <= 1.0:
            raise DrafterError(f"del: prior must be in [0, 1], got {self.prior!r}")
        if not self.prior_weight > 0:
            raise DrafterError(f"del: prior_weight must be > 0, got {self.prior_weight!r}")
        if not 0.0 < self.decay <= 1.0:
            raise DrafterError(f"del: decay must be in (0, 1], got {self.decay!r}")
        if not 0.0 <= self.shadow_budget <= 1.0:
            raise DrafterError(f"del: shadow_budget must be in [0, 1], got "
                               f"{self.shadow_budget!r}")
        if self.cost is not None and (len(self.cost) < 1 or any(c <= 0 for c in self.cost)):
            raise DrafterError("del: cost must be a non-empty list of positive relative costs")


@DRAFTERS.register("del", config=DynamicExitConfig,
                   doc="DEL: early exit choosing its exit layer and draft length per row and "
                   "step from per-layer acceptance (shadow tokens) and token-per-cost")
def make_dynamic_exit(cfg: DynamicExitConfig, target_lm) -> DynamicExitDrafter:
    model = _target_model(target_lm)
    mcfg = model.cfg
    L = mcfg.num_layers
    layers = cfg.exit_layers if cfg.exit_layers is not None else default_candidates(L)
    if L < 2:
        raise DrafterError("del needs a target of at least 2 layers (an exit before the last)")
    bad = [x for x in layers if not 1 <= x < L]
    if not layers or bad:
        raise DrafterError(f"del: exit_layers must be layers in [1, {L - 1}] for this "
                           f"{L}-layer model, got {list(layers)}")
    blk, head = block_and_head_params(mcfg)
    frac = head / (L * blk + head)
    every = math.ceil(frac / cfg.shadow_budget) if cfg.shadow_budget > 0 else 0
    return DynamicExitDrafter(
        exit_layers=tuple(layers), max_k=cfg.k, num_layers=L,
        layer_cost=draft_token_cost(mcfg, layers),
        cost=tuple(cfg.cost) if cfg.cost is not None else default_cost(target_lm),
        prior=cfg.prior, prior_weight=cfg.prior_weight, decay=cfg.decay, shadow_every=every)
