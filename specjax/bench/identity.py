"""Is a speculative method token-identical to plain decoding on a set of prompts? The one
comparison the exactness scripts (scripts/measure_exactness.py, scripts/identity_check.py)
share: plain decoding and the method over the same prompts and batch size."""

from __future__ import annotations

import time
from typing import Sequence


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first differing token (the shorter length when one is a prefix)."""
    return next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))


def compare_with_plain(model, prompts, drafter, policy, *, batch_size: int,
                       max_new_tokens: int, eos_ids=()) -> dict:
    """Decodes ``prompts`` plainly and with ``drafter``/``policy``; returns ``identical``
    (count), ``prompts``, ``first_divergence`` (per differing prompt) and the wall time of
    each (``plain_s``, ``spec_s``, compilation included)."""
    from specjax.engine import generate

    out = {}
    toks = {}
    for name, d, p in (("plain", None, None), ("spec", drafter, policy)):
        t0 = time.perf_counter()
        toks[name] = generate(model, prompts, batch_size=batch_size,
                              max_new_tokens=max_new_tokens, eos_ids=eos_ids, drafter=d,
                              policy=p).tokens
        out[f"{name}_s"] = time.perf_counter() - t0
    pairs = list(zip(toks["plain"], toks["spec"]))
    out["identical"] = sum(x == y for x, y in pairs)
    out["prompts"] = len(pairs)
    out["first_divergence"] = [first_divergence(x, y) for x, y in pairs if x != y]
    return out
