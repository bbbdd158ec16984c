"""The drafter's own cost, per drafted token and per drafting step, measured on the machine
it runs on, cached.

A speculative step that drafts ``k >= 1`` tokens costs about ``verify_B(k + 1) + o_B + k * d_B``
plain decoding steps of the same batch size ``B``: the verify forward over ``k + 1`` tokens per
row (the verify-cost curve, :mod:`specjax.cost_curves`), a fixed overhead ``o_B`` of any step
that drafts (the drafter's catch-up pass and update, the tree bookkeeping, the commit) and
``k`` draft steps of the drafter. A step that drafts nothing is an idle step (docs/design.md)
and costs a plain step. For prompt lookup ``d_B`` and ``o_B`` are about 0; for a trained head
on one row of a 2-core CPU ``d_B`` is a few percent of a target step; at batch 4 on the same
CPU the EAGLE-3 head's step costs about a third of a plain batch-4 step per drafted token plus
a quarter of a step for drafting at all (docs/benchmarks_notes.md), which is why drafting that
pays at batch 1 does not pay there. A cost-aware policy (``adaptive``, ``smartspec``) that
leaves them out keeps drafting where it loses.

:func:`measured_draft_costs` measures both inside the decode loop, where they are paid: the
seconds per target forward of plain decoding and of the drafter drafting ``k = 1`` and
``k = K = max_k`` every step, on the same synthetic prompt at the batch size's bucket. With
the measured verify curve, the excess of each over its verify block is ``e_1`` and ``e_K``;
then ``d_B = max(0, (e_K - e_1) / (K - 1))`` and ``o_B = max(0, e_1 - d_B)`` (for ``K = 1``:
``d_B = e_1``, ``o_B = 0``). Three compiles and a few seconds of decoding on first use;
cached as JSON in ``$SPECJAX_CACHE_DIR/draft_costs`` per (device, model, batch bucket,
drafter and its options), reused after. The mode is the cost curve's
(``$SPECJAX_COST_CURVE``, or ``draft_cost=auto|builtin|refresh``): ``builtin`` measures
nothing and gives 0 (the behaviour before draft costs were counted; the test suite's mode).
Model-free drafters (``model_free = True``: prompt lookup, n-gram, suffix structures, Token
Recycling, STAND, SSSD) draft by lookup and get 0 without measuring.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Callable

from specjax import atomic, cost_curves
from specjax.errors import PolicyError
from specjax.fingerprint import cache_root

# 3: measured after the exact numerics' verify step stopped copying every layer's KV cache
# (2026-11-27): costs of format 2 included those copies (the more, the larger the batch)
FORMAT = "specjax-draft-cost-3"
PREFIX = 128
STEPS = 24
REPEATS = 3


class DraftCostWarning(UserWarning):
    """A cached draft cost could not be used or written (it is measured again / not kept)."""


def cache_dir() -> Path:
    return cache_root() / "draft_costs"


def draft_cost_key(lm, drafter_name: str, drafter_args: dict, max_k: int, batch: int) -> dict:
    """What a draft cost is valid for: the verify curve's key (device, model, batch bucket)
    plus the drafter, its options as given and its maximum k."""
    args = {str(k): str(v) for k, v in sorted((drafter_args or {}).items())}
    return {**cost_curves.curve_key(lm, batch), "format": FORMAT, "drafter": drafter_name,
            "drafter_args": args, "max_k": int(max_k)}


class DraftEvery:
    """A policy that drafts ``k`` tokens in every row at every step (the probe's ``k = 1``)."""

    backs_off = False  # never every row k = 0: no idle steps compiled

    def __init__(self, max_k: int, k: int):
        self.max_k, self.k = int(max_k), int(k)
        self.name, self.stops_mid_draft = f"draft-every-{k}", False

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        import jax.numpy as jnp

        return jnp.full(ctx.seq_len.shape, self.k, jnp.int32)

    def stop(self, state, step):
        import jax.numpy as jnp

        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        return state


def measure_step_ratio(lm, drafter, batch: int, *, prefix: int = PREFIX, steps: int = STEPS,
                       repeats: int = REPEATS) -> dict:
    """Seconds per target forward of plain decoding (``plain_step_s``) and of ``drafter``
    drafting its ``max_k`` (``step_s``) and, when ``max_k > 1``, one token (``step1_s``) every
    step, ``batch`` rows of one synthetic prompt, greedy, no EOS. Each repeat decodes two token
    budgets ``steps`` apart (one compiled program) and takes the difference, so the prefill and
    the shorter drafts of the last steps cancel; median over ``repeats`` after a compiling
    run."""
    from specjax.bench.curve import seconds_per_forward
    from specjax.buckets import cache_length

    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(prefix)]
    K = int(drafter.max_k)
    short, long = K + 2, K + 2 + steps * (K + 1)
    cache_len = cache_length(prefix, long + 1)

    def per_forward(d, policy=None) -> float:
        return seconds_per_forward(lm, d, prompt, batch, (short, long), cache_len, repeats,
                                   policy=policy)

    out = {"plain_step_s": per_forward(None), "step_s": per_forward(drafter), "k": K,
           "batch": batch, "prefix": prefix, "steps": steps, "repeats": repeats}
    if K > 1:
        out["step1_s"] = per_forward(drafter, DraftEvery(K, 1))
    return out


def draft_cost_from(step_ratio: float, verify: tuple[float, ...], K: int) -> float:
    """``d = max(0, (step_ratio - verify_cost(K + 1)) / K)``, the verify block bucketed as the
    engine buckets it."""
    from specjax.policies.adaptive import bucketed_cost

    v = float(bucketed_cost(tuple(verify), K)[K])
    return max(0.0, (float(step_ratio) - v) / K)


