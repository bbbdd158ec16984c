"""Cost-aware, acceptance-driven draft length (per row, per step).

Each row keeps decayed counts of accepted and rejected draft tokens, giving a per-token
acceptance estimate ``a = (A + 1) / (A + R + 2)``. With i.i.d. acceptance, drafting ``k`` tokens
yields ``(1 - a^(k+1)) / (1 - a)`` tokens per target forward, and the forward costs
``step_cost[k]`` plain steps: when built by name for a model-based drafter, what a step that
drafts ``k`` tokens was measured to cost in the decode loop on this machine at this batch size
(:mod:`specjax.draft_costs`); otherwise ``cost(k + 1)`` relative to a one-token forward (the
verify-cost curve, bucketed as the engine buckets its verify blocks) plus ``draft_overhead + k *
draft_cost`` for the drafter's own work when ``k >= 1`` (0 unless given; a step that drafts
nothing is an idle step, a plain step). Each row drafts the ``k`` that maximises its tokens per
unit cost, and nothing when no ``k`` beats plain decoding. A batch verifies one block, its
longest draft's, so above batch 1 the batch drafts one length ``L`` (every live row; 0: a
plain step): by default (``batch_value='finish'``) the one that brings the batch's end
nearest per unit cost, ``min_rows E_r(L) / left_r`` (a static batch ends with its last row),
each row's estimate pulled toward the live rows' pooled one (``batch_pool``) and its extra
tokens scaled by ``batch_trust`` (:meth:`AdaptivePolicy._decide_finish`);
with ``batch_value='rows'`` each row its own best ``k`` when the live rows' expected tokens
per unit cost of that step beat one token per row (else no row drafts this step). Both weigh
each row's tokens and the block's cost by the row's running chance that the drafter offers a
draft when asked (a lookup drafter finds no match on most steps; at batch 1, with the default
``min_gain = 1``, the chance cancels). Counts decay every step (by ``idle_decay`` on a row's
steps without a draft, when given), so a row that stopped drafting drifts back to the prior
and probes again:
once a first draft is rejected where a one-token draft's step costs 1.4 plain steps, after
about 8 idle steps with ``decay = 0.9``, after about 35 with ``idle_decay = 0.98``
(tests/test_policies.py), after about 165 with 0.995 (the default of the drafters that are not
trained for the target and of the Medusa and Hydra heads, :data:`specjax.methods.CHAIN_DEFAULTS`).

The built-in curves are data files (``specjax/policies/curves/*.json``, written by ``specjax
bench --verify-curve``): SmolLM2-135M in float32 and w8a8 on the project's 2-core CPU
(docs/benchmarks.md). Pass your device's curve elsewhere: a tuple (``cost=``), or the JSON of
``specjax bench --verify-curve`` (``--method-arg cost=curve.json``, or ``cost=curve.json#4`` for
the batch-4 curve; :func:`load_cost_curve`).
"""

from __future__ import annotations

import dataclasses
import numbers
from pathlib import Path

import jax
import jax.numpy as jnp

from specjax.buckets import verify_block
from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field

_CURVES = Path(__file__).parent / "curves"


def default_cost(model) -> tuple[float, ...]:
    """The built-in cost curve that fits ``model`` (a Llama or a LoadedModel): float weights
    or w8a8 (:mod:`specjax.models.quant`)."""
    from specjax.models.quant import quantization_of

    m = getattr(model, "model", model)
    return DEFAULT_COST_W8A8 if quantization_of(m) == "w8a8" else DEFAULT_COST


