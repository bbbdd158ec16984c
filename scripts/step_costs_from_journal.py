"""What each kind of decode step cost inside a benchmark, fitted from its journal.

A batch-1 ``specjax bench`` journal records, per run, the decode time (``wall_s`` less
``prefill_s``), the target forwards and ``drafted_at`` (``drafted_at[i]``: the steps that
drafted more than ``i`` tokens). So each run's steps are known by verify block: idle steps
(nothing drafted, a plain forward) and steps whose ``k`` drafted tokens were verified in the
engine's block for ``k + 1`` tokens (:func:`specjax.buckets.verify_block`). Each run's decode
time in units of the same question's plain step (the median plain-decoding run's decode time
over its forwards) is fitted by least squares, per method, as

    time = c_idle * idle steps + sum over blocks T of c_T * steps verified in a T-block

so ``c_T`` is what a step of that block cost in the benchmark itself, drafter, policy and
bookkeeping included, at the benchmark's own cache lengths; and the measured time is set
against the time the verify-cost curve (``--curve``, a ``specjax bench --verify-curve`` JSON
or a cached curve of :mod:`specjax.cost_curves`) predicts for the same steps, per method and
category (measured / predicted: 1.0 when the curve prices the steps as they ran).

    python scripts/step_costs_from_journal.py docs/results/spec_bench_model_free_4.journal.jsonl \\
        --curve ~/.cache/specjax/cost_curves/<key>.json

A diagnostic: the VM's drift lands in the residual (printed as its root mean square, in plain
steps per run).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path


def runs_of(groups: list[dict]):
    """``(plain step seconds per question, [(method, category, question, decode plain steps,
    idle steps, {block: steps})])`` from a batch-1 journal's groups."""
    from specjax.buckets import verify_block

    plain, rows = collections.defaultdict(list), []
    for g in groups:
        for r in g.get("runs", ()):
            if r.get("batch_size", 1) != 1 or len(r["prompt_ids"]) != 1:
                continue
            q = r["prompt_ids"][0]
            dec = r["wall_s"] - (r.get("prefill_s") or 0.0)
            if r["method"] == "ar":
                plain[q].append(dec / r["forwards"])
                continue
            da = list(r.get("drafted_at") or [])
            if not da:
                continue
            K = len(da)
            blocks = collections.Counter()
            for n in range(1, K + 1):  # steps that drafted exactly n tokens
                exact = da[n - 1] - (da[n] if n < K else 0)
                if exact:
                    blocks[verify_block(n, K)] += exact
            rows.append((r["method"], r["category"], q, dec, r["forwards"] - da[0], blocks))
    step = {q: statistics.median(v) for q, v in plain.items()}
    return step, [(m, c, q, dec / step[q], idle, b) for m, c, q, dec, idle, b in rows
                  if q in step]


def read_curve(path: str) -> dict[int, float]:
    """``{block size: relative cost}`` of the smallest batch of a verify-curve JSON
    (:func:`specjax.policies.adaptive.load_cost_curve`)."""
    from specjax.policies.adaptive import load_cost_curve

    cost = load_cost_curve(str(Path(path).expanduser()))
    return {T: c for T, c in enumerate(cost, start=1)}


def fit_step_costs(rows, method: str) -> tuple[dict[str, float], dict[str, int], float]:
    """``(cost per step kind, steps of each kind, residual rms)`` of ``method``'s runs: the
    least-squares fit of the module docstring; kinds ``idle`` and ``T=<block>``."""
    import numpy as np

    mine = [r for r in rows if r[0] == method]
    Ts = sorted({T for r in mine for T in r[5]})
    X = np.array([[r[4]] + [r[5].get(T, 0) for T in Ts] for r in mine], float)
    y = np.array([r[3] for r in mine])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    names = ["idle"] + [f"T={T}" for T in Ts]
    rms = float(np.sqrt(np.mean((y - X @ coef) ** 2)))
    return (dict(zip(names, map(float, coef))), dict(zip(names, map(int, X.sum(0)))), rms)


def measured_over_predicted(rows, method: str, curve: dict[int, float]) -> dict[str, float]:
    """Per category (and ``(all)``): the median over ``method``'s runs of its decode time over
    the time ``curve`` predicts for its steps (idle steps at 1)."""
    ratio = collections.defaultdict(list)
    for m, c, q, t, idle, blocks in rows:
        if m != method:
            continue
        missing = sorted(set(blocks) - set(curve))
        if missing:
            raise ValueError(f"the curve has no block size {missing}")
        pred = idle + sum(n * curve[T] for T, n in blocks.items())
        ratio[c].append(t / pred)
        ratio["(all)"].append(t / pred)
    return {c: statistics.median(v) for c, v in sorted(ratio.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("journal")
    ap.add_argument("--curve", default=None,
                    help="a verify-curve JSON: also print measured / predicted time")
    a = ap.parse_args()

    from specjax.bench.journal import read_journal

    _, groups = read_journal(a.journal)
    step, rows = runs_of(groups)
    if not rows:
        sys.exit(f"{a.journal}: no batch-1 speculative runs with a plain-decoding run of the "
                 "same question")
    curve = read_curve(a.curve) if a.curve else None
    print(f"{a.journal}: {len(step)} questions, {len(rows)} speculative runs")
    for method in sorted({r[0] for r in rows}):
        cost, steps, rms = fit_step_costs(rows, method)
        print(f"\n{method}: cost of a step in plain steps (least squares over "
              f"{sum(r[0] == method for r in rows)} runs, residual rms {rms:.1f} plain steps "
              "per run)")
        for name, c in cost.items():
            print(f"  {name:>6}: {c:6.3f}   ({steps[name]} steps)")
        if curve is None:
            continue
        try:
            ratio = measured_over_predicted(rows, method, curve)
        except ValueError as e:
            print(f"  ({e}: measured / predicted left out)")
            continue
        print("  measured / predicted by the curve, median per category:")
        for c, r in ratio.items():
            print(f"    {c:<16} {r:.3f}")


if __name__ == "__main__":
    main()
