"""SpecDec++ (card C5): stop drafting when the predicted probability that some draft token
of the step is rejected exceeds a threshold.

A trained acceptance head (:mod:`specjax.heads.acceptance`, trained by ``specjax train
acceptance`` for one drafter and target) predicts, for each drafted token, ``p_i``: the
probability that the target accepts it given that the earlier ones were accepted. The policy
keeps the running product ``c_i = p_0 ... p_i`` in the stop rule's carry and stops the row once
``1 - c > threshold``: the token whose prediction crossed the threshold is still verified and
nothing more is drafted (the paper's rule: the decision to stop follows the token's
prediction; ``keep_crossing=False`` drops that token too, saving its verify slot). Rows draft at
least ``k_min`` and at most ``k`` tokens. Decided mid-draft, per row, inside the compiled loop.

What the paper does and this does not: its head reads the draft model's hidden state after
the drafted token is fed back (one more draft forward); here it reads three statistics of the
token's draft distribution and the draft position, and optionally (``specjax train acceptance
--hidden``) the hidden state that produced that distribution (the next forward's input,
without the forward). The shipped head for the EAGLE-3 head on SmolLM2 reads the statistics
only: with the data a CPU session collects the hidden state overfits (docs/training.md). The head is
trained on greedy acceptances (its labels are 0/1 events of greedy verification); under
sampling it still cuts drafts losslessly, but its predictions are those of the greedy rule.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.errors import CheckpointError, PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field


def shipped_head_for(drafter) -> str | None:
    """The acceptance head shipped with the package for this very drafter (same name and
    parameter digest: e.g. the shipped EAGLE-3 head on SmolLM2), or None."""
    from specjax.heads import acceptance
    from specjax.heads.shipped import shipped_heads

    if getattr(drafter, "deterministic", False):
        return None
    found = shipped_heads("acceptance")
    if not found:
        return None
    digest = acceptance.drafter_digest(drafter)
    for path, conf in found:
        d = (conf.get("trained_for") or {}).get("drafter") or {}
        if d.get("name") == drafter.name and d.get("digest") == digest:
            return path
    return None


@POLICIES.register("specdec++", doc="SpecDec++: a trained acceptance head predicts each draft "
                   "token's acceptance; a row stops once 1 - prod(p) > threshold (acc_head=DIR "
                   "from specjax train acceptance)")
@dataclasses.dataclass(frozen=True)
class SpecDecPPPolicy:
    max_k: int = max_k_field()
    acc_head: str = dataclasses.field(default="", metadata={
        "recorded": False,  # a path of this checkout: see specjax.methods.changed_options
        "help": "acceptance head directory (specjax train acceptance --out DIR: DIR/head)"})
    threshold: float = dataclasses.field(default=0.7, metadata={
        "help": "stop a row once the predicted probability that some draft token of the step "
                "is rejected exceeds this"})
    k_min: int = dataclasses.field(default=1, metadata={
        "help": "draft at least this many tokens per row (if k allows)"})
    keep_crossing: bool = dataclasses.field(default=True, metadata={
        "help": "verify the token whose prediction crossed the threshold (the paper) or drop it"})
    name: str = dataclasses.field(default="specdec++", init=False)
    stops_mid_draft: bool = dataclasses.field(default=True, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        if not isinstance(self.threshold, (int, float)) or isinstance(self.threshold, bool) \
                or not 0.0 < self.threshold < 1.0:
            raise PolicyError(f"policy 'specdec++': threshold must be in (0, 1), got "
                              f"{self.threshold!r}")
        if not isinstance(self.k_min, int) or isinstance(self.k_min, bool) or self.k_min < 0:
            raise PolicyError(f"policy 'specdec++': k_min must be an integer >= 0, got "
                              f"{self.k_min!r}")
        if not isinstance(self.keep_crossing, bool):
            raise PolicyError("policy 'specdec++': keep_crossing must be true or false, got "
                              f"{self.keep_crossing!r}")
        if not self.acc_head:
            raise PolicyError("policy 'specdec++' needs acc_head=DIR: an acceptance head trained "
                              "for this drafter (specjax train acceptance); none ships for it")
        try:
            self._head()
        except CheckpointError as e:
            raise PolicyError(f"policy 'specdec++': {e}") from None

    def _head(self):
        from specjax.heads import acceptance

        return acceptance.load(self.acc_head)

    def check_target(self, lm) -> None:
        from specjax.heads import acceptance

        try:
            acceptance.check_target(self._head(), lm)
        except CheckpointError as e:
            raise PolicyError(f"policy 'specdec++': {e}") from None

    @staticmethod
    def defaults_for_drafter(args: dict, drafter) -> dict:
        """``args`` with ``acc_head`` set to the head shipped for ``drafter`` when none is
        given (see :func:`shipped_head_for`); called by :func:`specjax.methods.build`."""
        if args.get("acc_head"):
            return args
        found = shipped_head_for(drafter)
        return {**args, "acc_head": found} if found else args

    def check_drafter(self, drafter) -> None:
        from specjax.heads import acceptance

        if getattr(drafter, "deterministic", False):
            raise PolicyError(f"policy 'specdec++' reads each draft token's distribution: "
                              f"drafter {drafter.name!r} drafts deterministic copies without "
                              "one (use it with fixed, adaptive or another policy)")
        try:
            acceptance.check_drafter(self._head(), drafter)
        except CheckpointError as e:
            raise PolicyError(f"policy 'specdec++': {e}") from None

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def stop(self, state, step):
        """``(cut, carry, last)``: carry = log of the running product of predicted
        acceptances. With ``keep_crossing`` the token whose prediction crosses the threshold is
        kept and marked ``last`` (no further draft forward is run for the row); otherwise it is
        cut."""
        p = self._head().predict(step.index, step.token, step.probs, step.hidden)
        log_c = step.carry if step.carry is not None else jnp.zeros_like(p)
        new = log_c + jnp.log(jnp.clip(p, 1e-9, 1.0))
        crossed = (1.0 - jnp.exp(new)) > self.threshold
        if self.keep_crossing:
            return jnp.zeros_like(crossed), new, crossed & (step.index + 1 >= self.k_min)
        return crossed & (step.index >= self.k_min), new, jnp.zeros_like(crossed)

    def update(self, state, k, n_draft, n_acc):
        return state
