"""``eagle_lookup``: the EAGLE head and prompt lookup side by side, per row and step the
source with the larger expected gain.

Where the answer copies its input (summaries, answers from passages, extraction) prompt lookup
drafts long runs that the head, reading the copied text only through the target's features,
drafts poorly: on Spec-Bench summarization the shipped EAGLE-3 head gives 1.13x while prompt
lookup alone gives about 2x on the same kind of prompt. SAM-Decoding (Hu et al., 2024) pairs a
retrieval draft with a model drafter and takes the retrieval draft when its match is long;
here the choice is per row and step by expected accepted tokens, as in ``ngram``:

* every step prompt lookup's chains are computed, one per match order: the continuation of
  the most recent ``n``-gram match in the row's text, for each ``n`` from ``max_ngram`` down
  to ``min_ngram``, up to ``lookup_k`` tokens (lookups, no model);
* each source (the head, and lookup at each order) has a per-row running estimate ``a_s`` of
  its per-token acceptance (counts decayed by ``decay`` per step, starting from ``prior_*``
  with weight ``prior_weight``); a lookup chain is cut where ``a ** i`` falls below
  ``min_gain``. Separate estimates per order matter: in free writing, chance 2-gram matches
  that agree for a token or two lifted a single lookup estimate until long chains were taken
  and failed (humanities 1.44x -> 1.17x in the first scouting run), while 3-gram matches
  there are rare and copying categories match at every order;
* the row takes the lookup chain with the largest ``sum_i a ** i`` when that exceeds the
  head's ``sum_{i <= k} a_eagle ** i`` by more than ``margin``, else the head drafts its
  ``k`` tokens; a row that takes a lookup chain runs none of the head's draft steps (at batch
  1 the head's chain loop runs zero times), only the catch-up pass that keeps its cache exact;
* after verification the estimates learn from the committed tokens: every lookup chain is
  compared every step (it was computed anyway), the head's only where it drafted.

The head's state stays exact whichever source drafted: ``update`` receives the target's
features of the root and the accepted tokens from the verify pass, whatever proposed them.
Lookup's drafts are deterministic; under sampling their draft distribution is the one-hot of
the token (the verifier's rule for deterministic drafts), so outputs keep the target's
distribution; greedy outputs are plain decoding's token for token.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.drafters.base import DRAFTERS, StepContext, check_k
from specjax.drafters.eagle import EagleConfig, EagleDrafter, make_eagle
from specjax.drafters.ngram import confident_length, expected_accepted, \
    learn_from_committed, running_alpha
from specjax.drafters.prompt_lookup import continuation, ngram_starts
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.tree import DraftTree

EAGLE = 0  # source index of the head in the per-row counters; lookup orders follow


@dataclasses.dataclass(frozen=True)
class EagleLookupConfig:
    """Options of ``eagle_lookup``."""

    k: int = dataclasses.field(default=3, metadata={"help": "the head's chain length"})
    lookup_k: int = dataclasses.field(default=8, metadata={
        "help": "longest prompt-lookup chain"})
    head: str | None = dataclasses.field(default=None, metadata={
        "help": "the EAGLE head (as for the eagle method; default: the shipped one)"})
    quantize: str = dataclasses.field(default="auto", metadata={
        "help": "the head's products: auto | none | w8a8 (as for the eagle method)"})
    draft_vocab: int | None = dataclasses.field(default=None, metadata={
        "help": "draft vocabulary of a random head (head=random; as for the eagle method)"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of a random head"})
    min_ngram: int = dataclasses.field(default=2, metadata={
        "help": "shortest lookup match (each order from max_ngram down is its own source)"})
    max_ngram: int = dataclasses.field(default=3, metadata={"help": "longest lookup match"})
    prior_eagle: float = dataclasses.field(default=0.6, metadata={
        "help": "prior per-token acceptance of the head's drafts"})
    prior_lookup: float = dataclasses.field(default=0.5, metadata={
        "help": "prior per-token acceptance of lookup's drafts"})
    prior_weight: float = dataclasses.field(default=2.0, metadata={
        "help": "weight of the priors, in drafted tokens"})
    decay: float = dataclasses.field(default=0.9, metadata={
        "help": "per-step decay of each source's acceptance counts"})
    min_gain: float = dataclasses.field(default=0.3, metadata={
        "help": "lookup's chain is cut where a token's chance of acceptance (a^i) falls "
                "below this"})
    margin: float = dataclasses.field(default=0.0, metadata={
        "help": "lookup drafts when its expected accepted tokens exceed the head's by more "
                "than this"})

    def __post_init__(self):
        check_k(self.k)
        check_k(self.lookup_k)
        if not (isinstance(self.min_ngram, int) and isinstance(self.max_ngram, int)
                and 1 <= self.min_ngram <= self.max_ngram):
            raise DrafterError(f"eagle_lookup: need 1 <= min_ngram <= max_ngram, got "
                               f"{self.min_ngram!r}, {self.max_ngram!r}")
        for name in ("prior_eagle", "prior_lookup"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < 1):
                raise DrafterError(f"eagle_lookup: {name} must be in (0, 1), got {v!r}")
        if not (isinstance(self.prior_weight, (int, float)) and self.prior_weight > 0):
            raise DrafterError(f"eagle_lookup: prior_weight must be > 0, got "
                               f"{self.prior_weight!r}")
        if not (isinstance(self.decay, (int, float)) and 0 < self.decay <= 1):
            raise DrafterError(f"eagle_lookup: decay must be in (0, 1], got {self.decay!r}")
        if not (isinstance(self.min_gain, (int, float)) and 0 <= self.min_gain < 1):
            raise DrafterError(f"eagle_lookup: min_gain must be in [0, 1), got "
                               f"{self.min_gain!r}")
        if not isinstance(self.margin, (int, float)):
            raise DrafterError(f"eagle_lookup: margin must be a number, got {self.margin!r}")


@dataclasses.dataclass(frozen=True)
class EagleLookupDrafter:
    eagle: EagleDrafter
    max_k: int
    eagle_k: int
    lookup_k: int
    orders: tuple[int, ...] = (3, 2)  # lookup match orders, one source each
    priors: tuple[float, float] = (0.6, 0.5)  # the head's, every lookup order's
    prior_weight: float = 2.0
    decay: float = 0.9
    min_gain: float = 0.3
    margin: float = 0.0
    description: str = ""
    tree: None = None
    name: str = "eagle_lookup"
    deterministic: bool = False

    @property
    def features(self) -> FeatureSpec:
        return self.eagle.features

    @property
    def stop_hidden_size(self) -> int:
        return self.eagle.stop_hidden_size

    @property
    def num_sources(self) -> int:
        return 1 + len(self.orders)

    def params(self):
        return self.eagle.params()

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B, S = prompt_tokens.shape[0], self.num_sources
        z = jnp.zeros((B, S), jnp.float32)
        return {"eagle": self.eagle.init(params, target, prompt_tokens, prompt_lens, cache_len,
                                         features),
                "acc": z, "trials": z,
                "drafts": jnp.zeros((B, S, self.max_k), jnp.int32),
                "lens": jnp.zeros((B, S), jnp.int32),
                "chosen": jnp.zeros((B, S), jnp.int32)}

    def alpha(self, state) -> jax.Array:
        """``[B, S]`` each source's running per-token acceptance estimate (the head, then
        lookup at each order of ``orders``)."""
        return running_alpha(state, [self.priors[0]] + [self.priors[1]] * len(self.orders),
                             self.prior_weight)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        K, Ke, Kl, Kh = self.max_k, self.eagle_k, self.lookup_k, self.eagle.max_k
        k = jnp.where(ctx.live, k, 0).astype(jnp.int32)
        # [B, O, Kl], [B, O]: each order's whole chain
        l_tok, l_len = continuation(ctx.seq, ctx.seq_len,
                                    ngram_starts(ctx.seq, ctx.seq_len, self.orders), Kl)
        alpha = self.alpha(state)
        cut = jnp.minimum(jnp.minimum(l_len, k[:, None]),
                          confident_length(alpha[:, 1:], self.min_gain, Kl))
        ke = jnp.minimum(k, Ke)
        gain_l = expected_accepted(alpha[:, 1:], cut, K)  # [B, O]
        gain_e = expected_accepted(alpha[:, EAGLE], ke, K)
        best = jnp.argmax(gain_l, axis=1)  # ties: the higher order
        rows = jnp.arange(k.shape[0])
        b_cut, b_tok = cut[rows, best], l_tok[rows, best]
        use_l = (b_cut > 0) & (gain_l[rows, best] > gain_e + self.margin)
        et, e_state, tcache = self.eagle.propose(params, target, state["eagle"], ctx,
                                                 jnp.where(use_l, 0, ke), greedy, stop)
        e_len = jnp.sum(et.valid, axis=1).astype(jnp.int32)

        def pad(x, width):
            return jnp.pad(x, [(0, 0), (0, K - width)] + [(0, 0)] * (x.ndim - 2))

        e_tok, b_tok = pad(et.tokens, Kh), pad(b_tok, Kl)
        tokens = jnp.where(use_l[:, None], b_tok, e_tok)
        n = jnp.where(use_l, b_cut, e_len)
        q = None
        if et.q is not None:  # lookup's deterministic drafts: one-hot draft distributions
            q_l = jax.nn.one_hot(b_tok, et.q.shape[-1], dtype=et.q.dtype)
            q = jnp.where(use_l[:, None, None], q_l, pad(et.q, Kh))
        l_all = jnp.pad(l_tok, ((0, 0), (0, 0), (0, K - Kl)))
        drafts = jnp.concatenate([e_tok[:, None], l_all], axis=1)  # [B, S, K]
        lens = jnp.concatenate([jnp.where(use_l, 0, e_len)[:, None], l_len], axis=1)
        drafted = (n > 0) & ctx.live
        src = jnp.where(use_l, 1 + best, EAGLE)
        chosen = state["chosen"] + (jax.nn.one_hot(src, self.num_sources, dtype=jnp.int32)
                                    * drafted[:, None])
        new = {**state, "eagle": e_state, "drafts": drafts, "lens": lens, "chosen": chosen}
        return DraftTree.chain(tokens, n, q), new, tcache

    def skip(self, params, target, state, ctx, features):
        """A step that drafted nothing: the head's pending features grow (its ``skip``);
        no estimate learns (nothing was drafted or compared)."""
        return {**state, "eagle": self.eagle.skip(params, target, state["eagle"], ctx,
                                                  features)}

    def update(self, params, state, ctx, n_acc, tree, path, features):
        e_state = self.eagle.update(params, state["eagle"], ctx, n_acc, tree, path, features)
        return {**learn_from_committed(state, ctx, n_acc, self.max_k, self.decay),
                "eagle": e_state}

    def stats(self, state) -> dict:
        """Steps each row drafted from the head (``eagle_lookup_head``), from prompt lookup
        at any order (``eagle_lookup_lookup``) and at each order n (``eagle_lookup_<n>gram``)."""
        ch = state["chosen"]
        out = {"eagle_lookup_head": ch[:, EAGLE], "eagle_lookup_lookup": ch[:, 1:].sum(1)}
        out.update({f"eagle_lookup_{n}gram": ch[:, 1 + i] for i, n in enumerate(self.orders)})
        return out


@DRAFTERS.register("eagle_lookup", config=EagleLookupConfig,
                   doc="the EAGLE head and prompt lookup side by side: per row and step the "
                       "source with the larger expected gain (SAM-Decoding's pairing)")
def make_eagle_lookup(cfg: EagleLookupConfig, target_lm) -> EagleLookupDrafter:
    # the head's pending buffer must hold what a lookup chain may commit (lookup_k + 1
    # pairs), so it is built for the longer chain; it drafts at most k tokens a step
    eagle = make_eagle(EagleConfig(k=max(cfg.k, cfg.lookup_k), head=cfg.head,
                                   quantize=cfg.quantize,
                                   draft_vocab=cfg.draft_vocab, seed=cfg.seed), target_lm)
    return EagleLookupDrafter(
        eagle=eagle, max_k=max(cfg.k, cfg.lookup_k), eagle_k=cfg.k, lookup_k=cfg.lookup_k,
        orders=tuple(range(cfg.max_ngram, cfg.min_ngram - 1, -1)),
        priors=(float(cfg.prior_eagle), float(cfg.prior_lookup)),
        prior_weight=float(cfg.prior_weight), decay=float(cfg.decay),
        min_gain=float(cfg.min_gain), margin=float(cfg.margin),
        description=f"{eagle.description} + prompt lookup")
