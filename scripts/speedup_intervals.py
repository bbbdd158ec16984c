"""The speedup of every method over plain decoding (or `--base METHOD`) in a `specjax bench`
journal, per category, with its 95% interval over the prompts (a paired bootstrap:
specjax.bench.intervals), in total and decode time. For runs journaled before the bench
printed the intervals itself, and to ask of any run whether a category's figure is told apart
from plain decoding (or from another method), or from a bar such as issue 23's 0.97x.

    python scripts/speedup_intervals.py docs/results/policies_heads_b4_cachelen.journal.jsonl
    python scripts/speedup_intervals.py JOURNAL --bar 0.97 --json out.json
    python scripts/speedup_intervals.py JOURNAL --base eagle   # each method against eagle

The point figure here is the ratio of total tokens per total second with repeats pooled; the
bench's own table takes the median over repeats, so the two can differ in the last digit for
runs with repeats. Reads the journal alone: no model is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from specjax.bench.intervals import speedup_interval, speedup_point
from specjax.bench.journal import read_journal
from specjax.bench.runner import Run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("journal", help="a specjax bench journal (.journal.jsonl)")
    ap.add_argument("--bar", type=float, default=None,
                    help="mark the categories whose whole interval lies below this speedup")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--sweep", action="store_true", help="the batch-size sweep's runs instead")
    ap.add_argument("--base", default="ar", help="the method the others are paired against "
                    "(default: ar, plain decoding)")
    args = ap.parse_args(argv)
    header, groups = read_journal(args.journal)
    runs = [Run(**rd) for g in groups if bool(g.get("sweep")) == args.sweep for rd in g["runs"]]
    if not runs:
        print(f"{args.journal}: no finished runs", file=sys.stderr)
        return 1
    by = defaultdict(list)
    for r in runs:
        by[r.category, r.method].append(r)
        by["ALL", r.method].append(r)
    cats = list(dict.fromkeys(r.category for r in runs)) + ["ALL"]
    methods = [m for m in dict.fromkeys(r.method for r in runs) if m != args.base]
    if len(methods) == len(set(r.method for r in runs)):
        print(f"{args.journal}: no runs of the base method {args.base!r} (methods: "
              f"{', '.join(dict.fromkeys(r.method for r in runs))})", file=sys.stderr)
        return 1
    rows = []
    print(f"{'category':16s} {'method':24s} {'prompts':>7s} {'speedup':>8s} {'95%':>11s} "
          f"{'decode':>7s} {'95%':>11s}"
          + ("" if args.base == "ar" else f"  (against {args.base})"))
    for cat in cats:
        ar = by.get((cat, args.base), [])
        for m in methods:
            mr = by.get((cat, m), [])
            if not mr or not ar:
                continue
            row = {"category": cat, "method": m,
                   "prompt_batches": len({tuple(r.prompt_ids) for r in mr}),
                   "speedup": speedup_point(mr, ar), "speedup_ci": speedup_interval(mr, ar),
                   "decode": speedup_point(mr, ar, decode=True),
                   "decode_ci": speedup_interval(mr, ar, decode=True)}
            rows.append(row)

            def f(x):
                return f"{x:.3f}x" if x is not None else "-"

            def g(ci):
                return f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else "-"

            below = (args.bar is not None and row["speedup_ci"] is not None
                     and row["speedup_ci"][1] < args.bar)
            print(f"{cat:16s} {m:24s} {row['prompt_batches']:7d} {f(row['speedup']):>8s} "
                  f"{g(row['speedup_ci']):>11s} {f(row['decode']):>7s} "
                  f"{g(row['decode_ci']):>11s}" + (f"  below {args.bar}" if below else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"journal": args.journal, "model": header.get("model"), "base": args.base,
                       "batch_size": header.get("batch_size"), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
