"""GammaTune and GammaTune+ (card C4): acceptance-driven calibration of the draft length.

The paper gives no code and its abstract no update rule, so the rule here is this project's
reconstruction, with every constant a config field:

* per row a smoothed length ``g`` (float, starts at ``start``, default the maximum k);
* after a step whose whole draft was accepted, ``g += grow`` (the switch towards longer
  drafts); after a rejection, ``g = eta * accepted + (1 - eta) * g`` (exponential smoothing
  towards what was accepted); clipped to ``[min_k, max_k]``; a row that drafted nothing
  keeps ``g``;
* the step drafts ``round(g)`` tokens.

GammaTune+ adds a draft-confidence stop during drafting (a token whose top-1 draft
probability is below ``threshold`` ends the row's draft), as the ``confidence`` policy does.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field


def _check(p) -> None:
    check_max_k(p.name, p.max_k)
    if not 0.0 < p.eta <= 1.0:
        raise PolicyError(f"policy {p.name!r}: eta must be in (0, 1], got {p.eta!r}")
    if not p.grow >= 0:
        raise PolicyError(f"policy {p.name!r}: grow must be >= 0, got {p.grow!r}")
    if not isinstance(p.min_k, int) or not 0 <= p.min_k <= p.max_k:
        raise PolicyError(f"policy {p.name!r}: min_k must be in [0, {p.max_k}], got "
                          f"{p.min_k!r}")
    if p.start is not None and not p.min_k <= p.start <= p.max_k:
        raise PolicyError(f"policy {p.name!r}: start must be in [min_k, k] = "
                          f"[{p.min_k}, {p.max_k}], got {p.start!r}")


def _update(p, g, n_draft, n_acc):
    full = n_acc >= n_draft
    new = jnp.where(full, g + p.grow, p.eta * n_acc + (1.0 - p.eta) * g)
    new = jnp.clip(new, p.min_k, p.max_k)
    return jnp.where(n_draft > 0, new, g).astype(jnp.float32)


@POLICIES.register("gammatune", doc="GammaTune: smoothed draft length, +grow after a full "
                   "acceptance, smoothing towards the accepted count after a rejection "
                   "(reconstructed rule; constants are options)")
@dataclasses.dataclass(frozen=True)
class GammaTunePolicy:
    max_k: int = max_k_field()
    eta: float = dataclasses.field(default=0.5, metadata={
        "help": "smoothing weight of the accepted count after a rejection"})
    grow: float = dataclasses.field(default=1.0, metadata={
        "help": "added to the length after a fully accepted draft"})
    min_k: int = dataclasses.field(default=1, metadata={"help": "smallest draft length"})
    start: float | None = dataclasses.field(default=None, metadata={
        "help": "initial length (default: the maximum k)"})
    name: str = dataclasses.field(default="gammatune", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        _check(self)

    def init(self, batch: int):
        return jnp.full((batch,), self.max_k if self.start is None else self.start,
                        jnp.float32)

    def decide(self, state, ctx):
        return jnp.round(state).astype(jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        return _update(self, state, n_draft, n_acc)


@POLICIES.register("gammatune+", doc="GammaTune+: GammaTune's length and a draft-confidence "
                   "stop during drafting")
@dataclasses.dataclass(frozen=True)
class GammaTunePlusPolicy(GammaTunePolicy):
    threshold: float = dataclasses.field(default=0.4, metadata={
        "help": "stop a row's draft at a token whose top-1 draft probability is below this"})
    name: str = dataclasses.field(default="gammatune+", init=False)
    stops_mid_draft: bool = dataclasses.field(default=True, init=False)

    def __post_init__(self):
        _check(self)
        if not 0.0 <= self.threshold <= 1.0:
            raise PolicyError(f"policy 'gammatune+': threshold must be in [0, 1], got "
                              f"{self.threshold!r}")

    def stop(self, state, step):
        return jnp.max(step.probs, axis=-1) < self.threshold
