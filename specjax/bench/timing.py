"""The timing rules of the benchmarks: for the micro-benchmark scripts, run once to compile and
warm, then the median wall time of ``repeats`` calls, each waited on
(``jax.block_until_ready``); for a ``generate`` call, run it again when it compiled."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import jax


def median_seconds(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> float:
    """Median seconds of ``fn(*args)`` over ``repeats`` timed calls after one untimed call.

    Raises:
      ValueError: ``repeats`` below 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def timed_generation(gen: Callable[[], Any], drafter: Any = None, rows: int = 1) -> Any:
    """The result of ``gen()`` (a ``generate`` call) to time.

    The first execution of a freshly compiled program pays one-time set-up on top of
    compilation (on XLA:CPU about 0.5-1.4 s for SmolLM2's loops). So when ``gen()`` compiled,
    it runs again and the second result is returned, the first run's excess wall time (of its
    batches: ``rows`` prompts each) booked with its ``compile_s``. A drafter that learns from
    outputs (``snapshot`` / ``restore``: a suffix cache, a datastore) starts the second run
    from its state before the first, so the timed run never drafts from its own answer.
    """
    snap = drafter.snapshot() if hasattr(drafter, "snapshot") else None
    first = gen()
    if first.compile_s <= 0:
        return first
    if snap is not None:
        drafter.restore(snap)
    r = gen()
    r.compile_s = first.compile_s + max(0.0, sum(first.wall_s[::rows]) - sum(r.wall_s[::rows]))
    return r