def load_cost_curve(path: str, batch: int | None = None) -> tuple[float, ...]:
    """The ``cost`` tuple of :class:`AdaptivePolicy` from a ``specjax bench --verify-curve``
    JSON file: the curve of batch size ``batch`` (default: the smallest measured), linearly
    interpolated to every block size ``T = 1 .. max k`` of the file.

    Raises:
      PolicyError: naming the file, when it is missing, not JSON or not a verify curve.
    """
    import json

    try:
        curve = json.loads(Path(path).read_text())
        ks = [int(k) for k in curve["ks"]]
        rel = {int(b): [float(x) for x in v] for b, v in curve["relative"].items()}
    except FileNotFoundError:
        raise PolicyError(f"{path}: verify-curve file not found") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise PolicyError(f"{path}: not a verify-curve JSON (specjax bench --verify-curve): "
                          f"{type(e).__name__}: {e}") from None
    if not rel:
        raise PolicyError(f"{path}: the verify curve holds no batch sizes under 'relative'")
    b = min(rel) if batch is None else batch
    if b not in rel:
        raise PolicyError(f"{path}: no curve for batch {b}; it has batches {sorted(rel)}")
    ys = rel[b]
    if len(ys) != len(ks) or not ks or ks[0] != 1 or ks != sorted(set(ks)) or \
            any(not y > 0 for y in ys):
        raise PolicyError(f"{path}: the curve needs increasing ks from 1 and one positive "
                          f"time per k (ks={ks}, batch {b}: {ys})")
    return interpolate_curve(ks, ys, ks[-1])


def interpolate_curve(ks: list[int], ys: list[float], max_T: int) -> tuple[float, ...]:
    """``cost[T - 1]`` for T = 1 .. ``max_T`` (``<= ks[-1]``) from times ``ys`` measured at
    increasing block sizes ``ks`` (from 1): linear between measured sizes, relative to T = 1."""
    out = []
    for T in range(1, max_T + 1):
        j = next(i for i, k in enumerate(ks) if k >= T)
        if ks[j] == T:
            out.append(ys[j])
        else:  # between ks[j - 1] and ks[j]
            w = (T - ks[j - 1]) / (ks[j] - ks[j - 1])
            out.append((1 - w) * ys[j - 1] + w * ys[j])
    return tuple(round(c / out[0], 4) for c in out)


# relative cost of a verify forward over T tokens, T = 1 .. 64 (index T - 1): SmolLM2-135M at
# batch 1 on the project's 2-core CPU with small-row products chunked, float32 and w8a8
# (measured 2026-11-24, interpolated between the measured k; see the files' "command")
DEFAULT_COST = load_cost_curve(str(_CURVES / "smollm2-135m_float32.json"), 1)
DEFAULT_COST_W8A8 = load_cost_curve(str(_CURVES / "smollm2-135m_w8a8.json"), 1)


def finish_value(tokens: jnp.ndarray, left: jnp.ndarray, live: jnp.ndarray) -> jnp.ndarray:
    """``[K + 1]``: what a block of each draft length ``L`` is worth to a static batch, which
    ends with its last row: how soon the batch would finish at the rows' expected tokens per
    step, ``min over live rows of tokens[r, L] / left_r`` (1 when no row is live).
    ``tokens [B, K + 1]`` expected tokens per step, ``left [B]`` tokens each row may still
    write, ``live [B]``. Used by ``adaptive`` and ``ngram`` above batch 1."""
    rate = tokens / jnp.maximum(left, 1)[:, None].astype(tokens.dtype)
    value = jnp.min(jnp.where(live[:, None], rate, jnp.inf), axis=0)
    return jnp.where(jnp.any(live), value, 1.0)


def geometric_tokens(a: jnp.ndarray, max_k: int) -> jnp.ndarray:
    """Tokens a step yields in expectation, ``(1 - a^(k+1)) / (1 - a)`` for k = 0..max_k, when
    each drafted token is accepted with probability ``a`` (``[B]``, clipped to [0, 0.999])
    given the ones before it: ``[B, max_k + 1]``."""
    a = jnp.clip(a, 0.0, 0.999)[:, None]
    k = jnp.arange(max_k + 1, dtype=jnp.float32)[None]
    return (1 - a ** (k + 1)) / (1 - a)


