"""Cost-aware, acceptance-driven draft length (per row, per step).

Each row keeps decayed counts of accepted and rejected draft tokens, giving a per-token
acceptance estimate ``a = (A + 1) / (A + R + 2)``. With i.i.d. acceptance, drafting ``k`` tokens
yields ``(1 - a^(k+1)) / (1 - a)`` tokens per target forward, and the forward costs
``cost(k + 1)`` relative to a one-token forward (the verify-cost curve, bucketed as the engine
buckets its verify blocks). The policy drafts the ``k`` that maximises tokens per unit cost, and
nothing when no ``k`` beats plain decoding. Counts decay every step, so a row that stopped
drafting drifts back to the prior and probes again.

The default curve was measured for SmolLM2-135M (float32) on the project's 2-core CPU with
``specjax bench --verify-curve`` (docs/benchmarks.md); pass your device's curve elsewhere: a tuple
(``cost=``), or the JSON of ``specjax bench --verify-curve`` (``--method-arg
cost=curve.json``, or ``cost=curve.json#4`` for the batch-4 curve; :func:`load_cost_curve`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.drafters.base import DrafterError

# relative cost of a verify forward over T tokens, T = 1, 2, 3, ... (index T - 1): SmolLM2-135M,
# float32, batch 1, on the project's 2-core CPU with small-row products chunked
# (docs/results/verify_curve.json of 2026-11-24, interpolated between the measured k)
DEFAULT_COST = (1.0, 1.1873, 1.2601, 1.3329, 1.3988, 1.4647, 1.5305, 1.5964, 1.6774, 1.7585,
                1.8395, 1.9205, 2.0016, 2.0826, 2.1637, 2.2447, 2.3535)
# the same for SmolLM2-135M with w8a8 weights (``--quantize w8a8``): the integer products make
# a forward over a few tokens barely dearer than over one (docs/results/verify_curve_w8a8.json)
DEFAULT_COST_W8A8 = (1.0, 1.16, 1.25, 1.35, 1.48, 1.61, 1.74, 1.86, 2.02, 2.17, 2.32, 2.47, 2.62,
                     2.77, 2.92, 3.07, 3.2)


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
      DrafterError: naming the file, when it is missing, not JSON or not a verify curve.
    """
    import json
    from pathlib import Path

    try:
        curve = json.loads(Path(path).read_text())
        ks = [int(k) for k in curve["ks"]]
        rel = {int(b): [float(x) for x in v] for b, v in curve["relative"].items()}
    except FileNotFoundError:
        raise DrafterError(f"{path}: verify-curve file not found") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise DrafterError(f"{path}: not a verify-curve JSON (specjax bench --verify-curve): "
                           f"{type(e).__name__}: {e}") from None
    if not rel:
        raise DrafterError(f"{path}: the verify curve holds no batch sizes under 'relative'")
    b = min(rel) if batch is None else batch
    if b not in rel:
        raise DrafterError(f"{path}: no curve for batch {b}; it has batches {sorted(rel)}")
    ys = rel[b]
    if len(ys) != len(ks) or not ks or ks[0] != 1 or ks != sorted(set(ks)) or \
            any(not y > 0 for y in ys):
        raise DrafterError(f"{path}: the curve needs increasing ks from 1 and one positive "
                           f"time per k (ks={ks}, batch {b}: {ys})")
    out = []
    for T in range(1, ks[-1] + 1):
        j = next(i for i, k in enumerate(ks) if k >= T)
        if ks[j] == T:
            out.append(ys[j])
        else:  # between ks[j - 1] and ks[j]
            w = (T - ks[j - 1]) / (ks[j] - ks[j - 1])
            out.append((1 - w) * ys[j - 1] + w * ys[j])
    return tuple(round(c / out[0], 4) for c in out)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AdaptiveState:
    accepted: jax.Array  # float32[B] decayed accepted-token count
    rejected: jax.Array  # float32[B] decayed rejection count


@dataclasses.dataclass(frozen=True)
class AdaptivePolicy:
    max_k: int
    cost: tuple[float, ...] = DEFAULT_COST
    decay: float = 0.9
    prior_accepted: float = 1.0
    prior_rejected: float = 1.0
    min_gain: float = 1.0
    name: str = "adaptive"

    def __post_init__(self):
        if not isinstance(self.max_k, int) or self.max_k < 1:
            raise DrafterError(f"k must be an integer >= 1, got {self.max_k!r}")
        if not 0.0 < self.decay <= 1.0:
            raise DrafterError(f"decay must be in (0, 1], got {self.decay!r}")
        if len(self.cost) < 1 or any(c <= 0 for c in self.cost):
            raise DrafterError("cost must be a non-empty list of positive relative costs")

    def _bucketed_cost(self) -> jnp.ndarray:
        """cost[k] for drafting k = 0..max_k, at the engine's bucketed block size."""
        from specjax.speculative import verify_buckets

        buckets = verify_buckets(self.max_k)
        out = []
        for k in range(self.max_k + 1):
            T = next(b for b in buckets if b >= k + 1)
            c = self.cost[min(T, len(self.cost)) - 1]
            if T > len(self.cost):  # extrapolate linearly from the last two points
                slope = (self.cost[-1] - self.cost[-2]) if len(self.cost) > 1 else 0.1
                c = self.cost[-1] + slope * (T - len(self.cost))
            out.append(c)
        return jnp.asarray(out, jnp.float32)

    def init(self, batch: int):
        z = jnp.zeros((batch,), jnp.float32)
        return AdaptiveState(accepted=z, rejected=z)

    def expected_gain(self, state: AdaptiveState) -> jnp.ndarray:
        """Tokens per unit cost for k = 0..max_k, ``[B, max_k + 1]``."""
        a = (state.accepted + self.prior_accepted) / (
            state.accepted + state.rejected + self.prior_accepted + self.prior_rejected)
        a = jnp.clip(a, 0.0, 0.999)[:, None]
        k = jnp.arange(self.max_k + 1, dtype=jnp.float32)[None]
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / self._bucketed_cost()[None]

    def decide(self, state: AdaptiveState, ctx):
        gain = self.expected_gain(state)
        best = jnp.argmax(gain, axis=1).astype(jnp.int32)
        return jnp.where(jnp.max(gain, axis=1) > self.min_gain, best, 0)

    def update(self, state: AdaptiveState, k, n_draft, n_acc):
        rejected = (n_acc < n_draft).astype(jnp.float32)  # the draft stopped at a rejection
        return AdaptiveState(
            accepted=self.decay * state.accepted + n_acc.astype(jnp.float32),
            rejected=self.decay * state.rejected + rejected,
        )
