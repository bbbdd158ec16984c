"""Summaries of timed runs: tokens/s per repeat, speedups over ``ar`` with their intervals
over the prompts (:mod:`specjax.bench.intervals`), tau, acceptance by position,
identical-output flags; and the text table ``specjax bench`` prints."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from specjax.bench.intervals import run_series, speedup_interval
from specjax.methods import describe

if TYPE_CHECKING:  # the runner imports this module
    from specjax.bench.runner import Run


def summarize_batch_sizes(runs, sweep_runs, methods, batch_sizes, batch_size, compile_s,
                          sweep_compile_s, built, greedy) -> dict:
    """Rows ``{method, batch_size, tokens_per_s, ..., speedup_vs_ar}`` over all prompts, per
    batch size; speedups and identical-output flags against ``ar`` at the same batch size."""
    rows = []
    for B in batch_sizes:
        if B == 1 and batch_size == 1:
            rb = [r for r in runs if r.method in methods]
            comp = compile_s
        else:
            rb = [r for r in sweep_runs if r.batch_size == B]
            comp = sweep_compile_s.get(B, {})
        for row in summarize(rb, methods, [], dict(comp), built, greedy)["rows"]:
            row.pop("category")
            row.pop("config", None)
            rows.append({"method": row.pop("method"), "batch_size": B, **row})
    return {"batch_sizes": list(batch_sizes), "rows": rows}


def per_repeat_rates(runs: list[Run], reps, tokens, seconds) -> list[float]:
    """``sum(tokens(r)) / sum(seconds(r))`` over the runs of each repeat in ``reps``."""
    return [sum(tokens(r) for r in runs if r.repeat == k) /
            max(sum(seconds(r) for r in runs if r.repeat == k), 1e-9) for k in reps]


def decode_rates(runs: list[Run], reps) -> list[float] | None:
    """Decode-phase tokens/s per repeat: the tokens after each row's first (which the prefill
    picks) over the wall time after the prefill; None when a run has no prefill time (a peer,
    or a journal written before prefill times were kept)."""
    if not runs or any(r.prefill_s is None for r in runs):
        return None
    return per_repeat_rates(runs, reps, *run_series(decode=True))


def ar_ci(method_runs: list[Run], ar_runs: list[Run], m: str, *, decode: bool = False):
    """``[lo, hi]``: the 95% interval of method ``m``'s speedup over ``ar`` in these runs
    (None for ``ar`` itself, or too few prompt batches)."""
    if m == "ar":
        return None
    ci = speedup_interval(method_runs, ar_runs, decode=decode)
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def summarize(runs: list[Run], methods, categories, compile_s, built, greedy: bool) -> dict:
    ref_tokens = {}
    for r in runs:
        if r.method == "ar":
            for pid, t in zip(r.prompt_ids, r.tokens):
                ref_tokens.setdefault(pid, t)
    rows = []
    for cat in categories + ["ALL"]:
        cat_runs = [r for r in runs if cat == "ALL" or r.category == cat]
        by_method = {m: [r for r in cat_runs if r.method == m] for m in methods}
        tps, dps = {}, {}
        for m in methods:
            mr = by_method[m]
            reps = sorted({r.repeat for r in mr})
            tps[m] = per_repeat_rates(mr, reps, *run_series(decode=False))
            dps[m] = decode_rates(mr, reps)
        ar_med = statistics.median(tps["ar"]) if tps.get("ar") else None
        ar_dec = statistics.median(dps["ar"]) if dps.get("ar") else None
        for m in methods:
            mr = by_method[m]
            if not mr:
                continue
            med = statistics.median(tps[m])
            fw = sum(r.forwards for r in mr)
            row = {
                "method": m,
                "category": cat,
                "tokens_per_s": med,
                "tokens_per_s_min": min(tps[m]),
                "tokens_per_s_max": max(tps[m]),
                "speedup_vs_ar": med / ar_med if ar_med else None,
                "decode_speedup_vs_ar": (statistics.median(dps[m]) / ar_dec
                                         if ar_dec and dps.get(m) else None),
                # the 95% interval over the category's prompt batches (paired bootstrap)
                "speedup_ci": ar_ci(mr, by_method.get("ar", []), m),
                "decode_speedup_ci": ar_ci(mr, by_method.get("ar", []), m, decode=True),
                "tau": (sum(r.new_tokens for r in mr) / fw) if fw else None,
                "new_tokens": sum(r.new_tokens for r in mr) // max(len({r.repeat for r in mr}),
                                                                     1),
                "prompts": len({p for r in mr for p in r.prompt_ids}),
                "compile_s": compile_s.get(m, 0.0),
            }
            if mr[0].drafted_at is not None:
                K = len(mr[0].drafted_at)
                dr = [sum(r.drafted_at[j] for r in mr) for j in range(K)]
                ac = [sum(r.accepted_at[j] for r in mr) for j in range(K)]
                row["acceptance_by_position"] = [a / d if d else None for a, d in zip(ac, dr)]
                row["drafted"] = sum(dr)
                row["accepted"] = sum(ac)
                # tokens drafted per row and step (what a draft-length policy chooses)
                row["mean_drafted"] = sum(dr) / fw if fw else None
            ver = built[m].verifier if m in built else None
            row["exact"] = bool(getattr(ver, "exact", True))
            if not row["exact"]:  # a lossy rule: never compared as if it were exact
                row["lossy_verifier"] = ver.name
            elif greedy:
                row["identical_to_ar"] = all(
                    t == ref_tokens.get(pid) for r in mr for pid, t in zip(r.prompt_ids,
                                                                           r.tokens))
            if m in built:
                row["config"] = describe(*built[m])
            rows.append(row)
    return {"rows": rows, "methods": methods, "categories": categories}


def _same(row: dict) -> str:
    """The ``same`` column: identical to plain decoding (exact rules only), or ``lossy``. In
    parentheses when the run used fast numerics: then it is an observation on these prompts,
    not a guarantee (specjax.models.numerics)."""
    if row.get("exact") is False:
        return "lossy"
    s = {True: "yes", False: "NO", None: "-"}[row.get("identical_to_ar")]
    return f"({s})" if row.get("numerics") == "fast" and s != "-" else s


def format_table(summary: dict) -> str:
    lines = [f"{'category':16s} {'method':18s} {'tok/s':>8s} {'min-max':>13s} {'speedup':>8s} "
             f"{'decode':>7s} {'tau':>6s} {'same':>5s} {'speedup 95%':>12s}"]
    for r in summary["rows"]:
        same = _same(r)
        ci = r.get("speedup_ci")
        ci_s = f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"
        tau = f"{r['tau']:.2f}" if r.get("tau") else "-"
        sp = f"{r['speedup_vs_ar']:.2f}x" if r.get("speedup_vs_ar") else "-"
        dsp = f"{r['decode_speedup_vs_ar']:.2f}x" if r.get("decode_speedup_vs_ar") else "-"
        lines.append(f"{r['category']:16s} {r['method']:18s} {r['tokens_per_s']:8.1f} "
                     f"{r['tokens_per_s_min']:6.1f}-{r['tokens_per_s_max']:<6.1f} {sp:>8s} "
                     f"{dsp:>7s} {tau:>6s} {same:>5s} {ci_s:>12s}")
    if summary.get("by_batch_size"):
        lines += ["", f"{'batch':>5s} {'method':18s} {'tok/s':>8s} {'min-max':>13s} "
                      f"{'speedup':>8s} {'tau':>6s} {'same':>5s}"]
        for r in summary["by_batch_size"]["rows"]:
            same = _same(r)
            tau = f"{r['tau']:.2f}" if r.get("tau") else "-"
            sp = f"{r['speedup_vs_ar']:.2f}x" if r.get("speedup_vs_ar") else "-"
            lines.append(f"{r['batch_size']:5d} {r['method']:18s} {r['tokens_per_s']:8.1f} "
                         f"{r['tokens_per_s_min']:6.1f}-{r['tokens_per_s_max']:<6.1f} {sp:>8s} "
                         f"{tau:>6s} {same:>5s}")
    return "\n".join(lines)
