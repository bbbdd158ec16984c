"""PEARL (Liu et al., ICLR 2025; card C29): pre-verify / post-verify with an adaptive draft
length, on one device.

PEARL runs the drafter and the target at the same time on two devices. In *pre-verify* mode
(after a rejection) the drafter drafts ``gamma`` tokens while the target scores the current
position, so the first draft token is checked as soon as it exists: rejected, the round cost
one target forward and the drafts are dropped; accepted, the row switches to *post-verify*,
where the target verifies the ``gamma`` drafted tokens while the drafter already drafts the
next ``gamma``; all accepted, the next block is ready and the row stays in post-verify; a
rejection sends it back to pre-verify. The draft length adapts for free: one token is
verified after a rejection, ``gamma`` while drafts are being accepted.

**What one device cannot do, said plainly**: specjax's loop is one compiled program on one
device, so drafting and verifying run one after the other and nothing overlaps. This policy
keeps PEARL's decisions (which draft length each verify pass gets: ``1`` in pre-verify,
``gamma`` in post-verify, per row) and therefore its output and its tokens per forward; the
speed PEARL gains from overlap is not there. ``scripts/simulate_pearl.py`` simulates it from
measured times: every round of a row costs ``max(gamma * t_draft, t_verify(k + 1))`` on two
devices instead of ``k * t_draft + t_verify(k + 1)`` here, with the round counts this policy
records (``GenerationResult.extra``: ``pearl_pre`` / ``pearl_post``, rounds per mode). The
pre-verify pass here verifies ``[pending, x1]`` (two tokens, and gains the bonus token when
``x1`` is accepted) where PEARL's target scores one; the simulation charges the two-token
forward, an upper bound on PEARL's time.

``gamma`` defaults to the drafter's maximum ``k``; the paper sets it near the speed ratio of
target and drafter (the drafter's ``gamma`` tokens take about one target forward). A row that
drafted nothing (budget end, or a model-free drafter with no match) keeps its mode.
Lossless: verification is the exact rule whatever the lengths.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field

PRE, POST = 1, 0


@POLICIES.register("pearl", doc="PEARL: verify 1 token after a rejection (pre-verify), gamma "
                   "while drafts are accepted (post-verify); the two-device overlap is "
                   "simulated by scripts/simulate_pearl.py")
@dataclasses.dataclass(frozen=True)
class PearlPolicy:
    max_k: int = max_k_field()
    gamma: int | None = dataclasses.field(default=None, metadata={
        "help": "post-verify draft length (default: the maximum k)"})
    name: str = dataclasses.field(default="pearl", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        g = self.gamma
        if g is not None and (not isinstance(g, int) or isinstance(g, bool)
                              or not 1 <= g <= self.max_k):
            raise PolicyError(f"policy 'pearl': gamma must be an integer in [1, k] = "
                              f"[1, {self.max_k}], got {g!r}")

    @property
    def g(self) -> int:
        return self.max_k if self.gamma is None else self.gamma

    def init(self, batch: int):
        z = jnp.zeros((batch,), jnp.int32)
        return {"mode": jnp.full((batch,), PRE, jnp.int32), "pre": z, "post": z}

    def decide(self, state, ctx):
        return jnp.where(state["mode"] == PRE, 1, self.g).astype(jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        mode = state["mode"]
        drafted = n_draft > 0
        full = n_acc >= n_draft
        # pre-verify: the first token accepted -> post-verify; post-verify: a rejection -> pre
        new = jnp.where(mode == PRE, jnp.where(n_acc >= 1, POST, PRE),
                        jnp.where(full, POST, PRE))
        return {"mode": jnp.where(drafted, new, mode).astype(jnp.int32),
                "pre": state["pre"] + (drafted & (mode == PRE)),
                "post": state["post"] + (drafted & (mode == POST))}

    # host side, called by generate
    def stats(self, state) -> dict:
        """Rounds (steps that drafted) per row in each mode: ``pearl_pre``, ``pearl_post``."""
        return {"pearl_pre": state["pre"], "pearl_post": state["post"]}
