"""DSDE (card C3): draft length from the stability of the KL divergence between the target's
and the draft's distributions, as the authors' code computes it (which differs from the card).

Signal: ``KL(target || draft)`` at every drafted position of a row (clamped at 1e-8 from
below), appended to a per-row window of the last ``window`` values (100). The loop computes
it from the verify pass's logits and the draft distributions the drafter keeps (a chain
drafter with a draft distribution; the loop refuses others).

* WVIR (weighted variance index ratio): the weighted variance of the most recent third of the
  window over the weighted variance of the whole window, weights ``decay ** age`` (0.9;
  age 0 = the newest value); 20 when the whole window's variance is below 1e-6, 0 with fewer
  than 2 values.
* SF (scale factor): ``exp(2 * mean KLD of the row's last step / T) - 1`` (``T`` the sampling
  temperature; greedy runs use 1, as the code does not divide when greedy).
* SL (speculation length): ``max(k_min', ceil(k_min' + (k_max' - k_min') (1 - WVIR * SF)))``
  when ``WVIR * SF <= 1``, else ``k_min'``.
* Warm-up: a row starts at ``start_k`` (1) and doubles its ``k`` after every fully accepted
  round until its window fills; then it fixes ``k_max' = round(max accepted * (1 + 0.5 mean
  KLD / max KLD))`` (over the window) clipped to ``[k_min, max_k]`` and ``k_min' = ceil(0.1
  k_max')`` (at least ``k_min``), and SL takes over.
* Straggler cap: every row drafts at most ``ceil(mean SL of the batch's live rows)``, so one
  long draft does not hold the batch's verify block up (``cap=false`` switches it off).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.base import POLICIES, check_max_k, max_k_field


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DSDEState:
    buf: jax.Array       # float32[B, W] ring of KLD values
    count: jax.Array     # int32[B] values appended so far
    pos: jax.Array       # int32[B] next write slot
    last_kld: jax.Array  # float32[B] mean KLD of the last step that drafted
    k_warm: jax.Array    # int32[B] warm-up draft length
    warm: jax.Array      # bool[B] still warming up
    k_hi: jax.Array      # int32[B] k_max' (after warm-up)
    k_lo: jax.Array      # int32[B] k_min'
    max_acc: jax.Array   # int32[B] most tokens accepted in one step


def weighted_variance(values, weights):
    """Per row: ``sum w (v - m)^2 / sum w`` with ``m`` the weighted mean (0 where ``sum w``
    is 0)."""
    sw = jnp.sum(weights, axis=-1)
    m = jnp.sum(weights * values, axis=-1) / jnp.maximum(sw, 1e-30)
    v = jnp.sum(weights * (values - m[..., None]) ** 2, axis=-1) / jnp.maximum(sw, 1e-30)
    return jnp.where(sw > 0, v, 0.0)


@POLICIES.register("dsde", doc="DSDE: length from the stability (WVIR) and size (SF) of the "
                   "target-draft KL divergence, warm-up and straggler cap (chain drafters with "
                   "a draft distribution)")
@dataclasses.dataclass(frozen=True)
class DSDEPolicy:
    max_k: int = max_k_field()
    window: int = dataclasses.field(default=100, metadata={
        "help": "KLD values kept per row"})
    decay: float = dataclasses.field(default=0.9, metadata={
        "help": "weight of a value is decay ** age"})
    k_min: int = dataclasses.field(default=1, metadata={"help": "shortest draft"})
    start_k: int = dataclasses.field(default=1, metadata={"help": "first warm-up draft length"})
    cap: bool = dataclasses.field(default=True, metadata={
        "help": "straggler cap: at most ceil(mean SL of the batch)"})
    name: str = dataclasses.field(default="dsde", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)
    signals: tuple[str, ...] = dataclasses.field(default=("kld",), init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        for f in ("window", "k_min", "start_k"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise PolicyError(f"policy 'dsde': {f} must be an integer >= 1, got {v!r}")
        if self.window < 3:
            raise PolicyError(f"policy 'dsde': window must hold at least 3 values (its last "
                              f"third is compared with the whole), got {self.window}")
        if not 0.0 < self.decay <= 1.0:
            raise PolicyError(f"policy 'dsde': decay must be in (0, 1], got {self.decay!r}")
        if not self.k_min <= self.start_k <= self.max_k:
            raise PolicyError(f"policy 'dsde': need k_min <= start_k <= k ({self.max_k}), got "
                              f"k_min={self.k_min}, start_k={self.start_k}")

    def init(self, batch: int) -> DSDEState:
        zi = jnp.zeros((batch,), jnp.int32)
        return DSDEState(buf=jnp.zeros((batch, self.window), jnp.float32), count=zi, pos=zi,
                         last_kld=jnp.zeros((batch,), jnp.float32),
                         k_warm=jnp.full((batch,), self.start_k, jnp.int32),
                         warm=jnp.ones((batch,), bool), k_hi=zi + self.max_k,
                         k_lo=zi + self.k_min, max_acc=zi)

    def _ages(self, state):
        """Age of each slot (0 = newest) and whether it holds a value, ``[B, W]``."""
        W = self.window
        j = jnp.arange(W, dtype=jnp.int32)[None]
        age = jnp.mod(state.pos[:, None] - 1 - j, W)
        n = jnp.minimum(state.count, W)[:, None]
        return age, age < n

    def wvir(self, state) -> jax.Array:
        age, filled = self._ages(state)
        n = jnp.minimum(state.count, self.window)
        w = jnp.where(filled, self.decay ** age.astype(jnp.float32), 0.0)
        short = filled & (age < (n // 3)[:, None])
        v_long = weighted_variance(state.buf, w)
        v_short = weighted_variance(state.buf, jnp.where(short, w, 0.0))
        r = jnp.where(v_long < 1e-6, 20.0, v_short / jnp.maximum(v_long, 1e-30))
        return jnp.where(n < 2, 0.0, r)

    def scale(self, state, temperature) -> jax.Array:
        return jnp.exp(2.0 * state.last_kld / temperature) - 1.0

    def lengths(self, state, temperature) -> jax.Array:
        """SL per row (after warm-up)."""
        x = self.wvir(state) * self.scale(state, temperature)
        lo, hi = state.k_lo.astype(jnp.float32), state.k_hi.astype(jnp.float32)
        sl = jnp.maximum(lo, jnp.ceil(lo + (hi - lo) * (1.0 - x)))
        return jnp.where(x <= 1.0, sl, lo).astype(jnp.int32)

    def decide(self, state: DSDEState, ctx):
        t = jnp.float32(1.0) if ctx is None else ctx.temperature
        k = jnp.where(state.warm, state.k_warm, self.lengths(state, t))
        if self.cap:
            live = jnp.ones(k.shape, bool) if ctx is None else ctx.live
            mean = jnp.sum(jnp.where(live, k, 0)) / jnp.maximum(jnp.sum(live), 1)
            k = jnp.minimum(k, jnp.ceil(mean).astype(jnp.int32))
        return jnp.clip(k, 0, self.max_k).astype(jnp.int32)

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state: DSDEState, k, n_draft, n_acc, kld=None) -> DSDEState:
        if kld is None:
            raise PolicyError("policy 'dsde' needs the KL divergences of the drafted positions "
                              "(the decode loop passes them as kld=)")
        B, K = kld.shape
        W = self.window
        i = jnp.arange(K, dtype=jnp.int32)[None]
        drafted = i < n_draft[:, None]
        slot = jnp.where(drafted, jnp.mod(state.pos[:, None] + i, W), W)  # W: dropped
        rows = jnp.broadcast_to(jnp.arange(B)[:, None], (B, K))
        buf = state.buf.at[rows, slot].set(kld.astype(jnp.float32), mode="drop")
        nd = n_draft.astype(jnp.int32)
        count = state.count + nd
        pos = jnp.mod(state.pos + nd, W)
        step_mean = jnp.sum(jnp.where(drafted, kld, 0.0), axis=1) / jnp.maximum(nd, 1)
        last = jnp.where(nd > 0, step_mean, state.last_kld)
        max_acc = jnp.maximum(state.max_acc, n_acc.astype(jnp.int32))
        full = (nd > 0) & (n_acc >= nd)
        k_warm = jnp.where(full, jnp.minimum(2 * state.k_warm, self.max_k), state.k_warm)
        # the window fills: fix k_max' and k_min' from the warm-up
        done_now = state.warm & (count >= W)
        mean_w = jnp.mean(buf, axis=1)
        max_w = jnp.maximum(jnp.max(buf, axis=1), 1e-30)
        hi = jnp.round(max_acc * (1.0 + 0.5 * mean_w / max_w)).astype(jnp.int32)
        hi = jnp.clip(hi, self.k_min, self.max_k)
        lo = jnp.clip(jnp.ceil(0.1 * hi).astype(jnp.int32), self.k_min, self.max_k)
        return DSDEState(buf=buf, count=count, pos=pos, last_kld=last, k_warm=k_warm,
                         warm=state.warm & ~done_now,
                         k_hi=jnp.where(done_now, hi, state.k_hi),
                         k_lo=jnp.where(done_now, lo, state.k_lo), max_acc=max_acc)
