"""The bookkeeping cost per step and the table memory of the model-free drafters (issue 24).

Each drafter's ``propose`` and ``update`` run alone, compiled, on SmolLM2's vocabulary over a
context of real text (the built-in prompts, repeated to ``--context`` tokens), at batch 1 and
4; the time is the median of ``--repeats`` calls. A step of the loop also pays what a drafter
asks of the verify forward: token recycling's top-k of the logits of every verified token,
timed here as ``features_ms`` (``specjax.features.from_output``: ``lax.top_k`` over
``[B, T, V]`` float32 logits with ``T`` the tree's nodes + 1, an argmax for one id). Memory:
the bytes of the drafter's parameters (the suffix cache) and of its per-row state (token
recycling's table). ``--learn-journal`` fills a learning drafter's cache with a
benchmark's answers first. A plain decoding step of SmolLM2 float32 takes ~30 ms
on this project's 2-core CPU (docs/benchmarks.md), for scale.

    python scripts/bench_drafter_overhead.py --out docs/results/drafter_overhead.json
"""

from __future__ import annotations

import argparse
import json
import sys
import types


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/drafter_overhead.json")
    ap.add_argument("--drafters", nargs="+", default=["prompt_lookup,token_recycling,suffix"],
                    help="method names, comma-separated, or specs name:key=value,... one per "
                         "argument (';' inside a value stands for a comma)")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--context", type=int, default=1024, help="tokens of context per row")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="> 0: propose as when sampling (a sampled drafter such as stand "
                         "draws its tokens and keeps its draft distributions)")
    ap.add_argument("--learn-journal", default=None,
                    help="a benchmark journal: a drafter that learns across calls (suffix "
                         "cache, datastore) first learns its plain-decoding answers, in "
                         "order, as it would have by the end of that run (the suffix scan "
                         "then meets real text, not an empty cache)")
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from specjax import methods
    from specjax.bench.machine import machine_description, utc_now
    from specjax.bench.timing import median_seconds
    from specjax.data.builtin import BUILTIN
    from specjax.bench.journal import read_journal
    from specjax.drafters.base import StepContext, learns_across_calls, planned_k, tree_spec
    from specjax.features import Features, from_output
    from specjax.models.loaders import load

    lm = load("smollm2-135m", numerics="fast")
    V = lm.model.cfg.vocab_size
    text = []
    for _, t in BUILTIN:
        text += lm.tokenizer.encode(t)
    while len(text) < a.context + 64:
        text += text
    answers = []  # the journal's plain-decoding outputs, in journal order
    if a.learn_journal is not None:
        for g in read_journal(a.learn_journal)[1]:
            answers += next(r for r in g["runs"] if r["method"] == "ar")["tokens"]
    out = {"command": " ".join(["python"] + sys.argv), "date": utc_now(),
           "machine": machine_description(), "device": str(jax.devices()[0]),
           "context": a.context, "vocab_size": V, "rows": []}

    def timed(f, *args):  # milliseconds
        return median_seconds(f, *args, repeats=a.repeats) * 1e3

    def nbytes(tree) -> int:
        return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(tree)
                   if hasattr(x, "dtype"))

    for name in methods.split_method_specs(a.drafters):  # rows labelled with the spec as given
        method, args = methods.parse_method_spec(name)
        d = methods.build(method, lm, args).drafter
        if answers and learns_across_calls(d):
            d.observe([[] for _ in answers], answers)
        params = d.params()
        spec = tree_spec(d)
        width = d.features.top_ids or 0
        for B in (int(b) for b in a.batches.split(",")):
            rng = np.random.default_rng(B)
            P = a.context
            seq_np = np.stack([np.asarray(text[o:o + P + 64], np.int32)
                               for o in rng.integers(0, 64, B)])
            prompt = jnp.asarray(seq_np[:, :P])
            lens = jnp.full((B,), P, jnp.int32)
            probs = bool(d.features.top_probs)

            def feats_of(T):
                if not width:
                    return Features()
                return Features(
                    top_ids=jnp.asarray(rng.integers(0, V, (B, T, width)), jnp.int32),
                    top_probs=(jnp.asarray(rng.dirichlet(np.ones(width), (B, T)), jnp.float32)
                               if probs else None))

            feats = feats_of(P)
            state = jax.jit(lambda p, t, n, f: d.init(p, lm.model, t, n, P + 64, f))(
                params, prompt, lens, feats)
            ctx = StepContext(seq=jnp.asarray(seq_np), seq_len=lens + 1,
                              target_cache=lm.model.init_cache(B, 8).with_lengths(lens),
                              keys=jnp.zeros((B, 2), jnp.uint32), live=jnp.ones((B,), bool),
                              temperature=jnp.float32(a.temperature or 1.0),
                              top_k=jnp.int32(0), top_p=jnp.float32(1))
            k = jnp.full((B,), d.max_k, jnp.int32)
            greedy = a.temperature <= 0
            def draft(p, s, c, kk):  # the loop's order: plan, then propose
                kk, s = planned_k(d, p, lm.model, s, c, kk, greedy)
                return d.propose(p, lm.model, s, c, kk, greedy)[:2]

            prop = jax.jit(draft)
            tree, _ = prop(params, state, ctx, k)
            propose_ms = timed(prop, params, state, ctx, k)
            D = spec.depth
            path = jnp.full((B, D), -1, jnp.int32)
            n_acc = jnp.zeros((B,), jnp.int32)
            cf = feats_of(D + 1)
            upd = jax.jit(lambda p, s, c, n, t, pa, f: d.update(p, s, c, n, t, pa, f))
            update_ms = timed(upd, params, state, ctx, n_acc, tree, path, cf)
            T = int(tree.tokens.shape[1]) + 1
            features_ms = 0.0
            if width:
                logits = jnp.asarray(rng.standard_normal((B, T, V)), jnp.float32)
                spec_f = d.features  # what the verify forward computes for the drafter
                features_ms = timed(jax.jit(lambda x: from_output(
                    spec_f, types.SimpleNamespace(logits=x, hidden=(), final_hidden=None)
                )), logits)
            row = {"drafter": name, "batch": B, "temperature": a.temperature, "nodes": T - 1,
                   "propose_ms": propose_ms,
                   "update_ms": update_ms, "features_ms": features_ms,
                   "step_ms": propose_ms + update_ms + features_ms,
                   "params_bytes": nbytes(params), "state_bytes": nbytes(state)}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
