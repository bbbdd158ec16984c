"""SmartSpec (Liu et al., 2024; card C7): the draft length that maximises goodput.

Each row keeps an exponential moving average ``a_i`` of its per-token acceptance rate. For a
draft length ``k``, row ``i`` expects ``E_i(k) = (1 - a_i^(k+1)) / (1 - a_i)`` tokens from the
step, and the step costs ``T(k)`` plain one-token steps of the same batch: the verify forward
over ``k + 1`` tokens per row and ``k`` draft steps (``T(0) = 1``: a step that drafts nothing is
an idle step). Built by name for a model-based drafter, ``T`` is ``step_cost``, measured in the
decode loop on this machine at the running batch size (:mod:`specjax.draft_costs`); otherwise
``T(k) = cost(k + 1) + draft_overhead + k * draft_cost`` (``cost``: the batch's verify-cost
curve, measured on this machine on first use, bucketed as the engine buckets its verify
blocks). The paper's goodput is tokens per second, ``G(k) = sum_i E_i(k) / T(k)``; SmartSpec
picks ``argmax_k G(k)`` for the whole batch (one ``k``; ``k = 0``, plain decoding, wins under
load or low acceptance). ``per_row=True`` gives each row its own ``argmax_k E_i(k) / T(k)``
instead (the batch still pays the verify block of its longest draft: the engine verifies one
block size per step).

Estimating ``a``: a step that drafted ``n`` tokens and accepted ``m`` is ``m`` Bernoulli
successes followed by one failure when ``m < n``, so its observed per-token rate is
``m / (m + [m < n])`` (1 when everything was accepted), the rate of the geometric model
``E_i(k)`` assumes. (The fraction ``m / n`` would be biased low for long drafts.) The EMA takes
``ema`` of each new observation; a row that drafted nothing moves ``relax`` of the way back to
the prior, so a row (or a batch) that stopped drafting probes again later.

Deviations, stated: the paper fits ``t_draft`` and ``t_verify`` offline as functions of the
batched tokens; here the step's cost is measured whole, drafting and verification together,
in the decode loop of the running batch size at the largest draft length of each verify block
size (between them a shorter draft costs its block's; :mod:`specjax.draft_costs`): a few
percent of a plain step for one more drafted token of a trained head on one CPU row, a third of
a step at batch 4. Prompt lookup and the other model-free drafters use the verify curve with
nothing for drafting.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.adaptive import (DEFAULT_COST, _parse_cost, check_draft_costs,
                                       check_step_cost, draft_cost_field,
                                       draft_overhead_field, geometric_tokens, never_pays,
                                       policy_step_cost, step_cost_field)
from specjax.policies.base import POLICIES, check_max_k, max_k_field


@POLICIES.register("smartspec", doc="goodput-driven: the k maximising expected tokens per unit "
                   "step cost (verify curve + draft cost) for the whole batch, or per row")
@dataclasses.dataclass(frozen=True)
class SmartSpecPolicy:
    max_k: int = max_k_field()
    cost: tuple[float, ...] = dataclasses.field(default=DEFAULT_COST, metadata={
        "recorded": False,  # measured on the machine: see specjax.methods.changed_options
        "parse": _parse_cost, "help": "relative verify cost of T = 1, 2, ... tokens at this "
        "batch size (default: measured on this machine and cached; builtin | refresh | "
        "FILE.json[#B] | comma-separated values)"})
    draft_cost: float = draft_cost_field()
    draft_overhead: float = draft_overhead_field()
    step_cost: tuple[float, ...] = step_cost_field()
    ema: float = dataclasses.field(default=0.3, metadata={
        "help": "weight of each step's observed acceptance rate in the moving average"})
    prior: float = dataclasses.field(default=0.6, metadata={
        "help": "acceptance rate a row starts from (and relaxes to while not drafting)"})
    relax: float = dataclasses.field(default=0.05, metadata={
        "help": "per step without a draft, the fraction of the way back to the prior"})
    per_row: bool = dataclasses.field(default=False, metadata={
        "help": "each row its own best k instead of one k for the batch"})
    name: str = dataclasses.field(default="smartspec", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        if len(self.cost) < 1 or any(not c > 0 for c in self.cost):
            raise PolicyError("policy 'smartspec': cost must be a non-empty list of positive "
                              "relative costs")
        check_draft_costs(self)
        check_step_cost(self)
        for f in ("ema", "relax"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise PolicyError(f"policy 'smartspec': {f} must be in [0, 1], got "
                                  f"{getattr(self, f)!r}")
        if not 0.0 <= self.prior < 1.0:
            raise PolicyError(f"policy 'smartspec': prior must be in [0, 1), got {self.prior!r}")

    def init(self, batch: int):
        return jnp.full((batch,), self.prior, jnp.float32)

    def step_costs(self) -> jax.Array:
        """``T(k)`` for k = 0..max_k, relative to a plain step."""
        return policy_step_cost(self)

    def never_drafts(self) -> str | None:
        """Why this policy will not draft in a run, or None: at its prior acceptance rate no
        ``k >= 1`` beats one token per plain step (:func:`never_pays`), and a step without a
        draft relaxes the rate towards the prior, where it already is."""
        return never_pays(self, acceptance=self.prior)

    def expected_tokens(self, state) -> jax.Array:
        """``E_i(k)``, ``[B, max_k + 1]``."""
        return geometric_tokens(state, self.max_k)

    def decide(self, state, ctx):
        e = self.expected_tokens(state)
        t = self.step_costs()[None]
        if self.per_row:
            return jnp.argmax(e / t, axis=1).astype(jnp.int32)
        live = jnp.ones(state.shape, bool) if ctx is None else ctx.live
        goodput = jnp.sum(jnp.where(live[:, None], e, 0.0), axis=0) / t[0]
        return jnp.full(state.shape, jnp.argmax(goodput), jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        m = n_acc.astype(jnp.float32)
        trials = m + (n_acc < n_draft).astype(jnp.float32)
        rate = jnp.where(trials > 0, m / jnp.maximum(trials, 1.0), 1.0)
        seen = (1 - self.ema) * state + self.ema * rate
        idle = state + self.relax * (self.prior - state)
        return jnp.where(n_draft > 0, seen, idle).astype(jnp.float32)
