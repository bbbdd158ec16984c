"""Benchmark of plain decoding: specjax (float32, bfloat16, w8a8) vs Hugging Face transformers.

Everything runs in one process on the same prompts, interleaved over repeats so machine drift
hits every configuration alike. Reports decode tokens/s (median and spread), prefill tokens/s,
compile time (never inside tokens/s), and the fraction of the memory-bandwidth limit reached
(bytes of weights + KV cache read per token over a measured read bandwidth).

    python scripts/bench_decode.py --max-new-tokens 128 --repeats 3 --output out/bench_decode.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time

import numpy as np

PROMPTS = [
    "Give me three tips for staying focused while studying.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain the difference between a list and a tuple in Python.",
    "What causes the seasons on Earth?",
]


def measure_read_bandwidth(mb: int = 512, reps: int = 5) -> float:
    """GB/s of a float32 matrix-vector product over ``mb`` MB (the decode access pattern)."""
    import jax
    import jax.numpy as jnp

    n = int(np.sqrt(mb * 1e6 / 4))
    w = jnp.ones((n, n), jnp.float32) * 0.001
    x = jnp.ones((n,), jnp.float32)
    f = jax.jit(lambda w, x: w @ x)
    f(w, x).block_until_ready()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f(w, x).block_until_ready()
        ts.append(time.perf_counter() - t)
    return n * n * 4 / min(ts) / 1e9


def weight_bytes_read(model) -> int:
    """Bytes of parameters one decode step reads: every weight, except the embedding table
    when the LM head is another matrix (untied, or the int8 copy of a quantized model): a
    token's embedding is a single row."""
    import jax
    from flax import nnx

    total = sum(a.nbytes for a in jax.tree.leaves(nnx.state(model, nnx.Param)))
    unread = 0
    if model.head_q is not None:
        unread = model.embed[...].nbytes + (
            0 if model.lm_head is None else model.lm_head[...].nbytes)
    elif model.lm_head is not None:
        unread = model.embed[...].nbytes
    return total - unread


def specjax_runner(dtype_name: str, ids, max_new: int):
    """``dtype_name``: float32 | bfloat16 (compute dtype) | w8a8 (float32 compute, int8
    weights and activations in the linear layers and the LM head)."""
    import jax.numpy as jnp

    from specjax.engine import generate
    from specjax.models.loaders import load

    quantize = "w8a8" if dtype_name == "w8a8" else None
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "w8a8": jnp.float32}[dtype_name]
    lm = load("smollm2-135m", dtype=dtype, quantize=quantize)
    weight_bytes = weight_bytes_read(lm.model)
    compile_s = generate(lm.model, ids[:1], max_new_tokens=max_new).compile_s

    def run(p):
        r = generate(lm.model, [p], max_new_tokens=max_new)  # no EOS: exactly max_new tokens
        n = r.new_tokens[0]
        decode_s = r.wall_s[0] - r.prefill_s[0]
        return {"new_tokens": n, "decode_tok_s": (n - 1) / decode_s,
                "prefill_tok_s": len(p) / r.prefill_s[0], "compile_s": r.compile_s,
                "tokens": r.tokens[0]}

    return run, compile_s, weight_bytes, lm.config


def hf_runner(kind: str, dtype_name: str, max_new: int):
    """Hugging Face transformers on the same checkpoint.

    kind "hf": a dense LlamaForCausalLM holding specjax's dequantized float32 weights (the
    like-for-like baseline); kind "hfgguf": transformers' own GGUF loading, which (since 5.x)
    keeps the weights packed and runs its quantized kernels.
    """
    import torch
    import transformers

    from specjax.models.loaders import load, resolve_preset

    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    if kind == "hfgguf":
        path = resolve_preset("smollm2-135m")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=dt)
    else:
        from specjax.bench import dense_hf_model

        model = dense_hf_model(load("smollm2-135m")).to(dt)
    model.eval()

    def run(p):
        x = torch.tensor([p])
        with torch.no_grad():
            t0 = time.perf_counter()
            model(x)
            prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = model.generate(x, max_new_tokens=max_new, min_new_tokens=max_new,
                                 do_sample=False, pad_token_id=0)
            total = time.perf_counter() - t0
        n = out.shape[1] - len(p)
        return {"new_tokens": n, "decode_tok_s": (n - 1) / max(total - prefill, 1e-9),
                "prefill_tok_s": len(p) / prefill, "compile_s": 0.0,
                "tokens": out[0, len(p):].tolist()}

    run(PROMPTS_IDS[0][:8])  # warm-up
    return run