def bucketed_cost(cost: tuple[float, ...], max_k: int) -> jnp.ndarray:
    """``cost[k]`` for drafting k = 0..max_k: the relative cost of the verify block the engine
    runs for ``k + 1`` tokens (its bucketed size; linearly extrapolated past the curve)."""
    out = []
    for k in range(max_k + 1):
        T = verify_block(k, max_k)
        c = cost[min(T, len(cost)) - 1]
        if T > len(cost):  # extrapolate linearly from the last two points
            slope = (cost[-1] - cost[-2]) if len(cost) > 1 else 0.1
            c = cost[-1] + slope * (T - len(cost))
        out.append(c)
    return jnp.asarray(out, jnp.float32)


def tree_step_cost(cost: tuple[float, ...], tree, draft_cost: float = 0.0,
                   draft_overhead: float = 0.0, *, per_node: bool = True
                   ) -> tuple[float, ...]:
    """What a step that drafts a static tree's first ``d = 0..depth`` levels costs relative to
    a plain step: the verify curve ``cost`` at the block the engine runs for the nodes of
    those levels (breadth first, so the first ``nodes(d)`` of the tree; bucketed among the
    tree's blocks, :func:`specjax.buckets.verify_block`), plus ``draft_overhead + nodes(d) *
    draft_cost`` when ``d >= 1`` (``per_node``: a lookup drafter's work per node), or ``d *
    draft_cost`` with ``per_node=False`` (a model-based drafter runs one draft step per level,
    whatever its width). A policy's ``k`` cuts a tree at depth ``k``, so this is its
    ``step_cost`` for a tree drafter: a chain's curve would price a ten-node tree's first
    level (four nodes) as a two-token block."""
    from specjax.tree import static_topology

    _, _, depth = static_topology(tree, tree.depth)
    by_nodes = bucketed_cost(cost, len(depth))  # [N + 1]: by the number of nodes drafted
    base = float(by_nodes[0])
    out = [1.0]
    for d in range(1, tree.depth + 1):
        nodes = sum(1 for x in depth if x <= d)
        out.append(float(by_nodes[nodes]) / base + draft_overhead
                   + (nodes if per_node else d) * draft_cost)
    return tuple(out)


def drafting_step_cost(cost: tuple[float, ...], max_k: int, draft_cost: float,
                       draft_overhead: float) -> jnp.ndarray:
    """What a step that drafts k = 0..max_k tokens costs relative to a plain step: the
    bucketed verify block, plus ``draft_overhead + k * draft_cost`` when ``k >= 1`` (a step
    that drafts nothing is an idle step)."""
    k = jnp.arange(max_k + 1, dtype=jnp.float32)
    return bucketed_cost(cost, max_k) + k * draft_cost + jnp.where(k > 0, draft_overhead, 0.0)


def policy_step_cost(policy) -> jnp.ndarray:
    """What a step that drafts k = 0..max_k tokens costs relative to a plain step under a
    cost-aware policy (``adaptive``, ``smartspec``): its measured ``step_cost`` when it has
    one, else :func:`drafting_step_cost` of its verify curve and draft costs."""
    if policy.step_cost:
        return jnp.asarray(policy.step_cost, jnp.float32)
    return drafting_step_cost(policy.cost, policy.max_k, policy.draft_cost,
                              policy.draft_overhead)


def check_step_cost(policy) -> None:
    """``step_cost`` is empty or holds ``max_k + 1`` positive costs, the first 1 (k = 0)."""
    sc = policy.step_cost
    if not sc:
        return
    if len(sc) != policy.max_k + 1 or any(not c > 0 for c in sc) or sc[0] != 1.0:
        raise PolicyError(f"policy {policy.name!r}: step_cost needs max_k + 1 = "
                          f"{policy.max_k + 1} positive costs for k = 0..{policy.max_k}, the "
                          f"first 1 (a step that drafts nothing is a plain step), got {sc!r}")


