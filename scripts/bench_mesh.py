"""Compile time and per-step time of decoding on simulated device meshes (issue 25).

A CPU shows correctness, not speed: ``--devices`` simulated devices share this machine's cores,
so splitting a batch or a matmul over them only adds the partitioner's collectives. The figures
say what a mesh costs to compile and how much per step the collectives add on one host, for
scale; real speed needs a pod. SmolLM2-135M float32, batch 8 (built-in prompts), greedy,
plain decoding and prompt lookup, each mesh in turn.

    python scripts/bench_mesh.py --out docs/results/mesh_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/mesh_cpu.json")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--meshes", default="none;data=8;data=4,model=2;data=2,model=4;model=8")
    ap.add_argument("--methods", default="ar,prompt_lookup")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--model", default="smollm2-135m")
    a = ap.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={a.devices}"
    os.environ.setdefault("SPECJAX_COST_CURVE", "builtin")

    import jax

    from specjax import methods
    from specjax.data import BUILTIN
    from specjax.engine import generate
    from specjax.fingerprint import device_description
    from specjax.mesh import make_mesh
    from specjax.models.loaders import load
    from specjax.sharding import plan

    lm = load(a.model)
    prompts = [lm.tokenizer.encode_chat(p) for _, p in BUILTIN[:8]]
    rows, ref = [], {}
    for name in a.methods.split(","):
        m = methods.build(name, lm)
        for spec in a.meshes.split(";"):
            mesh = None if spec == "none" else make_mesh(spec)
            jax.clear_caches()
            kw = dict(max_new_tokens=a.max_new_tokens, batch_size=8, drafter=m.drafter,
                      policy=m.policy, mesh=mesh)
            t0 = time.perf_counter()
            first = generate(lm.model, prompts, **kw)
            total0 = time.perf_counter() - t0
            res = generate(lm.model, prompts, **kw)  # compiled: the step time
            steps = max(max(res.target_forwards), 1)
            decode_s = res.wall_s[0] - res.prefill_s[0]
            ref.setdefault(name, first.tokens)
            row = {"method": name, "mesh": spec, "compile_s": round(first.compile_s, 2),
                   "first_call_s": round(total0, 2), "prefill_s": round(res.prefill_s[0], 4),
                   "decode_s": round(decode_s, 4), "steps": steps,
                   "ms_per_step": round(1000 * decode_s / steps, 2),
                   "tokens_per_s": round(sum(len(t) for t in res.tokens) / res.wall_s[0], 1),
                   "identical_to_one_device": res.tokens == ref[name]}
            if mesh is not None:
                row["split"] = {k: v["axis"] for k, v in plan(lm.model.cfg, mesh).items()
                                if v["axis"]}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "device": device_description(), "jax": jax.__version__,
           "simulated_devices": a.devices, "model": a.model, "batch": 8,
           "max_new_tokens": a.max_new_tokens,
           "command": "python scripts/bench_mesh.py " + " ".join(sys.argv[1:]), "rows": rows}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
