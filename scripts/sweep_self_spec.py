"""Sweeps early-exit layer and draft length (and a few layer-skip sets) on SmolLM2.

Each configuration runs against plain decoding in the same interleaved loop (specjax.bench).

    python scripts/sweep_self_spec.py --output docs/results/sweep_self_spec.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--layers", default="2,4,8,12,16,20,24")
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--skip-sets", default="5-24;10-19;3,6,9,12,15,18,21,24,27",
                    help="';'-separated layer sets whose attention and MLP are skipped")
    ap.add_argument("--limit", type=int, default=1, help="built-in prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)

    from specjax.bench import environment, load_prompts, run_bench
    from specjax.models.loaders import load

    lm = load(args.model)
    items = load_prompts("builtin", limit=args.limit)
    configs = []
    for layer in args.layers.split(","):
        for k in args.ks.split(","):
            configs.append(("early_exit", {"exit_layer": layer, "k": k}))
    for s in args.skip_sets.split(";"):
        for k in args.ks.split(","):
            configs.append(("layer_skip", {"skip_attn": s, "skip_mlp": s, "k": k}))
    rows = []
    for method, margs in tqdm(configs, desc="sweep", file=sys.stderr):
        res = run_bench(lm, items, [method], {method: margs},
                        max_new_tokens=args.max_new_tokens, batch_size=1, temperature=0.0,
                        repeats=1)
        r = next(r for r in res["rows"] if r["method"] == method and r["category"] == "ALL")
        rows.append({"method": method, **margs, "speedup_vs_ar": r["speedup_vs_ar"],
                     "tau": r["tau"], "tokens_per_s": r["tokens_per_s"],
                     "identical_to_ar": r["identical_to_ar"],
                     "acceptance_by_position": r.get("acceptance_by_position")})
        print(f"{method} {margs}: speedup {r['speedup_vs_ar']:.2f}x tau {r['tau']:.2f} "
              f"same={r['identical_to_ar']}", file=sys.stderr)
    best = max(rows, key=lambda r: r["speedup_vs_ar"])
    out = {**environment(["(scripts/sweep_self_spec.py)"] + (argv or sys.argv[1:])),
           "prompts": len(items), "max_new_tokens": args.max_new_tokens, "rows": rows,
           "best": best}
    print(json.dumps(best, indent=1))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
