"""The cost of each draft-length policy's own computation per step (issue 23).

Every registered policy is built as the shipped EAGLE-3 drafter on SmolLM2 would use it
(``k = 6``; the shipped acceptance head for ``specdec++``; a one-entry table for
``batch_table``), and its three hooks run alone, compiled, at batch 1 and 4:

* ``decide`` (once per step);
* ``stop`` (once per drafted token, policies that stop mid-draft): a draft distribution over
  the head's 8,192-token draft vocabulary and its 576-wide hidden state;
* ``update`` (once per step), with DSDE's per-position KL divergences;
* the divergence itself (``kld_ms``, policies that read it): ``KL(target || draft)`` of every
  drafted position over the 49,152-token vocabulary, which the verify forward computes for
  them (the draft distributions in the full vocabulary, as the verifier gets them).

``step_ms`` = decide + update + kld + ``k`` stop calls (an upper bound: a stop cuts drafts
short). Medians of ``--repeats`` calls; a plain decoding step of SmolLM2 float32 takes ~30 ms
on this project's 2-core CPU, for scale.

    python scripts/bench_policy_overhead.py --out docs/results/policy_overhead.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/results/policy_overhead.json")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from specjax import methods
    from specjax.bench.machine import machine_description, utc_now
    from specjax.bench.timing import median_seconds
    from specjax.drafters.base import StepContext
    from specjax.loop import chain_kld
    from specjax.models.loaders import load
    from specjax.policies import POLICIES
    from specjax.policies.base import DraftStep
    from specjax.verifiers import SamplingArrays

    lm = load("smollm2-135m", numerics="fast")
    V = lm.model.cfg.vocab_size
    out = {"command": " ".join(["python"] + sys.argv), "date": utc_now(),
           "machine": machine_description(), "device": str(jax.devices()[0]), "k": a.k,
           "rows": []}

    def timed(f, *args):  # milliseconds
        return median_seconds(f, *args, repeats=a.repeats) * 1e3

    tmp = Path(tempfile.mkdtemp())
    extra = {"confidence": {}, "gammatune+": {}}
    for name in POLICIES.names():
        if name.startswith("_"):
            continue
        args = {"policy": name, "k": str(a.k), **extra.get(name, {})}
        if name == "batch_table":
            from specjax.policies.batch_table import FORMAT, table_key, write_table

            args["table"] = str(write_table(tmp / "t.json", {
                "format": FORMAT, "key": table_key(lm), "entries": {"1": {"k": 3}}}))
        m = methods.build("eagle", lm, args)
        pol, d = m.policy, m.drafter
        Vd = d.head_cfg.draft_vocab
        H = d.stop_hidden_size
        for B in (int(b) for b in a.batches.split(",")):
            rng = np.random.default_rng(B)
            state = pol.init(B)
            L = 512
            ctx = StepContext(seq=jnp.asarray(rng.integers(0, V, (B, L)), jnp.int32),
                              seq_len=jnp.full((B,), 300, jnp.int32), target_cache=None,
                              keys=jnp.zeros((B, 2), jnp.uint32), live=jnp.ones((B,), bool),
                              temperature=jnp.float32(0), top_k=jnp.int32(0),
                              top_p=jnp.float32(1))
            decide_ms = timed(jax.jit(pol.decide), state, ctx)
            k = jnp.full((B,), a.k, jnp.int32)
            n_draft = jnp.full((B,), a.k, jnp.int32)
            n_acc = jnp.asarray(rng.integers(0, a.k + 1, B), jnp.int32)
            reads_kld = "kld" in getattr(pol, "signals", ())
            kld_ms = 0.0
            if reads_kld:
                kld = jnp.asarray(rng.random((B, a.k)), jnp.float32)
                upd = jax.jit(lambda s, kk, nd, na, kl: pol.update(s, kk, nd, na, kld=kl))
                update_ms = timed(upd, state, k, n_draft, n_acc, kld)
                logits = jnp.asarray(rng.standard_normal((B, a.k + 1, V)), jnp.float32)
                q = jax.nn.softmax(jnp.asarray(rng.standard_normal((B, a.k, V)), jnp.float32))
                sa = SamplingArrays(temperature=jnp.float32(1), top_k=jnp.int32(0),
                                    top_p=jnp.float32(1))
                kld_ms = timed(jax.jit(lambda lg, qq: chain_kld(lg, qq, sa, True, a.k)),
                               logits, q)
            else:
                update_ms = timed(jax.jit(pol.update), state, k, n_draft, n_acc)
            stop_ms = 0.0
            if pol.stops_mid_draft:
                probs = jax.nn.softmax(jnp.asarray(rng.standard_normal((B, Vd)) * 3,
                                                   jnp.float32))
                step = DraftStep(index=jnp.int32(1), token=jnp.argmax(probs, -1).astype(
                    jnp.int32), probs=probs, hidden=jnp.asarray(rng.standard_normal((B, H)),
                                                                jnp.float32),
                    carry=jnp.zeros((B,), jnp.float32))
                stop_ms = timed(jax.jit(lambda s, st: pol.stop(s, st)), state, step)
            row = {"policy": name, "batch": B, "decide_ms": decide_ms, "update_ms": update_ms,
                   "stop_ms": stop_ms, "kld_ms": kld_ms,
                   "step_ms": decide_ms + update_ms + kld_ms + a.k * stop_ms}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