def _cost_parts(policy, k: int) -> str:
    """How a drafting step's cost was made, for messages."""
    if policy.step_cost:
        return "step_cost: measured in the decode loop, or a static tree's verify blocks"
    d, o = policy.draft_cost, policy.draft_overhead
    v = float(bucketed_cost(policy.cost, policy.max_k)[k])
    return (f"verify {v:.2f}, drafting overhead {o:.2f}, {k} x draft cost {d:.3f}")


def never_pays(policy, min_gain: float = 1.0, acceptance: float = 0.999) -> str | None:
    """Why no draft of 1..``max_k`` tokens beats ``min_gain`` tokens per plain step under the
    cost model of ``policy`` (:func:`policy_step_cost`) when each drafted token is accepted
    with probability ``acceptance`` (default: the estimate's ceiling, 0.999: then no draft can
    pay at all), or None when some draft does. A cost-aware policy whose acceptance estimate
    starts at a value where nothing pays, and does not move while it drafts nothing, never
    drafts: its runs decode plainly (:func:`specjax.engine.drafting_off`)."""
    import numpy as np

    step = np.asarray(policy_step_cost(policy))
    best = np.asarray(geometric_tokens(jnp.full((1,), acceptance), policy.max_k))[0]
    gain = best[1:] / step[1:]
    if float(gain.max()) > min_gain:
        return None
    k = int(gain.argmax()) + 1
    when = ("even if every drafted token were accepted" if acceptance >= 0.999 else
            f"at the acceptance estimate it starts from ({acceptance:.2f}), which does not "
            f"move while nothing is drafted")
    margin = (f", under the {min_gain:g} tokens per plain step that min_gain asks for"
              if min_gain != 1.0 else "")
    return (f"no draft pays {when}: the best, k = {k}, yields {best[k]:.2f} tokens for "
            f"{step[k]:.2f} plain steps{margin} ({_cost_parts(policy, k)})")


def check_draft_costs(policy) -> None:
    """``draft_cost`` and ``draft_overhead`` of a cost-aware policy are numbers >= 0."""
    for f in ("draft_cost", "draft_overhead"):
        v = getattr(policy, f)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v >= 0:
            raise PolicyError(f"policy {policy.name!r}: {f} must be >= 0, got {v!r}")


def draft_cost_field():
    """``draft_cost`` of a cost-aware policy (with the verify curve ``cost``)."""
    return dataclasses.field(default=0.0, metadata={
        "recorded": False,  # measured on the machine: see specjax.methods.changed_options
        "help": "cost of one drafted token relative to a plain step at this batch size, with "
        "the verify curve (a number; auto | refresh: measure step_cost instead, the default "
        "for a model-based drafter; builtin: 0)"})


def draft_overhead_field():
    """``draft_overhead`` of a cost-aware policy (with the verify curve ``cost``)."""
    return dataclasses.field(default=0.0, metadata={
        "recorded": False,
        "help": "fixed cost of a step that drafts at all, relative to a plain step (0 unless "
        "given; a number)"})


def step_cost_field():
    """``step_cost`` of a cost-aware policy (:func:`policy_step_cost`)."""
    return dataclasses.field(default=(), metadata={
        "recorded": False,
        "help": "cost of a step that drafts k = 0..max_k tokens relative to a plain step "
        "(1 first); when given it replaces cost, draft_cost and draft_overhead (default: "
        "measured in the decode loop on this machine for a model-based drafter, cached)"})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AdaptiveState:
    accepted: jax.Array  # float32[B] decayed accepted-token count
    rejected: jax.Array  # float32[B] decayed rejection count
    # decayed counts of the drafting steps that asked the row for a draft (k > 0) and of those
    # in which the drafter offered one (a lookup drafter finds no match on most steps); None:
    # every ask is answered (a state built by hand)
    asked: jax.Array | None = None
    offered: jax.Array | None = None


