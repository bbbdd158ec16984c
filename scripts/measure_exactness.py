"""The price of exact numerics, and whether speculative decoding is token-identical without it.

For each precision (float32, bfloat16, w8a8) and numerics (exact, fast): plain decoding and
prompt lookup on built-in prompts at batch 1 and 4 (decode tokens/s, median of repeats, all in
one process, the two modes interleaved), and on Spec-Bench questions unseen by any tuning: the share
of prompts where prompt lookup's tokens equal plain decoding's (batch 4). Writes JSON.

    python scripts/measure_exactness.py --out docs/results/exactness.json
    python scripts/measure_exactness.py --precisions bfloat16 --unseen spec_bench:FILE

Rows are written after every precision; the same command skips precisions already in --out
(measured with the same settings), so it continues after a crash or in the next session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/exactness.json")
    ap.add_argument("--precisions", default="float32,bfloat16,w8a8")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=4, help="built-in prompts timed")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--unseen", default=None,
                    help="prompt spec for the identity check (e.g. spec_bench:FILE)")
    ap.add_argument("--unseen-limit", type=int, default=2, help="prompts per category")
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.identity import compare_with_plain
    from specjax.bench.machine import machine_description, utc_now
    from specjax.bench.prompts import load_prompts
    from specjax.data.builtin import BUILTIN
    from specjax.engine import generate
    from specjax.models.loaders import load
    import jax.numpy as jnp

    firsts = {}
    for cat, text in BUILTIN:
        firsts.setdefault(cat, text)
    texts = list(firsts.values())[:a.prompts]
    unseen = load_prompts(a.unseen, None, a.unseen_limit) if a.unseen else []
    out = {"command": " ".join(["python"] + sys.argv), "date": utc_now(),
           "machine": machine_description(), "max_new_tokens": a.max_new_tokens,
           "repeats": a.repeats, "prompts": len(texts), "rows": []}
    from pathlib import Path

    from specjax import engine

    prev = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else None
    if prev and all(prev.get(k) == out[k] for k in ("max_new_tokens", "repeats", "prompts")):
        out["rows"] = [r for r in prev["rows"] if r["precision"] in a.precisions.split(",")]
        out["runs"] = prev.get("runs", []) + [{"command": prev["command"], "date": prev["date"],
                                               "machine": prev["machine"]}]
    done = {r["precision"] for r in out["rows"]}
    for prec in a.precisions.split(","):
        if prec in done:  # resumable: a precision already measured with these settings
            continue
        # one process compiles hundreds of programs here; XLA:CPU keeps each one's memory
        # mappings, and LLVM ran out of them in the third precision (2026-11-25): release
        engine.release_compiled()
        lm = load("smollm2-135m", dtype=jnp.bfloat16 if prec == "bfloat16" else jnp.float32,
                  quantize="w8a8" if prec == "w8a8" else None)
        tok = lm.tokenizer
        prompts = [tok.encode_chat(t) for t in texts]
        pl = methods.build("prompt_lookup", lm, {})
        rows = {n: {"precision": prec, "numerics": n, "date": out["date"]}
                for n in ("fast", "exact")}
        for B in (1, 4):
            rates = {(n, m): [] for n in rows for m in ("ar", "prompt_lookup")}
            toks = {}
            for rep in range(a.repeats + 1):  # the first run compiles
                for n in rows:  # interleaved, so both modes see the same machine
                    lm.model.set_numerics(n)
                    for name, drafter, policy in (("ar", None, None),
                                                  ("prompt_lookup", pl.drafter, pl.policy)):
                        t0, cnt, got = 0.0, 0, []
                        for s in range(0, len(prompts), B):
                            r = generate(lm.model, prompts[s:s + B], batch_size=B,
                                         max_new_tokens=a.max_new_tokens, eos_ids=tok.eos_ids,
                                         drafter=drafter, policy=policy)
                            t0 += r.wall_s[0]
                            cnt += sum(r.new_tokens)
                            got += r.tokens
                        if rep:
                            rates[(n, name)].append(cnt / t0)
                        toks[(n, name)] = got
            for n, row in rows.items():
                for name in ("ar", "prompt_lookup"):
                    row[f"{name}_b{B}_tok_s"] = statistics.median(rates[(n, name)])
                row[f"prompt_lookup_b{B}_speedup"] = (row[f"prompt_lookup_b{B}_tok_s"]
                                                      / row[f"ar_b{B}_tok_s"])
                row[f"identical_b{B}"] = sum(x == y for x, y in zip(toks[(n, "ar")],
                                                                    toks[(n, "prompt_lookup")]))
        if unseen:
            up = [tok.encode_chat(it["prompt"]) for it in unseen]
            for n, row in rows.items():
                lm.model.set_numerics(n)
                c = compare_with_plain(lm.model, up, pl.drafter, pl.policy, batch_size=4,
                                       max_new_tokens=a.max_new_tokens, eos_ids=tok.eos_ids)
                row["unseen_identical"] = c["identical"]
                row["unseen_prompts"] = c["prompts"]
                row["unseen_s"] = c["plain_s"] + c["spec_s"]
        for row in rows.values():
            out["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        finish(out, a.out)  # after every precision: a crash or a time limit loses no row
    print(json.dumps(out["rows"], indent=1))


def finish(out: dict, path: str) -> None:
    for r in out["rows"]:
        if r["numerics"] == "exact":
            f = next(x for x in out["rows"] if x["precision"] == r["precision"]
                     and x["numerics"] == "fast")
            for B in (1, 4):
                r[f"ar_b{B}_cost_vs_fast"] = 1 - r[f"ar_b{B}_tok_s"] / f[f"ar_b{B}_tok_s"]
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
