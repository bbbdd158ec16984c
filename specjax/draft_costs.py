"""What a speculative step costs on the machine it runs on, measured in the decode loop,
cached: the cost model of the cost-aware policies (``adaptive``, ``smartspec``) for a
model-based drafter.

A step that drafts ``k >= 1`` tokens costs the verify forward over ``k + 1`` tokens per row, the
drafter's ``k`` draft steps and its bookkeeping (the catch-up pass, the tree, the commit);
a step that drafts nothing is an idle step, about a plain step (on the project's CPU at batch
1, 0.97 and 1.01 plain steps with the EAGLE-3 and Hydra++ heads, which both defer their
pass over idle steps' features). For prompt lookup the
drafting is about free; for a trained head on one row of a 2-core CPU one more drafted token
costs a few percent of a target step, at batch 4 about a third of one, which is why drafting
that pays at batch 1 does not pay there. A cost-aware policy that leaves it out keeps drafting
where it loses.

:func:`measured_step_costs` times the whole step where it is paid: seconds per target
forward of plain decoding and of the drafter drafting ``k`` tokens every step, for ``k`` the
largest draft of each verify block size the engine compiles (``k = 1`` and ``k = 3`` for
``max_k = 3``: blocks of 2 and 4 tokens), on one synthetic prompt at the batch size's bucket
with a KV cache as long as the generation's (:func:`probe_cache_length`: a plain step reads the
whole static cache, so what drafting costs over it moves with the cache's length),
the loops timed in turn within each repeat and each step taken over plain decoding's time in
the same repeat (median over repeats). The policy's ``step_cost[k]`` is the ratio timed at the
largest ``k'`` of ``k``'s block (a shorter draft into the same block saves only its draft
steps, not counted), never decreasing in ``k``, and 1 for ``k = 0``. A few compiles and
rounds of decoding on first use (about two and a half minutes per drafter at batch 1 on the
project's CPU); cached as JSON in ``$SPECJAX_CACHE_DIR/draft_costs`` per (device, model,
batch bucket, cache length, drafter and its options), reused after. The mode is the cost
curve's (``$SPECJAX_COST_CURVE``, or ``draft_cost=`` or ``cost=auto|builtin|refresh``):
``builtin`` times no step (the policy then prices drafting at nothing on the verify curve, the
built-in one under ``SPECJAX_COST_CURVE=builtin``, the test suite's mode). Model-free
drafters (``model_free = True``: prompt lookup, n-gram, suffix structures, Token Recycling,
STAND, SSSD) draft by lookup and are not measured. A caller's own cost model (``step_cost=``, or
numbers for ``cost=``, ``draft_cost=``, ``draft_overhead=``) is used as given.

Format 3 of this cache split the two timed steps into a cost per drafted token and a fixed
overhead against the verify-cost curve, which is timed on lone forwards in another process:
on this CPU that model priced the EAGLE-3 head's 3-token step at 1.45 plain steps where the
loop took 1.20 (the curve's 2-token block read 0.88 of a one-token forward, and the split
clamped the negative per-token cost to 0), so ``adaptive`` drafted less than paid
(docs/benchmarks_notes.md). Both points are now used as timed.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path
from typing import Callable

from specjax import atomic, cost_curves
from specjax.buckets import PROBE_CACHE, probe_cache_length
from specjax.errors import PolicyError
from specjax.fingerprint import cache_root

# 5: measured after the verify forward writes the target's cache in place (2026-12-05; its
# 4- and 9-token blocks 7% cheaper at batch 1, a 2-token block's step 1.40 -> 1.14 plain
# steps at batch 4); 4: the timed steps are the policy's step costs (2026-11-28); 3: split
# into a per-token cost and an overhead against the verify curve, measured after the exact
# numerics' verify step stopped copying every layer's KV cache (2026-11-27)
FORMAT = "specjax-draft-cost-5"
PREFIX = 128
STEPS = 24
REPEATS = 5


class DraftCostWarning(UserWarning):
    """A cached draft cost could not be used or written (it is measured again / not kept)."""


def cache_dir() -> Path:
    return cache_root() / "draft_costs"


def draft_cost_key(lm, drafter_name: str, drafter_args: dict, max_k: int, batch: int,
                   cache_len: int | None = None) -> dict:
    """What a draft cost is valid for: the verify curve's key (device, model, batch bucket)
    plus the drafter, its options as given, its maximum k and the probe's cache length
    (:func:`probe_cache_length` of ``cache_len``)."""
    args = {str(k): str(v) for k, v in sorted((drafter_args or {}).items())}
    return {**cost_curves.curve_key(lm, batch), "format": FORMAT, "drafter": drafter_name,
            "drafter_args": args, "max_k": int(max_k),
            "cache_len": probe_cache_length(cache_len)}


class DraftEvery:
    """A policy that drafts ``k`` tokens in every row at every step (the probe's timed steps)."""

    # True although it never gives every row k = 0: the loop then compiles the idle branch
    # that the cost-aware policies it prices (backs_off) run with, and times their program
    backs_off = True

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


def timed_ks(max_k: int) -> tuple[int, ...]:
    """The draft lengths whose steps are timed: the largest of each verify block size the
    engine compiles for ``max_k`` (blocks 2, 4, ..., ``max_k + 1``: ``k = 1, 3, ..., max_k``)."""
    from specjax.buckets import verify_buckets

    return tuple(T - 1 for T in verify_buckets(int(max_k)) if T > 1)


def measure_step_ratio(lm, drafter, batch: int, *, prefix: int = PREFIX, steps: int = STEPS,
                       repeats: int = REPEATS, cache_len: int = PROBE_CACHE) -> dict:
    """Seconds per target forward of plain decoding (``plain_step_s``) and of ``drafter``
    drafting ``k`` tokens every step for each ``k`` of :func:`timed_ks` (``step_s``, keyed by
    ``str(k)``), ``batch`` rows of one synthetic prompt, greedy, no EOS, and the median over
    repeats of each step's time over plain decoding's in the same repeat (``ratio``). Each
    repeat times every loop in turn
    (:func:`specjax.bench.curve.interleaved_seconds_per_forward`), decoding two token budgets
    ``steps`` apart (one compiled program) and taking the difference, so the prefill and the
    shorter drafts of the last steps cancel; medians over ``repeats`` after a compiling
    round. The cache holds ``cache_len`` positions (more if the decoded tokens need
    them)."""
    import numpy as np

    from specjax.bench.curve import interleaved_seconds_per_forward
    from specjax.buckets import cache_length

    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(prefix)]
    K = int(drafter.max_k)
    short, long = K + 2, K + 2 + steps * (K + 1)
    cache_len = max(int(cache_len), cache_length(prefix, long + 1))
    ks = timed_ks(K)
    plain, *timed = interleaved_seconds_per_forward(
        lm, [(None, None)] + [(drafter, DraftEvery(K, k)) for k in ks], prompt, batch,
        (short, long), cache_len, repeats)
    return {"plain_step_s": float(np.median(plain)),
            "step_s": {str(k): float(np.median(t)) for k, t in zip(ks, timed)},
            "ratio": {str(k): float(np.median(np.asarray(t) / np.asarray(plain)))
                      for k, t in zip(ks, timed)},
            "k": K, "batch": batch, "prefix": prefix, "steps": steps, "repeats": repeats,
            "cache_len": cache_len}