def split_draft_cost(ratio_1: float, ratio_K: float, verify: tuple[float, ...],
                     K: int) -> tuple[float, float]:
    """``(d, o)``: the cost per drafted token and the fixed overhead of a drafting step, from
    the step ratios of drafting 1 and ``K`` tokens (see the module docstring); never
    negative."""
    from specjax.policies.adaptive import bucketed_cost

    v = [float(c) for c in bucketed_cost(tuple(verify), K)]
    e1 = float(ratio_1) - v[1]
    if K == 1:
        return max(0.0, e1), 0.0
    d = max(0.0, (float(ratio_K) - v[K] - e1) / (K - 1))
    return d, max(0.0, e1 - d)


def measured_draft_cost(lm, drafter, drafter_name: str, drafter_args: dict | None = None,
                        **kw) -> float:
    """``d_B`` alone (:func:`measured_draft_costs`)."""
    return measured_draft_costs(lm, drafter, drafter_name, drafter_args, **kw)[0]


def measured_draft_costs(lm, drafter, drafter_name: str, drafter_args: dict | None = None, *,
                         batch: int = 1, mode: str | None = None,
                         directory: str | Path | None = None,
                         measure: Callable[..., dict] | None = None,
                         measure_curve: Callable[..., dict] | None = None,
                         say: Callable[[str], None] | None = None) -> tuple[float, float]:
    """``(d_B, o_B)``: one drafted token's cost and the fixed overhead of a step that drafts,
    relative to a plain step at batch ``batch`` (see the module docstring), from the cache or
    measured and cached.

    Args:
      lm: the target (a LoadedModel).
      drafter: the built drafter (its ``max_k`` is the draft length measured).
      drafter_name, drafter_args: what keys the cache (the method name and its drafter
        options as given).
      batch: the batch size (bucketed as the verify curve's).
      mode: ``auto`` / ``builtin`` / ``refresh`` (default ``$SPECJAX_COST_CURVE``, else auto);
        ``builtin`` gives 0 (so does a model-free drafter, in every mode).
      directory: the cache directory (default :func:`cache_dir`).
      measure: ``measure(lm, drafter, batch) -> {"plain_step_s", "step_s", "step1_s", ...}``
        (default :func:`measure_step_ratio`; tests pass a fake; without ``step1_s`` the
        overhead is 0 and all of the excess counts per drafted token).
      measure_curve: the verify-curve probe handed to
        :func:`specjax.cost_curves.measured_cost` (default its own).
      say: where the one-line "measuring ..." notice goes (default: stderr).
    """
    m = cost_curves.resolve_mode(mode)
    if m == "builtin" or getattr(drafter, "model_free", False):
        return 0.0, 0.0
    K = int(drafter.max_k)
    key = draft_cost_key(lm, drafter_name, drafter_args or {}, K, batch)
    d_dir = Path(directory) if directory is not None else None
    path = cost_curves.curve_path(key, d_dir or cache_dir())  # the same key -> file naming
    if m == "auto" and path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("key") != key:
                raise ValueError("written for another device, model or drafter")
            d, o = float(data["draft_cost"]), float(data["draft_overhead"])
            if not (d >= 0 and o >= 0):
                raise ValueError(f"draft_cost {d!r} or draft_overhead {o!r} is negative")
            return d, o
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            warnings.warn(f"draft cost: {path} cannot be used ({type(e).__name__}: {e}); "
                          "measuring it again", DraftCostWarning, stacklevel=2)
    bucket = key["batch"]
    say = say or (lambda s: print(s, file=sys.stderr, flush=True))
    verify = cost_curves.measured_cost(lm, K, bucket, mode=m, measure=measure_curve, say=say,
                                       directory=None if d_dir is None else d_dir / "curves")
    say(
        f"measuring the draft cost of {drafter_name} (k = {K}, batch {bucket}) on this "
        f"machine; cached in {path.parent}")
    data = (measure or measure_step_ratio)(lm, drafter, bucket)
    ratio = float(data["step_s"]) / float(data["plain_step_s"])
    if "step1_s" in data:
        ratio_1 = float(data["step1_s"]) / float(data["plain_step_s"])
        d, o = split_draft_cost(ratio_1, ratio, verify, K)
    else:
        ratio_1, d, o = None, draft_cost_from(ratio, verify, K), 0.0
    from specjax.bench.machine import utc_now

    out = {**data, "step_ratio": round(ratio, 4),
           "step1_ratio": None if ratio_1 is None else round(ratio_1, 4),
           "draft_cost": round(d, 4), "draft_overhead": round(o, 4),
           "verify_cost": [round(float(c), 4) for c in verify], "key": key,
           "measured_at": utc_now(), "command": "specjax.draft_costs.measured_draft_cost"}
    try:
        atomic.write_text(path, json.dumps(out, indent=1))
    except OSError as e:
        warnings.warn(f"draft cost: could not cache it in {path} ({e}); it is measured again "
                      "next time", DraftCostWarning, stacklevel=2)
    return round(d, 4), round(o, 4)


def parse_draft_cost(value):
    """``draft_cost=`` of a policy: a number >= 0, or a mode (auto / builtin / refresh) that
    :func:`specjax.methods.build` replaces with the measured cost."""
    if isinstance(value, str) and value.strip().lower() in cost_curves.MODES:
        return value.strip().lower()
    try:
        d = float(value)
    except (TypeError, ValueError):
        raise PolicyError(f"draft_cost must be a number >= 0 or one of "
                          f"{', '.join(cost_curves.MODES)}, got {value!r}") from None
    if not d >= 0:
        raise PolicyError(f"draft_cost must be >= 0, got {value!r}")
    return d
