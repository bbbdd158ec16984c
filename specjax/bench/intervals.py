"""How far a measured speedup may be from the truth: a paired bootstrap over the prompts.

One timed run per question carries noise (on the project's 2-core CPU the ratio of two runs
doing the same work spread from 0.76 to 1.15 per question, docs/benchmarks_notes.md), so a
category's ten questions can move its speedup by several points. :func:`speedup_interval`
gives the percentile interval of the speedup over plain decoding when the category's prompt
batches are drawn again with replacement: each draw keeps a batch's method and plain runs
together (paired: the same prompts, the same machine minutes), pools its repeats, and takes
the ratio of total tokens per total second. An interval that holds 1.0 says the run cannot
tell the method from plain decoding in that category; one whose top is below a bar says the
bar is missed beyond the run's noise.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # the runner imports the report, which imports this module
    from specjax.bench.runner import Run

RESAMPLES = 2000
LEVEL = 0.95
MIN_UNITS = 3  # fewer prompt batches than this: no interval


def _totals(runs: list["Run"], tokens: Callable, seconds: Callable) -> dict:
    """``{prompt batch: (tokens, seconds)}`` summed over the batch's repeats."""
    out: dict = defaultdict(lambda: [0.0, 0.0])
    for r in runs:
        t = out[tuple(r.prompt_ids)]
        t[0] += tokens(r)
        t[1] += seconds(r)
    return out


def run_series(decode: bool):
    """``(tokens, seconds)``: functions of a run giving its tokens and seconds in total time,
    or in decode time (the tokens after each row's first, the time after the prefill)."""
    if decode:
        return (lambda r: r.new_tokens - len(r.prompt_ids)), (lambda r: r.wall_s - r.prefill_s)
    return (lambda r: r.new_tokens), (lambda r: r.wall_s)


def _table(method_runs, ar_runs, decode: bool) -> np.ndarray | None:
    """``[units, 4]``: method tokens, method seconds, ar tokens, ar seconds per prompt batch
    both ran (repeats pooled); None when a decode table lacks prefill times."""
    if decode and any(r.prefill_s is None for r in [*method_runs, *ar_runs]):
        return None
    tokens, seconds = run_series(decode)
    m, a = _totals(method_runs, tokens, seconds), _totals(ar_runs, tokens, seconds)
    units = sorted(set(m) & set(a))
    return np.array([[m[u][0], m[u][1], a[u][0], a[u][1]] for u in units],
                    dtype=np.float64).reshape(len(units), 4)


def _ratio(s: np.ndarray) -> np.ndarray:
    """Method tokens/s over ar tokens/s from summed ``[..., 4]`` columns."""
    return (s[..., 0] / np.maximum(s[..., 1], 1e-12)) / np.maximum(
        s[..., 2] / np.maximum(s[..., 3], 1e-12), 1e-12)


def speedup_point(method_runs: list["Run"], ar_runs: list["Run"], *,
                  decode: bool = False) -> float | None:
    """The speedup the interval is drawn around: total tokens per total second over plain
    decoding's, on the prompt batches both ran, repeats pooled (None: none shared, or, for
    ``decode``, a run without prefill time)."""
    x = _table(method_runs, ar_runs, decode)
    return None if x is None or not len(x) else float(_ratio(x.sum(axis=0)))


def speedup_interval(method_runs: list["Run"], ar_runs: list["Run"], *, decode: bool = False,
                     resamples: int = RESAMPLES, level: float = LEVEL,
                     seed: int = 0) -> tuple[float, float] | None:
    """The ``level`` percentile interval of the method's speedup over plain decoding (its
    tokens per second over plain decoding's) under a paired bootstrap over the prompt batches
    both ran (see the module docstring); ``decode``: the decode phase alone (the tokens after
    each row's first over the time after the prefill). None with fewer than
    :data:`MIN_UNITS` shared prompt batches, or, for ``decode``, a run without prefill time.
    Deterministic for a given ``seed``."""
    if not 0 < level < 1:
        raise ValueError(f"an interval's level must be in (0, 1), got {level!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    x = _table(method_runs, ar_runs, decode)
    if x is None or len(x) < MIN_UNITS:
        return None
    draw = np.random.default_rng(seed).integers(0, len(x), (resamples, len(x)))
    lo, hi = np.quantile(_ratio(x[draw].sum(axis=1)), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
