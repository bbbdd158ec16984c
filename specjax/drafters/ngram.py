"""``ngram``: the model-free sources side by side, the best one chosen per row and step.

Every step each source drafts a chain from the row's context (all inside the compiled loop):

* ``suffix``: the longest suffix match over the row's own text and the global cache of earlier
  outputs (:mod:`specjax.drafters.suffix`, its defaults; ``cache``, ``capacity`` and ``learn``
  pass through; the cache is 16,384 slots here, not the suffix method's 65,536: every step
  scans all of it, 0.6 ms per step at 65,536 on the project's 2-core CPU);
* ``prompt_lookup``: the most recent 3..2-gram match in the row's text
  (:mod:`specjax.drafters.prompt_lookup`);
* ``token_recycling`` (not a default source since 2026-12-04; ``sources=`` adds it): the
  chain of each token's recorded successor
  (:mod:`specjax.drafters.token_recycling`, a table of width 1). ``recycle_from=text`` (the
  default) records the next token of the row's own text; ``target`` records the target's
  top id after the token, which makes the prefill and every verify forward compute top-id
  features (the top id over the vocabulary at every position, since 2026-12-07 by
  :func:`specjax.sampling.greedy_token`; as a ``top_k`` on an 862-token prompt it cost about a
  second and a half of prefill on the 2-core CPU, 1.2 ms per step). Greedy, the two agree
  along the output; they differ on the prompt (its actual next token against the target's
  guess);
* ``sssd``: the chain of the SSSD datastore (n-gram statistics of the target's own answers
  shipped for it, or an empty datastore for another model, and of earlier outputs,
  :mod:`specjax.drafters.sssd`, without its budget and without its own-text match, which
  the suffix source covers; ``datastore`` passes through). A default source since
  2026-11-28: on the coding, STEM and writing questions where the other sources find little
  it cut target forwards by 10-20% (docs/benchmarks_notes.md).

Each row drafts the (source, length ``n``) with the most expected tokens per unit of verify
cost, ``(1 + sum_{i <= n} a_s ** i) / cost(n + 1)``, where ``a_s`` is the row's running
estimate of the source's per-token acceptance and ``cost`` the bucketed verify-cost curve of
the machine (:mod:`specjax.cost_curves`, measured on first use and cached, as for the
``adaptive`` policy; ``cost=`` takes a curve), ``n`` at most the source's chain (cut where
``a_s ** i`` falls below ``min_gain``); ``n = 0`` where nothing pays. In a batch one block
is verified for all rows, as long as the longest draft, so the choice is the batch's
(:func:`batch_choice`): the block length whose rows' expected tokens per step would finish
the batch soonest per verify cost of the batch's curve (a static batch ends with its last
row: ``batch_value=finish``; ``rows``, the expected tokens of all live rows, was the rule
until 2026-12-05, and before it each row chose as if it were alone), with the estimates
scaled by ``batch_trust``, then each row's best source within it. The sources run
and the choice is made in the drafter's ``plan``, before the step: a step where no row
drafts is an idle step (a plain forward and ``skip``, which learns the sources' estimates
from the committed token), not a verify pass of the pending token alone. Pricing
the length matters on a CPU: a 16-token chain is verified as a 17-token block, 2.2 plain
steps here against 1.4 for 16 tokens. Every source's estimate learns every step, not
only the chosen one's: after verification the committed tokens (accepted + the target's next)
are known, and each source's stored chain is compared with them: a mismatch at position ``m``
counts ``m`` accepted tokens and one rejection, a chain that agrees with all committed tokens
counts its agreeing tokens only (the rest is unobserved). For deterministic drafts this match
is exactly the acceptance event, greedy or sampled (a drafted token is accepted with the
target's probability of it, and then it is the committed token). Counts decay by
``source_decay`` per step and start from ``prior`` with weight ``prior_weight``.
``first_token=True`` counts the first drafted position apart: ``a_s ** i`` becomes
``f_s * r_s ** (i - 1)``, ``f_s`` the source's first-token acceptance and ``r_s`` each later
token's given the one before (copy sources are right in runs: a chain that starts right tends
to go on, and a source that keeps starting wrong, such as a token-recycling successor on a
translation, no longer buys one-token blocks on the pooled rate of its good runs).
``per_position=True`` goes further and counts every drafted position apart: the chance of
position ``i`` given the ones before it were accepted is ``h_s,i``, from that position's own
decayed counts shrunk toward the source's pooled ``a_s`` (with ``prior_weight``), and the
chance of ``i`` tokens is ``h_s,1 * ... * h_s,i``. A source whose chains keep breaking at the
same depth (suffix chains of a translation that copy a name and then diverge) is cut there,
while one whose chains run on keeps its pooled rate past the depths it has not been tried at.

Drafts are deterministic, so the verifier's exact rule keeps the output exactly plain
decoding's (greedy) or its distribution (sampling). The method's default policy is ``fixed``
(``k`` caps the chain; the choice above prices it): under ``adaptive`` the policy's single
acceptance estimate for the whole drafter shut drafting off after a few weak token-recycling
drafts (tau 1.1 against prompt lookup's 2.3 on a summarisation prompt, 2026-11-25).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from specjax.drafters.base import (DRAFTERS, StepContext, check_k, drafter_prefill_features,
                                   planned_k, skip_as_update)
from specjax.drafters.dynamic_exit import tpl_choice
from specjax.drafters.prompt_lookup import PromptLookupDrafter
from specjax.drafters.sssd import SSSDConfig, make_sssd
from specjax.drafters.suffix import SuffixConfig, make_suffix
from specjax.drafters.token_recycling import TokenRecyclingDrafter
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.policies.adaptive import _parse_cost, bucketed_cost, default_cost, finish_value
from specjax.tree import DraftTree

SOURCES = ("suffix", "prompt_lookup", "token_recycling", "sssd")
# token recycling drafts only when asked for (sources=...): replayed over 28 Spec-Bench questions
# it cost more in verify blocks than it returned in 11 of 13 categories
# (docs/benchmarks_notes.md, "ngram's choices replayed offline")
DEFAULT_SOURCES = ("suffix", "prompt_lookup", "sssd")


def _parse_sources(value, args=None) -> tuple[str, ...]:
    names = tuple(s.strip() for s in value.split(",") if s.strip()) if isinstance(
        value, str) else tuple(value)
    bad = [s for s in names if s not in SOURCES]
    if not names or bad or len(set(names)) != len(names):
        raise DrafterError(f"ngram: sources must be distinct names from {', '.join(SOURCES)}, "
                           f"got {value!r}")
    return names


@dataclasses.dataclass(frozen=True)
class NgramConfig:
    """Options of ``ngram``."""

    k: int = dataclasses.field(default=16, metadata={"help": "maximum draft length"})
    sources: tuple = dataclasses.field(default=DEFAULT_SOURCES, metadata={
        "parse": _parse_sources,
        "help": "comma-separated draft sources: suffix, prompt_lookup, token_recycling, sssd "
                "(default: suffix, prompt_lookup, sssd)"})
    prior: float = dataclasses.field(default=0.5, metadata={
        "help": "prior per-token acceptance of every source"})
    prior_weight: float = dataclasses.field(default=2.0, metadata={
        "help": "weight of the prior, in drafted tokens"})
    source_decay: float = dataclasses.field(default=0.9, metadata={
        "help": "per-step decay of each source's acceptance counts"})
    min_gain: float = dataclasses.field(default=0.3, metadata={
        "help": "a source's chain is cut where a token's chance of being accepted (a^i) "
                "falls below this"})
    cost: tuple[float, ...] | None = dataclasses.field(default=None, metadata={
        "parse": _parse_cost, "help": "relative verify cost of T = 1, 2, ... tokens, or a "
        "verify-curve JSON; default: measured on this machine (specjax.cost_curves) when "
        "built by name (methods.build, the CLI), else the built-in curve; the drafter's own: "
        "with policy=adaptive the policy's curve is measured apart"})
    recycle_from: str = dataclasses.field(default="text", metadata={
        "help": "token_recycling source: each token's successor as the target's top id after "
                "it (target: top-id features in every verify forward) or as the next token "
                "of the row's own text (text: no features)"})
    capacity: int = dataclasses.field(default=1 << 14, metadata={
        "help": "suffix source: global cache slots for a new cache (every step scans them "
                "all: 0.6 ms per step at 65,536 on a 2-core CPU)"})
    cache: object = dataclasses.field(default=None, metadata={
        "help": "suffix source: a SuffixCache, a .npz path, or none (see the suffix method)"})
    learn: bool = dataclasses.field(default=True, metadata={
        "help": "suffix and sssd sources: add every output to the global cache / the "
                "datastore after its batch"})
    first_token: bool = dataclasses.field(default=False, metadata={
        "help": "estimate each source's first drafted token apart from the tokens after it "
                "(a chain that starts right tends to go on right), the chance of i tokens "
                "first * rest^(i-1) instead of a^i"})
    per_position: bool = dataclasses.field(default=False, metadata={
        "help": "estimate each source's acceptance at every drafted position apart (given the "
                "positions before it accepted, shrunk toward the source's pooled rate), the "
                "chance of i tokens h_1 * ... * h_i; excludes first_token"})
    datastore: object = dataclasses.field(default=None, metadata={
        "help": "sssd source: a Datastore, a .npz path, a corpus directory, 'empty', or none "
                "(the one shipped for the target; see the sssd method)"})
    batch_trust: float = dataclasses.field(default=0.8, metadata={
        "help": "above batch 1, the acceptance estimates the choice weighs are scaled by "
                "this (at batch 4 they promised 1.24 times the tokens accepted: the best of "
                "several noisy estimates is the one chosen)"})
    batch_value: str = dataclasses.field(default="finish", metadata={
        "help": "above batch 1, what a verify block is worth: 'finish', how soon the batch "
                "would finish at the rows' expected tokens per step (a static batch ends "
                "with its last row), or 'rows', the expected tokens of all live rows"})

    def __post_init__(self):
        check_k(self.k)
        object.__setattr__(self, "sources", _parse_sources(self.sources))
        if not (isinstance(self.prior, (int, float)) and 0 < self.prior < 1):
            raise DrafterError(f"ngram: prior must be in (0, 1), got {self.prior!r}")
        if not (isinstance(self.prior_weight, (int, float)) and self.prior_weight > 0):
            raise DrafterError(f"ngram: prior_weight must be > 0, got {self.prior_weight!r}")
        if not (isinstance(self.min_gain, (int, float)) and 0 <= self.min_gain < 1):
            raise DrafterError(f"ngram: min_gain must be in [0, 1), got {self.min_gain!r}")
        if not (isinstance(self.source_decay, (int, float)) and 0 < self.source_decay <= 1):
            raise DrafterError(f"ngram: source_decay must be in (0, 1], got "
                               f"{self.source_decay!r}")
        if not (isinstance(self.batch_trust, (int, float)) and 0 < self.batch_trust <= 1):
            raise DrafterError(f"ngram: batch_trust must be in (0, 1], got "
                               f"{self.batch_trust!r}")
        if self.batch_value not in ("finish", "rows"):
            raise DrafterError(f"ngram: batch_value must be 'finish' or 'rows', got "
                               f"{self.batch_value!r}")
        if self.recycle_from not in ("target", "text"):
            raise DrafterError(f"ngram: recycle_from must be 'target' or 'text', got "
                               f"{self.recycle_from!r}")
        if self.first_token and self.per_position:
            raise DrafterError("ngram: first_token and per_position exclude each other "
                               "(per_position already counts the first position apart)")
        if self.cost is not None and (len(self.cost) < 1 or any(c <= 0 for c in self.cost)):
            raise DrafterError("ngram: cost must be a non-empty list of positive relative costs")


def reach_chance(alpha: jax.Array, K: int, first: jax.Array | None = None) -> jax.Array:
    """``[..., K]``: the chance that the first ``i = 1..K`` drafted tokens are all accepted,
    ``alpha ** i``, or ``first * alpha ** (i - 1)`` with a first-token estimate."""
    i = jnp.arange(1, K + 1, dtype=jnp.float32)
    if first is None:
        return alpha[..., None] ** i
    return first[..., None] * alpha[..., None] ** (i - 1)


def expected_accepted(alpha: jax.Array, n: jax.Array, K: int,
                      first: jax.Array | None = None) -> jax.Array:
    """``sum_{i=1..n} alpha ** i`` (``alpha``, ``n``: ``[..., S]``; with ``first``:
    ``sum_{i=1..n} first * alpha ** (i - 1)``)."""
    return reach_sum(reach_chance(alpha, K, first), n)


def confident_length(alpha: jax.Array, min_gain: float, K: int,
                     first: jax.Array | None = None) -> jax.Array:
    """The most tokens ``i`` whose chance of all being accepted (:func:`reach_chance`) is at
    least ``min_gain`` (at most ``K``)."""
    return reach_length(reach_chance(alpha, K, first), min_gain)


def reach_sum(reach: jax.Array, n: jax.Array) -> jax.Array:
    """``sum_{i=1..n} reach[..., i - 1]``: the expected accepted tokens of an ``n``-token
    draft whose first ``i`` tokens are all accepted with chance ``reach [..., K]``."""
    i = jnp.arange(1, reach.shape[-1] + 1)
    return jnp.sum(jnp.where(i <= n[..., None], reach, 0.0), axis=-1)


def batch_choice(reach: jax.Array, cut: jax.Array, verify_cost: jax.Array,
                 live: jax.Array, left: jax.Array | None = None
                 ) -> tuple[jax.Array, jax.Array]:
    """Each row's ``(source [B], length [B])`` when the batch verifies one block, whose size
    its longest draft sets: the block's draft length ``L`` worth the most per verify cost
    (``L = 0``: a plain step), and each row the source with the most expected tokens within
    ``L``, drafting its chain up to ``L`` (a longer draft than the row's own best costs
    nothing more in a block that size). At batch 1 it is the row's own choice
    (:func:`tpl_choice`).

    What a block is worth: with ``left [B]`` (tokens each row may still write), how soon the
    batch would finish drafting blocks of that size, ``min_rows tokens_row(L) / left_row``
    (``tokens_row(L)``: the row's most expected tokens per step within ``L``; a static batch
    ends with its last row, so tokens won by a row that is ahead shorten nothing). In a
    replay of the 52 batch-4 questions of ``configs/ngram_b4.py`` the sum over rows below
    ran at 0.96x plain decoding (0.86x in writing) and this at 1.02x
    (docs/benchmarks_notes.md). Without ``left``: the expected tokens of all live rows,
    ``sum_rows max_s (1 + reach_sum(s, min(cut_s, L)))`` (what serves a batch whose finished
    rows are replaced).

    ``reach [B, S, K]`` (:func:`reach_chance`), ``cut [B, S]`` the most tokens worth drafting
    from each source, ``verify_cost [K + 1]`` the bucketed cost of a step drafting ``0..K``,
    ``live [B]``."""
    B, S, K = reach.shape
    i = jnp.arange(1, K + 1)
    gained = jnp.where(i <= cut[..., None], reach, 0.0)  # [B, S, K]
    tokens = 1.0 + jnp.concatenate([jnp.zeros((B, S, 1), reach.dtype),
                                    jnp.cumsum(gained, axis=-1)], axis=-1)  # [B, S, K + 1]
    row = jnp.max(tokens, axis=1)  # [B, K + 1]: a row's most expected tokens within L
    if left is None:
        value = jnp.sum(jnp.where(live[:, None], row, 0.0), axis=0)
    else:
        value = finish_value(row, left, live)
    L = jnp.argmax(value / verify_cost)  # ties: the shorter block
    src = jnp.argmax(tokens[:, :, L], axis=1).astype(jnp.int32)
    n = jnp.minimum(cut[jnp.arange(B), src], L)
    n = jnp.where(live, n, 0).astype(jnp.int32)
    return jnp.where(n > 0, src, 0), n


def reach_length(reach: jax.Array, min_gain: float) -> jax.Array:
    """The most tokens ``i`` with ``reach[..., i - 1] >= min_gain`` (``reach`` falls with
    ``i``)."""
    return jnp.sum(reach >= min_gain, axis=-1).astype(jnp.int32)


def position_reach(state, alpha: jax.Array, weight: float) -> jax.Array:
    """``[B, S, K]``: the chance that a source's first ``i = 1..K`` drafted tokens are all
    accepted, the product of each position's conditional estimate (``state``'s ``acc_pos`` /
    ``trials_pos``, counted by :func:`learn_from_committed`) shrunk toward the source's pooled
    ``alpha [B, S]`` with ``weight`` drafted tokens."""
    h = ((state["acc_pos"] + alpha[..., None] * weight)
         / (state["trials_pos"] + weight))
    return jnp.cumprod(h, axis=-1)


def agreement(drafts: jax.Array, lens: jax.Array, committed: jax.Array, n_committed):
    """Per source: ``(accepted, trials)`` of its chain against the committed tokens.

    ``drafts[B, S, K]`` with ``lens[B, S]`` valid; ``committed[B, K + 1]`` with
    ``n_committed[B]`` valid. A chain's first disagreement at ``m`` inside what is known is
    ``m`` accepted and ``m + 1`` trials; a chain that agrees as far as both go is ``m`` and
    ``m`` (censored)."""
    B, S, K = drafts.shape
    known = jnp.minimum(lens, n_committed[:, None])  # [B, S]
    pos = jnp.arange(K)
    same = (drafts == committed[:, None, :K]) | (pos[None, None] >= known[..., None])
    m = jnp.argmin(jnp.concatenate([same, jnp.zeros((B, S, 1), bool)], -1), -1)
    m = jnp.minimum(m, known)
    rejected = m < known
    return m.astype(jnp.float32), (m + rejected).astype(jnp.float32)


def running_alpha(state, prior, weight: float) -> jax.Array:
    """``[B, S]`` each source's per-token acceptance estimate: ``state``'s decayed counts
    (``acc``, ``trials``) with ``prior`` (scalar or ``[S]``) at ``weight`` drafted tokens."""
    prior = jnp.asarray(prior, jnp.float32)
    return (state["acc"] + prior * weight) / (state["trials"] + weight)


def learn_from_committed(state, ctx, n_acc, K: int, decay: float) -> dict:
    """``state`` with its per-source counts after a step: every source's stored chain
    (``drafts [B, S, K]``, ``lens [B, S]``) compared with the tokens the step committed after
    the root (the accepted nodes, then the new pending token: :func:`agreement`), old counts
    decayed by ``decay``; rows no longer live keep theirs. A state with ``agreed [B, S]`` and
    ``best_agreed [B]`` adds up, undecayed, each source's agreeing tokens and the most of any
    source's per step (what choosing the best source in hindsight would have had accepted,
    at least: a chain that agrees as far as the committed tokens go is counted that far).
    A state with ``acc1`` / ``trials1`` also counts the first drafted position apart (a trial
    when the chain had a token there, accepted when it agreed); the positions after it are
    then ``acc - acc1`` accepted of ``trials - trials1``. A state with ``acc_pos`` /
    ``trials_pos`` (``[B, S, K]``) counts every position apart: a trial where the chain had a
    token and all before it were accepted, accepted when it agreed."""
    start = ctx.seq_len - 1 - n_acc  # index of the first token after the root
    idx = jnp.clip(start[:, None] + jnp.arange(K + 1)[None], 0, ctx.seq.shape[1] - 1)
    committed = jnp.take_along_axis(ctx.seq, idx, axis=1)
    acc, trials = agreement(state["drafts"], state["lens"], committed, n_acc + 1)
    live = ctx.live[:, None]
    out = {**state,
           "acc": jnp.where(live, decay * state["acc"] + acc, state["acc"]),
           "trials": jnp.where(live, decay * state["trials"] + trials, state["trials"])}
    if "acc1" in state:
        acc1, trials1 = jnp.minimum(acc, 1.0), jnp.minimum(trials, 1.0)
        out["acc1"] = jnp.where(live, decay * state["acc1"] + acc1, state["acc1"])
        out["trials1"] = jnp.where(live, decay * state["trials1"] + trials1, state["trials1"])
    if "agreed" in state:  # undecayed totals, for the run's counters
        m = jnp.where(live, acc, 0.0).astype(jnp.int32)
        out["agreed"] = state["agreed"] + m
        out["best_agreed"] = state["best_agreed"] + jnp.max(m, axis=1)
    if "acc_pos" in state:
        pos = jnp.arange(K, dtype=jnp.float32)
        acc_i = (pos < acc[..., None]).astype(jnp.float32)  # [B, S, K]
        trials_i = (pos < trials[..., None]).astype(jnp.float32)
        live3 = live[..., None]
        out["acc_pos"] = jnp.where(live3, decay * state["acc_pos"] + acc_i, state["acc_pos"])
        out["trials_pos"] = jnp.where(live3, decay * state["trials_pos"] + trials_i,
                                      state["trials_pos"])
    return out


def first_and_rest(state, prior, weight: float) -> tuple[jax.Array, jax.Array]:
    """``([B, S], [B, S])``: each source's estimate of its first drafted token's acceptance
    and of each later token's given the one before (the counts of
    :func:`learn_from_committed` with ``acc1``), both from ``prior`` at ``weight``."""
    prior = jnp.asarray(prior, jnp.float32)
    first = (state["acc1"] + prior * weight) / (state["trials1"] + weight)
    rest = ((state["acc"] - state["acc1"] + prior * weight)
            / (state["trials"] - state["trials1"] + weight))
    return first, rest


@dataclasses.dataclass(frozen=True)
class NgramDrafter:
    max_k: int
    sources: tuple  # the sub-drafters, in the order of ``names``
    names: tuple[str, ...]
    prior: float = 0.5
    prior_weight: float = 2.0
    source_decay: float = 0.9
    min_gain: float = 0.3
    # the verify curve; None (a drafter built by hand): the source with the most expected
    # accepted tokens, its whole (cut) chain, as before the choice was priced
    cost: tuple[float, ...] | None = None
    recycle_from: str = "text"
    capacity: int = 0
    first_token: bool = False
    per_position: bool = False
    batch_value: str = "finish"
    batch_trust: float = 0.8
    tree: None = None
    name: str = "ngram"
    model_free: ClassVar[bool] = True  # drafts by lookup: no model runs per drafted token
    deterministic: bool = True

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec(top_ids=max((d.features.top_ids for d in self.sources),
                                       default=0))

    @property
    def prefill_features(self) -> FeatureSpec:
        return FeatureSpec(top_ids=max((drafter_prefill_features(d).top_ids
                                        for d in self.sources), default=0))

    @property
    def description(self) -> str:
        """The options that change its drafts (results files and journal headers; the cost
        curve is the machine's and is left out)."""
        return (f"sources={','.join(self.names)} recycle_from={self.recycle_from} "
                f"capacity={self.capacity} min_gain={self.min_gain} prior={self.prior} "
                f"prior_weight={self.prior_weight} source_decay={self.source_decay} "
                f"priced={self.cost is not None}"
                # only when set, so journals of the earlier default still continue
                + (" first_token=True" if self.first_token else "")
                + (" per_position=True" if self.per_position else "")
                + (f" batch_value={self.batch_value}" if self.batch_value != "finish"
                   else "")
                + (f" batch_trust={self.batch_trust}" if self.batch_trust != 0.8 else ""))

    def _learners(self):
        """The sources that keep host-side text across calls (suffix cache, datastore)."""
        return [d for d in self.sources if hasattr(d, "observe")]

    def params(self):
        return tuple(d.params() for d in self.sources)

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B = prompt_tokens.shape[0]
        S, K = len(self.sources), self.max_k
        subs = tuple(d.init(p, target, prompt_tokens, prompt_lens, cache_len, features)
                     for d, p in zip(self.sources, params))
        zf = jnp.zeros((B, S), jnp.float32)
        counts = {}  # the options' own counts, kept only when asked for
        if self.first_token:
            counts = {"acc1": zf, "trials1": zf}
        if self.per_position:
            zk = jnp.zeros((B, S, K), jnp.float32)
            counts = {"acc_pos": zk, "trials_pos": zk}
        return {"subs": subs, "acc": zf, "trials": zf, **counts,
                "drafts": jnp.zeros((B, S, K), jnp.int32), "lens": jnp.zeros((B, S), jnp.int32),
                "chosen": jnp.zeros((B, S), jnp.int32), "agreed": jnp.zeros((B, S), jnp.int32),
                "best_agreed": jnp.zeros((B,), jnp.int32),
                "tokens": jnp.zeros((B, K), jnp.int32), "n": jnp.zeros((B,), jnp.int32)}

    def plan(self, params, target, state, ctx: StepContext, k, greedy):
        """Every source's chain and the row's choice, before the step: ``(n [B], state)``.
        A step where no row's choice drafts is an idle step (``skip``)."""
        subs, drafts, lens = [], [], []
        for d, p, s in zip(self.sources, params, state["subs"]):
            kk, s = planned_k(d, p, target, s, ctx, k, greedy)
            tree, s, _ = d.propose(p, target, s, ctx, kk, greedy)
            subs.append(s)
            drafts.append(tree.tokens)
            lens.append(jnp.sum(tree.valid, axis=1).astype(jnp.int32))
        drafts = jnp.stack(drafts, axis=1)  # [B, S, K]
        lens = jnp.stack(lens, axis=1)  # [B, S]
        reach = self._reach(state)  # [B, S, K]
        B = drafts.shape[0]
        if B > 1 and self.cost is not None:
            reach = reach * self.batch_trust
        cut = jnp.minimum(lens, reach_length(reach, self.min_gain))
        if self.cost is None:  # the most expected accepted tokens (ties: the first source)
            src = jnp.argmax(reach_sum(reach, cut), axis=1)
            n = cut[jnp.arange(B), src]
        elif B == 1:  # the most expected tokens per verify cost, over (source, length)
            S = len(self.sources)
            src, n, _ = tpl_choice(reach[..., 0], jnp.zeros((S,), jnp.float32),
                                   bucketed_cost(self.cost, self.max_k), cut, reach=reach)
        else:  # the batch verifies one block: the longest draft's (batch_choice)
            src, n = batch_choice(reach, cut, bucketed_cost(self.cost, self.max_k), ctx.live,
                                  ctx.left if self.batch_value == "finish" else None)
        tokens = drafts[jnp.arange(B), src]
        n = jnp.where(ctx.live, n, 0)
        chosen = state["chosen"] + (jax.nn.one_hot(src, len(self.sources), dtype=jnp.int32)
                                    * (n > 0)[:, None])
        state = {**state, "subs": tuple(subs), "drafts": drafts, "lens": lens,
                 "chosen": chosen, "tokens": tokens, "n": n}
        return n, state

    def _reach(self, state) -> jax.Array:
        """``[B, S, K]`` each source's chance that its first ``i`` drafted tokens are all
        accepted, by the estimate the options choose."""
        if self.first_token:
            first, rest = first_and_rest(state, self.prior, self.prior_weight)
            return reach_chance(rest, self.max_k, first)
        alpha = running_alpha(state, self.prior, self.prior_weight)
        if self.per_position:
            return position_reach(state, alpha, self.prior_weight)
        return reach_chance(alpha, self.max_k)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        # the chain ``plan`` chose this step; deterministic drafts: no stop hook
        return (DraftTree.chain(state["tokens"], jnp.minimum(k, state["n"])), state,
                ctx.target_cache)

    def update(self, params, state, ctx, n_acc, tree, path, features):
        subs = tuple(d.update(p, s, ctx, n_acc, tree, path, features)
                     for d, p, s in zip(self.sources, params, state["subs"]))
        return {**learn_from_committed(state, ctx, n_acc, self.max_k, self.source_decay),
                "subs": subs}

    # a step where no row drafted (``DecodeLoop.idle_skip``): every source's chain still
    # learns from the one committed token, and the sources record it (``update``)
    skip = skip_as_update

    # host side, called by generate
    def stats(self, state) -> dict:
        """Per row: steps that drafted from each source (``ngram_<source>``); tokens of each
        source's chain that agreed with what was committed, chosen or not
        (``ngram_agreed_<source>``); and the sum over steps of the most any source's chain
        agreed (``ngram_agreed_best``: accepted tokens had each step taken the best source in
        hindsight, at least, with no cut or price; set against ``accepted``)."""
        out = {f"ngram_{n}": state["chosen"][:, i] for i, n in enumerate(self.names)}
        out.update({f"ngram_agreed_{n}": state["agreed"][:, i]
                    for i, n in enumerate(self.names)})
        out["ngram_agreed_best"] = state["best_agreed"]
        return out

    def observe(self, prompts, outputs):
        for d in self._learners():
            d.observe(prompts, outputs)

    def learns_across_calls(self) -> bool:
        return any(d.learns_across_calls() for d in self._learners())

    def relearn(self, prompts, outputs) -> None:
        for d in self._learners():
            d.relearn(prompts, outputs)

    def snapshot(self):
        return tuple(d.snapshot() for d in self._learners())

    def restore(self, snap):
        if snap is None:
            return
        for d, s in zip(self._learners(), snap):
            d.restore(s)


@DRAFTERS.register("ngram", config=NgramConfig,
                   doc="suffix cache, prompt lookup, token recycling and the SSSD datastore "
                       "side by side: per row and step the source and length with "
                       "the most expected tokens per verify cost (model-free)")
def make_ngram(cfg: NgramConfig, target_lm) -> NgramDrafter:
    model = getattr(target_lm, "model", target_lm)
    subs = []
    for name in cfg.sources:
        if name == "suffix":
            subs.append(make_suffix(SuffixConfig(k=cfg.k, capacity=cfg.capacity,
                                                 cache=cfg.cache, learn=cfg.learn), target_lm))
        elif name == "sssd":  # the datastore alone (own text: the suffix source); no budget: the
            # cost-aware choice below prices the length
            subs.append(dataclasses.replace(
                make_sssd(SSSDConfig(k=cfg.k, datastore=cfg.datastore, budget_tol=math.inf,
                                     learn=cfg.learn), target_lm),
                own_text=False))
        elif name == "prompt_lookup":
            subs.append(PromptLookupDrafter(max_k=cfg.k, max_ngram=3, min_ngram=2))
        else:
            subs.append(TokenRecyclingDrafter(max_k=cfg.k, width=1,
                                              vocab_size=model.cfg.vocab_size,
                                              from_text=cfg.recycle_from == "text"))
    return NgramDrafter(max_k=cfg.k, sources=tuple(subs), names=tuple(cfg.sources),
                        prior=float(cfg.prior), prior_weight=float(cfg.prior_weight),
                        source_decay=float(cfg.source_decay), min_gain=float(cfg.min_gain),
                        cost=tuple(cfg.cost) if cfg.cost is not None else default_cost(target_lm),
                        recycle_from=cfg.recycle_from, first_token=bool(cfg.first_token),
                        per_position=bool(cfg.per_position), batch_value=cfg.batch_value,
                        batch_trust=float(cfg.batch_trust),
                        capacity=next((d.capacity for d, n in zip(subs, cfg.sources)
                                       if n == "suffix"), 0))
