"""Verify-cost curves measured on the machine they are used on, cached per device and model.

The cost-aware policies (``adaptive``) weigh the tokens a draft may win against what verifying
it costs: ``cost[T - 1]``, the time of a target forward over ``T`` tokens relative to one token.
That ratio depends on the host (a 2-core AVX-512 Xeon and an AMD EPYC differ by more than the
draft lengths' margins), on the model, its dtype and quantization, and on the batch size. So
the curve a policy gets is measured where it runs:

* on first use, :func:`measured_cost` times the target forward at the engine's verify block
  sizes for that ``max_k`` (the probe of ``specjax bench --verify-curve``, short: a 128-token
  prefix, the block sizes timed in 7 interleaved rounds after a warm-up), in a few seconds to
  a minute;
* the result is cached as JSON in ``$SPECJAX_CACHE_DIR/cost_curves`` (default
  ``$XDG_CACHE_HOME/specjax`` or ``~/.cache/specjax``), one file per (device description,
  model fingerprint, dtype, quantization, batch bucket), and reused after;
* a file that is corrupt, written for another key or that lacks a block size now needed is
  measured again (with a warning) and replaced; a lacking file is measured at its block
  sizes and the new ones together. Every block size the engine verifies is measured, not
  interpolated: on the project's 2-core CPU a 9-token block costs about 1.6 one-token
  forwards where the line between 8 (1.05) and 16 (1.56) says 1.1 (2026-11-28); sizes
  in between (a draft shorter than its bucket) take their bucket's price where it matters
  (:func:`specjax.policies.adaptive.bucketed_cost`);
* ``SPECJAX_COST_CURVE=refresh`` (or ``--method-arg cost=refresh``) re-measures;
  ``SPECJAX_COST_CURVE=builtin`` (or ``cost=builtin``) switches measuring off and uses the
  curve shipped with specjax (:func:`specjax.policies.adaptive.default_cost`), as the test
  suite does.

Batch sizes are bucketed to 1, 4, 16 and 64 (the smallest bucket >= the batch; 64 above).

Above batch 1 the methods price by another probe (``in_loop=True``, cached apart): whole
steps of the decode loop verifying each block size with junk drafts, against a step of plain
decoding (:func:`specjax.bench.curve.step_curve_vs_plain`, 3 interleaved rounds, a few
minutes per batch bucket on the project's CPU), with a KV cache as long as the generation's
(``cache_len``, bucketed by :func:`specjax.buckets.probe_cache_length`, one file per
length). A draft-and-verify step does more than its forward (acceptance, the commit, the
drafter's and the policy's work): at batch 4 a 1-token block's step cost 1.21 plain
steps, and a curve relative to a lone one-token forward priced a 2-token block at 1.20 where
the loop paid 1.48 (until 2026-12-05, when the verify forward began writing the cache in
place: 1.06 and 1.14 since, scripts/step_cost_vs_plain.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Callable

from specjax import atomic
from specjax.buckets import probe_cache_length, verify_buckets
from specjax.errors import PolicyError
from specjax.fingerprint import CACHE_ENV, cache_root, device_description, model_fingerprint

# 3: from 2026-12-05, when the speculative loop's verify forward writes the cache in place
# (the loop's blocks cheaper; specjax.loop); 2: from 2026-12-02, when the one-token forward
# the curve is relative to stopped copying every layer's cache (specjax.cache.write_block);
# format 1 priced blocks ~5% low at batch 1
FORMAT = "specjax-cost-curve-3"
# the in-loop probe's name in the key; "-2" from 2026-12-05, when the verify forward stopped
# deferring its cache write (specjax.loop), which made every block size's step cheaper
LOOP_PROBE = "loop_vs_plain-2"
MODE_ENV = "SPECJAX_COST_CURVE"
AGE_ENV = "SPECJAX_COST_MAX_AGE"
MODES = ("auto", "builtin", "refresh")
BATCH_BUCKETS = (1, 4, 16, 64)
PREFIX = 128
REPEATS = 7  # interleaved rounds over the block sizes (specjax.bench.curve.verify_curve)
IN_LOOP_REPEATS = 3  # of step_curve_vs_plain: whole decode loops, each round about 25 s


class CostCurveWarning(UserWarning):
    """A cached cost curve could not be used or written (it is measured again / not kept)."""


def cache_dir() -> Path:
    """Where cost curves are cached: ``$SPECJAX_CACHE_DIR/cost_curves``, else
    ``$XDG_CACHE_HOME/specjax/cost_curves``, else ``~/.cache/specjax/cost_curves``."""
    return cache_root() / "cost_curves"


def resolve_mode(mode: str | None = None) -> str:
    """``mode``, else ``$SPECJAX_COST_CURVE``, else ``"auto"``; anything else is an error."""
    src = "cost=" if mode is not None else f"${MODE_ENV}"
    m = mode if mode is not None else os.environ.get(MODE_ENV, "auto")
    m = (m or "auto").strip().lower()
    if m not in MODES:
        raise PolicyError(f"{src}{'' if mode is not None else '='}{m!r}: the cost-curve mode "
                          f"must be one of {', '.join(MODES)}")
    return m


def max_age_hours() -> float | None:
    """``$SPECJAX_COST_MAX_AGE``: hours after which a cached cost curve or step cost is
    measured again (a shared VM's speed drifts over hours: on the project's 2-core VM a
    head's 3-token step was priced 1.19 plain steps at 04:12 and 1.25 at 08:27 the same
    day); unset or empty: never (what was measured once stands)."""
    raw = os.environ.get(AGE_ENV, "").strip()
    if not raw:
        return None
    try:
        hours = float(raw)
    except ValueError:
        hours = float("nan")
    if not hours > 0 or hours == float("inf"):
        raise PolicyError(f"${AGE_ENV}={raw!r}: the age after which cached costs are measured "
                          "again must be a number of hours > 0 (unset: never)")
    return hours


def stale(data: dict, path: Path) -> str | None:
    """Why a cached measurement ``data`` (read from ``path``) is too old to use under
    ``$SPECJAX_COST_MAX_AGE``, or None. A file without a readable ``measured_at`` is old."""
    import datetime

    hours = max_age_hours()
    if hours is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(data["measured_at"]))
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        age = (datetime.datetime.now(datetime.timezone.utc) - when).total_seconds() / 3600
    except (KeyError, TypeError, ValueError):
        return f"{path} says not when it was measured (${AGE_ENV}={hours:g} h)"
    if age > hours:
        return f"{path} was measured {age:.1f} h ago (${AGE_ENV}={hours:g} h)"
    return None


def batch_bucket(batch: int) -> int:
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise PolicyError(f"the batch size of a cost curve must be an integer >= 1, got "
                          f"{batch!r}")
    return next((b for b in BATCH_BUCKETS if b >= batch), BATCH_BUCKETS[-1])


def curve_key(model, batch: int) -> dict:
    return {"format": FORMAT, "device": device_description(), **model_fingerprint(model),
            "batch": batch_bucket(batch)}


def curve_path(key: dict, directory: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return (directory or cache_dir()) / f"{digest}.json"


def needed_ks(max_k: int) -> tuple[int, ...]:
    """Block sizes the engine verifies with a drafter of ``max_k``: 1 and its buckets."""
    return tuple(sorted({1, *verify_buckets(max_k)}))


def _relative(data: dict, batch: int, max_T: int) -> tuple[float, ...]:
    """``cost[T - 1]`` for T = 1 .. max_T, linearly interpolated between measured ks."""
    ks = [int(k) for k in data["ks"]]
    ys = [float(y) for y in data["relative"][str(batch)]]
    if len(ys) != len(ks) or ks[0] != 1 or ks != sorted(set(ks)) or any(not y > 0 for y in ys):
        raise ValueError(f"bad curve: ks={ks}, relative={ys}")
    from specjax.policies.adaptive import interpolate_curve

    return interpolate_curve(ks, ys, max_T)


def _read(path: Path, key: dict, ks: tuple[int, ...]
          ) -> tuple[tuple[float, ...] | None, str, str, tuple[int, ...]]:
    """``(curve, outcome, why, have)``: the cached curve, or None with the outcome ("miss",
    "stale": older than ``$SPECJAX_COST_MAX_AGE``, "unusable") and why; last, the block sizes
    a readable file measured (to measure again with the new ones)."""
    if not path.exists():
        return None, "miss", "", ()
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key:
            return None, "unusable", f"{path} was written for another device or model", ()
        curve = _relative(data, key["batch"], max(int(k) for k in data["ks"]))
        have = tuple(sorted({int(k) for k in data["ks"]}))
        old = stale(data, path)
        if old is not None:
            return None, "stale", old, have
        lacking = sorted(set(ks) - set(have))
        if lacking:  # the engine verifies these sizes: measured, never interpolated
            why = (f"{path} has no measured block size {', '.join(map(str, lacking))} "
                   f"(has {', '.join(map(str, have))})")
            return None, "unusable", why, have
        return curve[:max(ks)], "hit", "", have
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as e:
        return None, "unusable", f"{path} is corrupt ({type(e).__name__}: {e})", ()


def measured_cost(lm, max_k: int, batch: int = 1, *, mode: str | None = None,
                  directory: str | Path | None = None,
                  measure: Callable[..., dict] | None = None,
                  say: Callable[[str], None] | None = None,
                  in_loop: bool = False, cache_len: int | None = None) -> tuple[float, ...]:
    """The verify-cost curve (``cost[T - 1]`` for ``T = 1 .. max(needed block size)``) for
    target ``lm`` on this machine at batch ``batch``: from the cache, else measured and
    cached (see the module docstring).

    Args:
      lm: the target (a LoadedModel or a Llama).
      max_k: the drafter's maximum draft length (the curve covers its verify buckets).
      batch: the batch size (bucketed).
      mode: ``"auto"``, ``"builtin"`` or ``"refresh"`` (default: ``$SPECJAX_COST_CURVE``,
        else auto).
      directory: the cache directory (default :func:`cache_dir`).
      measure: the probe, ``measure(lm, ks=..., batches=(B,), prefix=..., repeats=...)``
        returning the ``verify_curve`` JSON layout (default
        :func:`specjax.bench.curve.verify_curve`; tests pass a fake).
      say: where the one-line "measuring ..." notice goes (default: stderr).
      in_loop: instead, whole steps of the decode loop against a plain step
        (:func:`specjax.bench.curve.step_curve_vs_plain`; cached apart): what a drafter whose
        undrafted steps are idle steps pays per verify block, the speculative step's own
        work included.
      cache_len: with ``in_loop``, the KV-cache length the generations will compile (None:
        not known); the steps are timed with
        :func:`specjax.buckets.probe_cache_length` of it and cached apart per length (a
        plain step reads the whole static cache, so a block's price over it moves with it).

    Raises:
      PolicyError: an unknown mode, a bad batch size or max_k.
    """
    m = resolve_mode(mode)
    max_age_hours()  # a bad $SPECJAX_COST_MAX_AGE is an error, not a corrupt file
    if not isinstance(max_k, int) or isinstance(max_k, bool) or max_k < 1:
        raise PolicyError(f"a cost curve needs max_k >= 1, got {max_k!r}")
    if m == "builtin":
        from specjax.policies.adaptive import default_cost

        return default_cost(lm)
    key = curve_key(lm, batch)
    if in_loop:
        key = {**key, "probe": LOOP_PROBE, "cache_len": probe_cache_length(cache_len)}
    ks = needed_ks(max_k)
    path = curve_path(key, Path(directory) if directory is not None else None)
    want, outcome, why = ks, "", ""  # the sizes to measure; why the cached file is not used
    if m == "auto":
        curve, outcome, why, have = _read(path, key, ks)
        if curve is not None:
            return curve
        want = tuple(sorted(set(ks) | set(have)))  # a lacking file keeps its sizes
        if outcome == "unusable":
            warnings.warn(f"cost curve: {why}; measuring it again", CostCurveWarning,
                          stacklevel=2)
    if measure is None and in_loop:
        from specjax.bench.curve import step_curve_vs_plain as measure
    elif measure is None:
        from specjax.bench.curve import verify_curve as measure
    how = (f", whole loop steps against plain ones, {key['cache_len']}-position cache"
           if in_loop else "")
    (say or (lambda s: print(s, file=sys.stderr, flush=True)))(
        f"measuring the verify-cost curve of this machine (block sizes {list(want)}, batch "
        f"{key['batch']}{how}); "
        f"cached in {path.parent}" + (f" ({why})" if outcome == "stale" else ""))
    data = measure(lm, ks=want, batches=(key["batch"],), prefix=PREFIX,
                   repeats=IN_LOOP_REPEATS if in_loop else REPEATS,
                   **({"cache_len": key["cache_len"]} if in_loop else {}))
    from specjax.bench.machine import utc_now

    data = {**data, "key": key, "measured_at": utc_now(),
            "command": "specjax.cost_curves.measured_cost"}
    curve = _relative(data, key["batch"], max(ks))
    try:
        atomic.write_text(path, json.dumps(data, indent=1))
    except OSError as e:
        warnings.warn(f"cost curve: could not cache it in {path} ({e}); it is measured again "
                      "next time", CostCurveWarning, stacklevel=2)
    return curve
