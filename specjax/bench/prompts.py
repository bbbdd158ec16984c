"""The benchmark's inputs: prompts by spec (and category) and the parsers of list-valued
flags (``--method-arg METHOD.key=value``, ``--batch-sizes``, ``--curve-ks``)."""

from __future__ import annotations

from collections import defaultdict

from specjax.data.builtin import BUILTIN  # noqa: F401  (the default prompts, re-exported)
from specjax.errors import BenchError


def load_prompts(spec: str, categories: list[str] | None = None, limit: int | None = None
                 ) -> list[dict]:
    """A prompt spec -> ``[{"id", "category", "prompt"}]`` (prompts without one: ``all``).

    ``spec`` is anything ``specjax.data.load_prompts`` reads: ``builtin``, a JSONL file,
    ``spec_bench:PATH``, ``mt_bench[:PATH]``, ``humaneval[:PATH]``, ``gsm8k:PATH``,
    ``sharegpt:PATH``, ``text:PATH``. ``limit``: at most that many prompts per category.
    """
    from specjax import data

    try:
        records = data.load_prompts(spec)
    except data.DataError as e:
        raise BenchError(str(e)) from None
    items = [{"id": r.id, "category": r.category or "all", "prompt": r.prompt}
             for r in records]
    categories = [c.strip() for c in categories or [] if c.strip()]
    if categories:
        known = sorted({it["category"] for it in items})
        bad = [c for c in categories if c not in known]
        if bad:
            raise BenchError(f"unknown categories {bad}; the prompts have: {', '.join(known)}")
        items = [it for it in items if it["category"] in categories]
    if limit is not None:
        per = defaultdict(int)
        kept = []
        for it in items:
            if per[it["category"]] < limit:
                kept.append(it)
                per[it["category"]] += 1
        items = kept
    if not items:
        raise BenchError("no prompts to benchmark")
    return items


def parse_bench_method_args(items: list[str], methods: list[str]) -> dict[str, dict[str, str]]:
    """``METHOD.key=value`` -> ``{method: {key: value}}``."""
    out: dict[str, dict[str, str]] = {m: {} for m in methods}
    for it in items:
        if "=" not in it or "." not in it.split("=", 1)[0]:
            raise BenchError(f"--method-arg must look like METHOD.key=value, got {it!r}")
        lhs, v = it.split("=", 1)
        m, k = lhs.split(".", 1)
        if m not in out:
            raise BenchError(f"--method-arg {it!r} names method {m!r}, which is not in "
                             f"--methods ({', '.join(methods)})")
        out[m][k] = v
    return out


def parse_positive_ints(text: str | None, flag: str, strict: bool = False) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: integers >= 1. ``strict``: given in increasing order
    without repeats and at least one (for curve axes, where a shuffled list is a typo);
    otherwise sorted and deduplicated, and None or '' -> ``[]``."""
    if not text and not strict:
        return []
    try:
        vals = [int(x) for x in (text or "").split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BenchError(f"{flag} takes integers >= 1, got {text!r}")
    if strict and vals != sorted(set(vals)):
        raise BenchError(f"{flag} takes increasing integers >= 1, got {text!r}")
    return sorted(set(vals))


def parse_batch_sizes(text: str | None) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]`` (sorted, unique); None or '' -> ``[]``."""
    return parse_positive_ints(text, "--batch-sizes")