def step_costs_from(ratios: dict[int, float], max_k: int) -> tuple[float, ...]:
    """``step_cost[k]`` for k = 0..``max_k`` from the step ratios timed at :func:`timed_ks`
    (``{k: seconds per step / seconds per plain step}``): 1 for ``k = 0``, else the ratio of
    the largest timed ``k'`` of ``k``'s verify block, never decreasing in ``k``.

    Raises:
      PolicyError: a timed length is missing or its ratio is not finite and positive.
    """
    tops = timed_ks(max_k)
    bad = [k for k in tops if not (k in ratios and math.isfinite(float(ratios[k]))
                                   and float(ratios[k]) > 0)]
    if bad:
        raise PolicyError(f"step costs: no finite positive step ratio for k = {bad} (have "
                          f"{dict(sorted(ratios.items()))})")
    out, run = [1.0], 0.0
    for k in range(1, int(max_k) + 1):
        run = max(run, float(ratios[next(t for t in tops if t >= k)]))
        out.append(round(run, 4))
    return tuple(out)


def measured_step_costs(lm, drafter, drafter_name: str, drafter_args: dict | None = None, *,
                        batch: int = 1, cache_len: int | None = None,
                        mode: str | None = None, directory: str | Path | None = None,
                        measure: Callable[..., dict] | None = None,
                        say: Callable[[str], None] | None = None) -> tuple[float, ...] | None:
    """``step_cost`` (k = 0..``drafter.max_k``) of a cost-aware policy: what a step that
    drafts k tokens costs relative to a plain step at batch ``batch`` on this machine (see the
    module docstring), from the cache or measured and cached; None when nothing is measured
    (mode ``builtin``, or a model-free drafter).

    Args:
      lm: the target (a LoadedModel).
      drafter: the built drafter (its ``max_k`` is the longest draft timed).
      drafter_name, drafter_args: what keys the cache (the method name and its drafter
        options as given).
      batch: the batch size (bucketed as the verify curve's).
      cache_len: the KV-cache length the generations will compile (None: not known); the
        steps are timed with :func:`probe_cache_length` of it, cached apart per length.
      mode: ``auto`` / ``builtin`` / ``refresh`` (default ``$SPECJAX_COST_CURVE``, else auto).
      directory: the cache directory (default :func:`cache_dir`).
      measure: ``measure(lm, drafter, batch, cache_len=...) -> {"plain_step_s", "step_s":
        {str(k): s}}``,
        optionally with ``"ratio": {str(k): r}`` (taken over ``step_s / plain_step_s``)
        (default :func:`measure_step_ratio`; tests pass a fake).
      say: where the one-line "measuring ..." notice goes (default: stderr).
    """
    m = cost_curves.resolve_mode(mode)
    cost_curves.max_age_hours()  # a bad $SPECJAX_COST_MAX_AGE is an error
    if m == "builtin" or getattr(drafter, "model_free", False):
        return None
    K = int(drafter.max_k)
    key = draft_cost_key(lm, drafter_name, drafter_args or {}, K, batch, cache_len)
    path = cost_curves.curve_path(key, Path(directory) if directory is not None
                                  else cache_dir())  # the same key -> file naming
    old = None
    if m == "auto" and path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("key") != key:
                raise ValueError("written for another device, model or drafter")
            old = cost_curves.stale(data, path)
            steps = tuple(float(c) for c in data["step_cost"])
            if (len(steps) != K + 1 or steps[0] != 1.0
                    or not all(math.isfinite(c) and c > 0 for c in steps)
                    or any(b < a for a, b in zip(steps[1:], steps[2:]))):
                raise ValueError(f"step_cost {list(steps)} is not {K + 1} finite positive "
                                 "costs from 1, never decreasing after k = 1")
            if old is None:
                return steps
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            warnings.warn(f"draft cost: {path} cannot be used ({type(e).__name__}: {e}); "
                          "measuring it again", DraftCostWarning, stacklevel=2)
    bucket = key["batch"]
    (say or (lambda s: print(s, file=sys.stderr, flush=True)))(
        f"measuring what a step of {drafter_name} costs (k = {list(timed_ks(K))}, batch "
        f"{bucket}, {key['cache_len']}-position cache) on this machine; cached in "
        f"{path.parent}" + (f" ({old})" if old else ""))
    data = (measure or measure_step_ratio)(lm, drafter, bucket, cache_len=key["cache_len"])
    plain = float(data["plain_step_s"])
    ratios = ({int(k): float(r) for k, r in data["ratio"].items()} if "ratio" in data else
              {int(k): float(s) / plain for k, s in data["step_s"].items()})
    steps = step_costs_from(ratios, K)
    from specjax.bench.machine import utc_now

    out = {**data, "step_ratio": {str(k): round(r, 4) for k, r in sorted(ratios.items())},
           "step_cost": list(steps), "key": key, "measured_at": utc_now(),
           "command": "specjax.draft_costs.measured_step_costs"}
    try:
        atomic.write_text(path, json.dumps(out, indent=1))
    except OSError as e:
        warnings.warn(f"draft cost: could not cache it in {path} ({e}); it is measured again "
                      "next time", DraftCostWarning, stacklevel=2)
    return steps


def parse_draft_cost(value):
    """``draft_cost=`` of a policy: a number >= 0, or a mode (auto / builtin / refresh): for
    a model-based drafter :func:`specjax.methods.build` then measures ``step_cost`` (auto,
    refresh) or counts nothing for drafting (builtin)."""
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