def _parse_cost(value: str, args) -> tuple[float, ...] | str:
    """``cost=`` from the command line: a ``FILE.json`` or ``FILE.json#B`` verify curve, or
    comma-separated relative costs (left to the tuple conversion)."""
    if value.split("#")[0].endswith(".json"):
        path, _, b = value.rpartition("#") if "#" in value else (value, "", "")
        if b and not b.isdigit():
            raise PolicyError(f"cost=FILE.json#B takes a batch size B, got {value!r}")
        return load_cost_curve(path, int(b) if b else None)
    return value


@POLICIES.register("adaptive", doc="cost-aware: per-row decayed acceptance estimate, drafts "
                   "the k maximising expected tokens per verify cost (0 when nothing pays)")
@dataclasses.dataclass(frozen=True)
class AdaptivePolicy:
    max_k: int = max_k_field()
    cost: tuple[float, ...] = dataclasses.field(default=DEFAULT_COST, metadata={
        "recorded": False,
        "parse": _parse_cost, "help": "relative verify cost of T = 1, 2, ... tokens, or a "
        "verify-curve JSON (FILE.json or FILE.json#B); default: the built-in curve that fits "
        "the target (float or w8a8)"})
    draft_cost: float = draft_cost_field()
    draft_overhead: float = draft_overhead_field()
    step_cost: tuple[float, ...] = step_cost_field()
    decay: float = dataclasses.field(default=0.9, metadata={
        "help": "per-step decay of the accepted/rejected counts"})
    idle_decay: float | None = dataclasses.field(default=None, metadata={
        "help": "decay of a row's counts on a step where it drafts nothing (default: decay); "
        "closer to 1, a row that stopped drafting probes again later"})
    prior_accepted: float = dataclasses.field(default=1.0, metadata={
        "help": "pseudo-count of accepted tokens every row's estimate starts from (with "
                "prior_rejected: the acceptance a0 = accepted / (accepted + rejected) and its "
                "weight); a run where no draft pays at a0 decodes plainly"})
    prior_rejected: float = dataclasses.field(default=1.0, metadata={
        "help": "pseudo-count of rejected tokens every row's estimate starts from"})
    min_gain: float = dataclasses.field(default=1.0, metadata={
        "help": "draft only when expected tokens per unit cost exceed this"})
    batch_value: str = dataclasses.field(default="finish", metadata={
        "help": "above batch 1, what a verify block is worth: 'finish', how soon the batch "
                "would finish at the rows' expected tokens per step (a static batch ends "
                "with its last row), or 'rows', the expected tokens of all live rows"})
    batch_trust: float = dataclasses.field(default=1.0, metadata={
        "help": "above batch 1 under 'finish', each row's expected extra tokens per step are "
                "scaled by this (1: as estimated; at batch 4 with the EAGLE-3 head 0.8 "
                "drafted too little, docs/benchmarks_notes.md)"})
    batch_pool: float = dataclasses.field(default=8.0, metadata={
        "help": "above batch 1 under 'finish', each row's acceptance estimate is pulled toward "
                "the live rows' pooled one with this weight in drafted tokens (the rows share "
                "one drafter; a row's own counts are few and noisy, and the batch waits for "
                "its lowest estimate)"})
    name: str = dataclasses.field(default="adaptive", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        if not 0.0 < self.decay <= 1.0:
            raise PolicyError(f"decay must be in (0, 1], got {self.decay!r}")
        if self.idle_decay is not None and not 0.0 < self.idle_decay <= 1.0:
            raise PolicyError(f"idle_decay must be in (0, 1], got {self.idle_decay!r}")
        if not (self.prior_accepted >= 0 and self.prior_rejected >= 0
                and self.prior_accepted + self.prior_rejected > 0):
            raise PolicyError(f"policy 'adaptive': prior_accepted and prior_rejected must be "
                              f">= 0 with a positive sum, got {self.prior_accepted!r} and "
                              f"{self.prior_rejected!r}")
        if len(self.cost) < 1 or any(c <= 0 for c in self.cost):
            raise PolicyError("cost must be a non-empty list of positive relative costs")
        if self.batch_value not in ("finish", "rows"):
            raise PolicyError(f"policy 'adaptive': batch_value must be 'finish' or 'rows', "
                              f"got {self.batch_value!r}")
        if not (isinstance(self.batch_pool, numbers.Real) and self.batch_pool >= 0):
            raise PolicyError(f"policy 'adaptive': batch_pool must be >= 0, got "
                              f"{self.batch_pool!r}")
        if not (isinstance(self.batch_trust, numbers.Real) and 0 < self.batch_trust <= 1):
            raise PolicyError(f"policy 'adaptive': batch_trust must be in (0, 1], got "
                              f"{self.batch_trust!r}")
        check_draft_costs(self)
        check_step_cost(self)

    def _bucketed_cost(self) -> jnp.ndarray:
        """The cost of a step that drafts k = 0..max_k (:func:`policy_step_cost`)."""
        return policy_step_cost(self)

    def init(self, batch: int):
        z = jnp.zeros((batch,), jnp.float32)
        return AdaptiveState(accepted=z, rejected=z, asked=z, offered=z)

    @staticmethod
    def offer_rate(state: AdaptiveState) -> jnp.ndarray:
        """Each row's estimated chance that the drafter offers a draft when asked,
        ``(offered + 1) / (asked + 1)`` (1 before any ask), ``[B]``."""
        if state.asked is None:
            return jnp.ones_like(state.accepted)
        return jnp.clip((state.offered + 1.0) / (state.asked + 1.0), 0.0, 1.0)

    def never_drafts(self) -> str | None:
        """Why this policy will not draft in a run, or None: at its initial state (the prior
        estimate, every row alike) no draft pays (:func:`never_pays`), and a step that drafts
        nothing leaves the counts at zero, so the estimate never leaves the prior. It is the
        batch-1 test: above batch 1 ``batch_trust < 1`` may keep the finish rule from drafting
        at the prior where this says it may; such a run idles (idle steps cost about a plain
        step) and gives the same output."""
        a0 = self.prior_accepted / (self.prior_accepted + self.prior_rejected)
        return never_pays(self, self.min_gain, acceptance=min(a0, 0.999))

    def _acceptance(self, state: AdaptiveState) -> jnp.ndarray:
        """The per-token acceptance estimate of each row, ``[B]``."""
        a = (state.accepted + self.prior_accepted) / (
            state.accepted + state.rejected + self.prior_accepted + self.prior_rejected)
        return jnp.clip(a, 0.0, 0.999)

    def expected_tokens(self, state: AdaptiveState) -> jnp.ndarray:
        """Expected tokens per step for k = 0..max_k, ``[B, max_k + 1]``."""
        return geometric_tokens(self._acceptance(state), self.max_k)

    def expected_gain(self, state: AdaptiveState) -> jnp.ndarray:
        """Tokens per unit cost for k = 0..max_k, ``[B, max_k + 1]``."""
        return self.expected_tokens(state) / self._bucketed_cost()[None]

    def decide(self, state: AdaptiveState, ctx):
        if (self.batch_value == "finish" and getattr(ctx, "left", None) is not None
                and state.accepted.shape[0] > 1):
            return self._decide_finish(state, ctx)
        tokens = self.expected_tokens(state)
        cost = self._bucketed_cost()
        gain = tokens / cost[None]
        best = jnp.argmax(gain, axis=1).astype(jnp.int32)
        k = jnp.where(jnp.max(gain, axis=1) > self.min_gain, best, 0)
        # The batch pays one step: the verify block and the draft steps of its longest draft.
        # Draft only if the live rows' expected tokens over that step's expected cost beat
        # plain decoding (one token per live row per unit cost). A row asked for a draft
        # offers one with its chance ``o`` (a lookup finds no match on most steps): it yields
        # ``1 + o (tokens - 1)``, and the step pays the block only when some row offers, with
        # chance ``1 - prod(1 - o)``, else a plain step. At batch 1 (``min_gain = 1``) ``o``
        # cancels: the row's own test, ``tokens > cost``.
        live = jnp.ones(k.shape, bool) if ctx is None else ctx.live
        k = jnp.where(live, k, 0)
        kmax = jnp.max(k)
        o = jnp.where(k > 0, self.offer_rate(state), 0.0)
        row_tokens = jnp.take_along_axis(tokens, k[:, None], 1)[:, 0]
        batch_tokens = jnp.where(live, 1.0 + o * (row_tokens - 1.0), 0.0).sum()
        p_block = 1.0 - jnp.prod(1.0 - o)
        step = 1.0 + p_block * (cost[kmax] - 1.0)
        pays = batch_tokens / step > self.min_gain * jnp.maximum(live.sum(), 1)
        return jnp.where(pays, k, 0).astype(jnp.int32)

    def _decide_finish(self, state: AdaptiveState, ctx):
        """The batch's block length ``L`` (every live row drafts ``L``; 0: a plain step) that
        brings the batch's end nearest per unit cost. A static batch ends with its last row:
        at ``E_r(L)`` expected tokens per step row ``r`` needs ``left_r / E_r(L)`` more steps,
        so a block is worth ``min_r E_r(L) / left_r`` (tokens won by a row that is ahead
        shorten nothing) over the step's expected cost. ``E_r(L) = 1 + o_r t (g_r(L) - 1)``:
        ``g_r`` the geometric expected tokens at the row's acceptance estimate (its counts
        with ``batch_pool`` drafted tokens at the live rows' pooled rate), ``o_r`` its
        chance of offering a draft when asked, ``t`` = ``batch_trust``; the step costs
        ``cost[L]`` when some row offers (chance ``1 - prod_r (1 - o_r)``), else a plain
        step. A draft as long as the block costs a row nothing more than a shorter one."""
        live = ctx.live
        tokens = self.expected_tokens(state)  # [B, K + 1]
        if self.batch_pool > 0:
            w = jnp.where(live, 1.0, 0.0)
            pa, pr = self.prior_accepted, self.prior_rejected
            pooled = (jnp.sum(w * state.accepted) + pa) / (
                jnp.sum(w * (state.accepted + state.rejected)) + pa + pr)
            a = (state.accepted + pa + self.batch_pool * pooled) / (
                state.accepted + state.rejected + pa + pr + self.batch_pool)
            tokens = geometric_tokens(jnp.clip(a, 0.0, 0.999), self.max_k)
        cost = self._bucketed_cost()
        o = jnp.where(live, self.offer_rate(state), 0.0)
        rows = 1.0 + o[:, None] * self.batch_trust * (tokens - 1.0)
        value = finish_value(rows, ctx.left, live)  # [K + 1]
        p_block = 1.0 - jnp.prod(1.0 - o)
        step = 1.0 + p_block * (cost - 1.0)
        step = step.at[0].set(1.0)
        per_cost = value / step
        L = jnp.argmax(per_cost)  # ties: the shorter block
        pays = per_cost[L] > self.min_gain * per_cost[0]
        return jnp.where(live & pays, L, 0).astype(jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state: AdaptiveState, k, n_draft, n_acc):
        rejected = (n_acc < n_draft).astype(jnp.float32)  # the draft stopped at a rejection
        d = self.decay
        if self.idle_decay is not None and self.idle_decay != self.decay:
            d = jnp.where(n_draft > 0, self.decay, self.idle_decay)
        asked = offered = None
        if state.asked is not None:
            ask = (jnp.zeros_like(n_draft) if k is None else jnp.asarray(k)) > 0
            asked = d * state.asked + ask.astype(jnp.float32)
            offered = d * state.offered + (ask & (n_draft > 0)).astype(jnp.float32)
        return AdaptiveState(
            accepted=d * state.accepted + n_acc.astype(jnp.float32),
            rejected=d * state.rejected + rejected,
            asked=asked, offered=offered,
        )
