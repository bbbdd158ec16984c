"""Decode time of plain decoding and prompt lookup on chosen Spec-Bench questions, for comparing
two commits of the engine run one after the other (``PYTHONPATH=<checkout>``, alternating).

Per question and method: prompt tokens, the median decode seconds of ``--repeats`` timed runs
after a warm-up run (prefill apart), the last run's prefill seconds, target forwards and the
first output tokens (the outputs must agree across commits). Greedy, float32, the engine's
default (exact) numerics, batch 1, each prompt its own cache bucket.

    for c in old new old new; do PYTHONPATH=/tmp/wt_$c python scripts/time_decode_by_prompt.py; done
"""

from __future__ import annotations

import argparse
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default="81,487,248")
    ap.add_argument("--methods", default="ar,prompt_lookup")
    ap.add_argument("--prompts", default="spec_bench:../shared/data/spec_bench/question.jsonl")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.prompts import load_prompts
    from specjax.engine import generate
    from specjax.models.loaders import load

    lm = load("smollm2-135m")
    byid = {str(it["id"]): it for it in load_prompts(a.prompts)}
    for qid in a.ids.split(","):
        p = lm.tokenizer.encode_chat(byid[qid]["prompt"])
        for name in a.methods.split(","):
            kw = {}
            if name != "ar":
                d, pol, ver = methods.build(name, lm)
                kw = dict(drafter=d, policy=pol, verifier=ver)
            ts = []
            for r in range(a.repeats + 1):
                res = generate(lm.model, [p], max_new_tokens=a.max_new_tokens, **kw)
                if r:
                    ts.append(res.wall_s[0] - res.prefill_s[0])
            print(qid, name, (len(p), round(statistics.median(ts), 3), round(res.prefill_s[0], 3),
                              res.target_forwards[0], res.tokens[0][:8]), flush=True)


if __name__ == "__main__":
    main()
