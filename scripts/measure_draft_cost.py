"""The draft step's cost relative to a plain decoding step, measured inside the decode loop.

A speculative step with ``k`` drafted tokens costs ``verify(k + 1) + k * draft`` plain steps.
``verify(k + 1)`` is timed with the in-loop probe of ``specjax bench --verify-curve --in-loop``
(junk drafts that cost nothing to make), the whole step with the method itself (its own
drafts, fixed ``k``, on real prompts), both as seconds per target forward after the prefill;
the difference over ``k`` is the cost of one draft token. Prints JSON.

    python scripts/measure_draft_cost.py --method eagle --k 3
    python scripts/measure_draft_cost.py --method medusa --k 3 --method-arg head=PATH
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="eagle")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--method-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.curve import verify_curve_in_loop
    from specjax.bench.machine import machine_description, utc_now
    from specjax.data.builtin import BUILTIN
    from specjax.engine import generate
    from specjax.models.loaders import load

    lm = load(a.model)
    # one prompt of each of the first four categories of the built-in set
    firsts = {}
    for cat, text in BUILTIN:
        firsts.setdefault(cat, text)
    prompts = [lm.tokenizer.encode_chat(t) for t in list(firsts.values())[:4]]
    args = {"k": str(a.k), "policy": "fixed", **methods.parse_method_args(a.method_arg)}
    m = methods.build(a.method, lm, args)
    eos = lm.tokenizer.eos_ids

    def per_forward(drafter, policy):
        """Median over repeats of decode seconds per target forward, all prompts."""
        out = []
        for rep in range(a.repeats + 1):  # the first run compiles
            secs = fw = 0.0
            for p in prompts:
                r = generate(lm.model, [p], max_new_tokens=a.max_new_tokens, eos_ids=eos,
                             drafter=drafter, policy=policy)
                secs += r.wall_s[0] - r.prefill_s[0]
                fw += r.target_forwards[0] - 1  # the prefill picked the first token
            if rep:
                out.append(secs / max(fw, 1))
        return statistics.median(out), out

    plain, plain_all = per_forward(None, None)
    step, step_all = per_forward(m.drafter, m.policy)
    K = a.k
    curve = verify_curve_in_loop(lm, ks=(1, K + 1), repeats=a.repeats)
    junk = curve["seconds"]["1"]  # [k = 1 (no draft), k = K + 1]
    verify_rel = junk[1] / junk[0]
    step_rel = step / plain
    draft_rel = (step_rel - verify_rel) / K  # both relative to their own one-token step
    draft_abs = (step - junk[1]) / (K * plain)  # seconds against seconds
    print(json.dumps({
        "method": a.method, "k": K, "method_args": args,
        "plain_step_s": round(plain, 5), "method_step_s": round(step, 5),
        "method_step_rel": round(step_rel, 4),
        "verify_rel_in_loop": round(verify_rel, 4),
        "draft_token_rel": round(draft_rel, 4),
        "draft_token_rel_abs": round(draft_abs, 4),
        "runs": {"plain": plain_all, "method": step_all, "junk_curve": junk},
        "machine": machine_description(), "date": utc_now(),
        "command": "python scripts/measure_draft_cost.py --method "
                   f"{a.method} --k {K} --repeats {a.repeats} --max-new-tokens "
                   f"{a.max_new_tokens}" + "".join(f" --method-arg {x}" for x in a.method_arg),
    }, indent=2))


if __name__ == "__main__":
    main()