PROMPTS_IDS: list[list[int]] = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default="specjax-float32,specjax-w8a8,specjax-bfloat16,"
                                         "hf-float32,hf-bfloat16,hfgguf-float32")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)

    from tqdm import tqdm

    from specjax.bench import cpu_name
    from specjax.models.loaders import load

    tok = load("smollm2-135m").tokenizer
    PROMPTS_IDS.extend(tok.encode_chat(p) for p in PROMPTS)
    bw = measure_read_bandwidth()
    print(f"measured matrix-vector read bandwidth: {bw:.1f} GB/s", file=sys.stderr)

    runners, meta = {}, {}
    for name in args.configs.split(","):
        kind, dtype_name = name.split("-", 1)
        if kind == "specjax":
            run, c, wbytes, cfg = specjax_runner(dtype_name, PROMPTS_IDS, args.max_new_tokens)
            meta[name] = {"compile_s": c, "weight_bytes": wbytes}
            kv_per_tok = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
            meta[name]["kv_bytes_per_cached_token"] = kv_per_tok
        elif kind in ("hf", "hfgguf"):
            run = hf_runner(kind, dtype_name, args.max_new_tokens)
            meta[name] = {"compile_s": 0.0}
        else:
            raise SystemExit(f"unknown config {name}")
        runners[name] = run

    results = {n: [] for n in runners}
    total = args.repeats * len(PROMPTS_IDS) * len(runners)
    with tqdm(total=total, desc="bench", file=sys.stderr) as bar:
        for _ in range(args.repeats):
            for p in PROMPTS_IDS:
                for name, run in runners.items():  # interleaved
                    results[name].append(run(p))
                    bar.update()

    ref_tokens = [r["tokens"] for r in results[next(iter(runners))]]
    rows = []
    base = None
    for name, rs in results.items():
        tps = [r["decode_tok_s"] for r in rs]
        med = statistics.median(tps)
        if name == "hf-float32":
            base = med
        row = {
            "config": name,
            "decode_tok_s_median": med,
            "decode_tok_s_min": min(tps),
            "decode_tok_s_max": max(tps),
            "prefill_tok_s_median": statistics.median(r["prefill_tok_s"] for r in rs),
            "compile_s": meta[name]["compile_s"],
            "same_tokens_as_first_config": all(
                r["tokens"] == t for r, t in zip(rs, ref_tokens)),
            # per prompt: how many leading tokens equal the first configuration's
            "common_prefix_with_first_median": statistics.median(
                next((i for i, (a, b) in enumerate(zip(r["tokens"], t)) if a != b),
                     min(len(r["tokens"]), len(t))) for r, t in zip(rs, ref_tokens)),
        }
        if "weight_bytes" in meta[name]:
            avg_ctx = np.mean([len(p) for p in PROMPTS_IDS]) + args.max_new_tokens / 2
            bytes_per_tok = meta[name]["weight_bytes"] + avg_ctx * meta[name][
                "kv_bytes_per_cached_token"]
            row["bandwidth_limit_tok_s"] = bw * 1e9 / bytes_per_tok
            row["fraction_of_bandwidth_limit"] = med / row["bandwidth_limit_tok_s"]
        rows.append(row)
    for row in rows:
        if base:
            row["vs_hf_float32"] = row["decode_tok_s_median"] / base
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{cpu_name()}, {__import__('os').cpu_count()} cores, "
                   f"{platform.platform()}",
        "command": "python " + " ".join(sys.argv),
        "read_bandwidth_GBps": bw,
        "max_new_tokens": args.max_new_tokens,
        "prompts": len(PROMPTS_IDS),
        "repeats": args.repeats,
        "results": rows,
    }
    print(f"{'config':20s} {'decode tok/s':>14s} {'min-max':>14s} {'prefill tok/s':>14s} "
          f"{'compile s':>10s} {'vs hf f32':>10s} {'of BW limit':>12s}")
    for r in rows:
        print(f"{r['config']:20s} {r['decode_tok_s_median']:14.1f} "
              f"{r['decode_tok_s_min']:6.1f}-{r['decode_tok_s_max']:<7.1f} "
              f"{r['prefill_tok_s_median']:14.1f} {r['compile_s']:10.1f} "
              f"{r.get('vs_hf_float32', float('nan')):10.2f} "
              f"{r.get('fraction_of_bandwidth_limit', float('nan')):12.2f}")
    if args.output:
        from pathlib import Path

        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
