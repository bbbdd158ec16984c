"""A/B of decoding methods on chosen Spec-Bench questions: interleaved repeats (the order
reversed every other round) after a warm-up round, one static cache length so each method
compiles one loop, every output checked against plain decoding. Prints per method and
question the median wall and decode seconds, target forwards, milliseconds per forward, the
speedup over plain decoding and the drafter's per-source counters, then the totals.

A diagnostic, not the benchmark: the fixed cache length makes every step attend over the
whole cache (plain decoding of a short prompt runs slower than under ``specjax bench``'s
per-prompt buckets), and methods that learn across calls must be given ``learn=false``
(a repeat would draft from its own earlier answer; ``specjax bench`` refuses that), or
``--warm-journal``: each question then starts from what the drafter had learnt by that
question in a benchmark journal (the answers of the groups recorded before it, learnt in
journal order and restored before every timed call), so a learning drafter is timed over the
cache it had in the benchmark. ``--cache-len 0`` gives each prompt its own cache bucket, as
``specjax bench`` does.

    python scripts/ab_methods.py --ids 131,152,482,161,81 --repeats 2 \\
        --methods prompt_lookup ngram:learn=false "ngram:learn=false,sources=suffix;prompt_lookup"

A method is ``name[:key=value,key=value][@noidle]``; ``;`` inside a value stands for a comma.
``@noidle`` runs it without idle steps (``SPECJAX_IDLE_STEPS=off``: a step where nothing
is drafted verifies the pending token alone), to time what the idle steps save.
"""

from __future__ import annotations

import argparse
import collections
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default="131,152,482,161,81", help="Spec-Bench question ids")
    ap.add_argument("--methods", nargs="+", required=True)
    ap.add_argument("--prompts", default="spec_bench:../shared/data/spec_bench/question.jsonl")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-len", type=int, default=1024)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--warm-journal", default=None,
                    help="a `specjax bench` journal: learning drafters start each question "
                         "from the answers recorded before it (a question the journal lacks: "
                         "from all of them)")
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.prompts import load_prompts
    from specjax.drafters.base import learns_across_calls
    from specjax.engine import generate, idle_steps
    from specjax.models.loaders import load

    lm = load(a.model)
    byid = {str(it["id"]): it for it in load_prompts(a.prompts)}
    ids = a.ids.split(",")
    missing = [i for i in ids if i not in byid]
    if missing:
        raise SystemExit(f"no question with id {', '.join(missing)} in {a.prompts}")
    prompts = {i: lm.tokenizer.encode_chat(byid[i]["prompt"]) for i in ids}
    built = {"ar": (None, None, None)}
    for spec in a.methods:
        name, args = methods.parse_method_spec(spec.removesuffix("@noidle"))
        built[spec] = methods.build(name, lm, args, cache_len=a.cache_len or None)
        if learns_across_calls(built[spec][0]) and a.warm_journal is None:
            raise SystemExit(f"{spec}: learns across calls; give it learn=false "
                             "or --warm-journal")
    warm = {}  # (spec, question id) -> the drafter's snapshot before that question
    if a.warm_journal is not None:
        from specjax.bench.journal import warm_snapshots

        for spec, (d, _, _) in built.items():
            if learns_across_calls(d):
                snaps = warm_snapshots(d, a.warm_journal, byid, lm.tokenizer.encode_chat, ids)
                warm.update({(spec, i): s for i, s in snaps.items()})
    eos = lm.tokenizer.eos_ids
    res = collections.defaultdict(lambda: collections.defaultdict(list))
    ref = {}
    for rep in range(a.repeats + 1):  # round 0: compiling and warm-up, not counted
        order = list(built) if rep % 2 == 0 else list(built)[::-1]
        for i in ids:
            for spec in order:
                d, p, v = built[spec]
                if (spec, i) in warm:
                    d.restore(warm[spec, i])
                with idle_steps(not spec.endswith("@noidle")):
                    r = generate(lm.model, [prompts[i]], max_new_tokens=a.max_new_tokens,
                                 eos_ids=eos, cache_len=a.cache_len or None, drafter=d,
                                 policy=p, verifier=v)
                if spec == "ar":
                    ref[i] = r.tokens[0]
                elif i in ref and r.tokens[0] != ref[i]:
                    raise SystemExit(f"{spec} on question {i}: output differs from plain")
                if rep == 0:
                    continue
                ex = r.extra or {}
                stats = {k.split("_", 1)[1]: x[0] for k, x in ex.items()
                         if k.startswith(f"{getattr(d, 'name', '')}_")}
                stats["drafted"] = ex.get("drafted", [0])[0]
                stats["accepted"] = ex.get("accepted", [0])[0]
                res[spec][i].append((r.wall_s[0], r.wall_s[0] - r.prefill_s[0],
                                     r.target_forwards[0], stats))
    print(f"{'method':44s} {'id':>5s} {'wall':>6s} {'decode':>6s} {'fwd':>4s} {'ms/fwd':>6s} "
          f"{'speedup':>7s}  drafter counters")
    total = collections.defaultdict(float)
    for spec in built:
        for i in ids:
            rs = res[spec][i]
            wall = statistics.median(x[0] for x in rs)
            dec = statistics.median(x[1] for x in rs)
            fwd = rs[0][2]
            total[spec] += wall
            plain = statistics.median(x[0] for x in res["ar"][i])
            print(f"{spec:44s} {i:>5s} {wall:6.2f} {dec:6.2f} {fwd:4d} {1000 * dec / fwd:6.1f} "
                  f"{plain / wall:7.2f}  {rs[0][3]}")
    for spec in built:
        print(f"TOTAL {spec:44s} {total['ar'] / total[spec]:.3f}x  wall {total[spec]:.1f} s")


if __name__ == "__main__":
    main()
