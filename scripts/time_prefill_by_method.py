"""What a ``generate`` call costs a method before its decode loop: the timed prefill
(``prefill_s``: the target's prefill and the drafter's ``init``, and whatever the call's
arguments still had in flight) and the whole call, for one Spec-Bench question and
``max_new_tokens=2`` (so the decode loop is near empty), the methods interleaved round by
round (the order reversed every other round), the first two rounds dropped (compiling),
medians of the rest.

    python scripts/time_prefill_by_method.py --id 169 --methods prompt_lookup \\
        ngram:learn=false "ngram:learn=false,sources=sssd"

Found on 2026-12-03: the ``sssd`` datastore's tables (64 MB) were copied to the device on
every call, asynchronously, and the copy finished inside the timed prefill (docs/results/
prefill_by_method_2026-12-03.txt). A method is ``name[:key=value,...]`` (``;`` inside a
value stands for a comma); ``ar`` (plain decoding) always runs.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--id", default="169", help="a Spec-Bench question id")
    ap.add_argument("--methods", nargs="+", required=True)
    ap.add_argument("--prompts", default="spec_bench:../shared/data/spec_bench/question.jsonl")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cache-len", type=int, default=1024)
    a = ap.parse_args()
    if a.rounds < 3:
        raise SystemExit("--rounds must be at least 3 (the first two are dropped)")

    from specjax import methods
    from specjax.bench.prompts import load_prompts
    from specjax.engine import generate
    from specjax.models.loaders import load

    lm = load(a.model)
    byid = {str(it["id"]): it for it in load_prompts(a.prompts)}
    if a.id not in byid:
        raise SystemExit(f"no question with id {a.id} in {a.prompts}")
    prompt = lm.tokenizer.encode_chat(byid[a.id]["prompt"])
    built = {"ar": (None, None, None)}
    for spec in a.methods:
        name, args = methods.parse_method_spec(spec)
        built[spec] = methods.build(name, lm, args, cache_len=a.cache_len)
    pre = {s: [] for s in built}
    whole = {s: [] for s in built}
    for rnd in range(a.rounds):
        for spec in (list(built) if rnd % 2 else list(built)[::-1]):
            d, p, v = built[spec]
            t = time.perf_counter()
            r = generate(lm.model, [prompt], max_new_tokens=2, eos_ids=lm.tokenizer.eos_ids,
                         drafter=d, policy=p, verifier=v, cache_len=a.cache_len)
            dt = time.perf_counter() - t
            if rnd >= 2:
                pre[spec].append(r.prefill_s[0])
                whole[spec].append(dt)
    print(f"question {a.id}: {len(prompt)} prompt tokens, cache {a.cache_len}, "
          f"{a.rounds - 2} rounds")
    for spec in built:
        print(f"{spec:60s} prefill {1000 * statistics.median(pre[spec]):7.1f} ms  "
              f"whole call {1000 * statistics.median(whole[spec]):7.1f} ms")


if __name__ == "__main__":
    main()
