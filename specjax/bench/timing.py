"""The one timing rule of the micro-benchmark scripts: run once to compile and warm, then the
median wall time of ``repeats`` calls, each waited on (``jax.block_until_ready``)."""

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
