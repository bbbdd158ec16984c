"""Is speculative decoding token-identical to plain decoding here, in fast and exact numerics?

A quick check for a lent accelerator (one compile per numerics and method, no timing repeats):
plain decoding and prompt lookup over a prompt set at one batch size, in the given dtype,
writing one JSON row per numerics mode as soon as it is measured.

    python scripts/identity_check.py --prompts spec_bench:FILE --limit 2 --dtype bfloat16 \
        --out identity.json
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", required=True, help="a KIND:PATH prompt spec")
    ap.add_argument("--limit", type=int, default=2, help="prompts per category")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--numerics", default="fast,exact")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from specjax import methods
    from specjax.bench.machine import machine_description, utc_now
    from specjax.bench.prompts import load_prompts
    from specjax.bench.identity import compare_with_plain
    from specjax.models.loaders import load

    lm = load("smollm2-135m", dtype=getattr(jnp, a.dtype))
    tok = lm.tokenizer
    items = load_prompts(a.prompts, None, a.limit)
    prompts = [tok.encode_chat(it["prompt"]) for it in items]
    pl = methods.build("prompt_lookup", lm, {})
    out = {"date": utc_now(), "machine": machine_description(), "device": str(jax.devices()[0]),
           "dtype": a.dtype, "batch_size": a.batch_size, "max_new_tokens": a.max_new_tokens,
           "prompts": len(prompts), "rows": []}
    for n in a.numerics.split(","):
        lm.model.set_numerics(n)
        c = compare_with_plain(lm.model, prompts, pl.drafter, pl.policy,
                               batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                               eos_ids=tok.eos_ids)
        row = {"numerics": n, "ar_s_incl_compile": c["plain_s"],
               "prompt_lookup_s_incl_compile": c["spec_s"], "identical": c["identical"],
               "first_divergence": c["first_divergence"]}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
