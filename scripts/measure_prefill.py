"""The price of an exact prefill: the engine's prefill program (``DecodeLoop.prefill``: the
target over the padded prompt into a fresh cache, the first token picked) timed in ``exact``
and ``fast`` numerics, per prompt length and precision, the two modes interleaved, medians of
repeats, one process. Writes JSON (and prints a table).

    python scripts/measure_prefill.py --out docs/results/prefill_exact_vs_fast.json
    python scripts/measure_prefill.py --lengths 128,768 --precisions float32 --repeats 5

Prompts are random token ids (the time does not depend on the tokens); the cache is the
engine's bucket for the prompt and 128 new tokens (:func:`specjax.buckets.cache_length`).
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/prefill_exact_vs_fast.json")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--lengths", default="64,256,768")
    ap.add_argument("--precisions", default="float32,bfloat16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    import jax.numpy as jnp
    import numpy as np

    from specjax.bench.machine import machine_description, utc_now
    from specjax.buckets import cache_length, prefill_length
    from specjax.engine import generate
    from specjax.models.loaders import load

    rows = []
    for precision in a.precisions.split(","):
        lm = load(a.model, dtype=jnp.dtype(precision))
        model = lm.model
        for n in (int(x) for x in a.lengths.split(",")):
            rng = np.random.default_rng(n)
            prompts = [rng.integers(0, model.cfg.vocab_size, n).tolist()
                       for _ in range(a.batch)]
            cache_len = cache_length(n, 128)
            times = {"exact": [], "fast": []}
            for rep in range(a.repeats + 1):  # round 0 compiles
                for mode in (("exact", "fast") if rep % 2 == 0 else ("fast", "exact")):
                    model.set_numerics(mode)
                    r = generate(model, prompts, max_new_tokens=1, batch_size=a.batch,
                                 cache_len=cache_len)
                    if rep:
                        times[mode].append(statistics.median(r.prefill_s))
            row = {"precision": precision, "prompt_tokens": n, "batch": a.batch,
                   "prefill_tokens": prefill_length(n),
                   "cache_len": cache_len,
                   "exact_s": statistics.median(times["exact"]),
                   "fast_s": statistics.median(times["fast"])}
            row["exact_over_fast"] = row["exact_s"] / row["fast_s"]
            rows.append(row)
            print(f"{precision:9s} {n:5d} tokens: exact {row['exact_s']:.3f} s, fast "
                  f"{row['fast_s']:.3f} s, {row['exact_over_fast']:.2f}x", flush=True)
    out = {"what": "prefill seconds (the engine's prefill program), exact against fast "
                   "numerics, median of repeats, modes interleaved",
           "command": "python scripts/measure_prefill.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()),
           "machine": machine_description(), "date": utc_now(), "rows": rows}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
