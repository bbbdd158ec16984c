"""What a speculative step that drafts nothing costs, against a plain decoding step.

A policy that backs off (``k = 0`` for every row) leaves the speculative loop running steps
that draft nothing; the loop runs such a step as a plain decoding step plus the drafter's
``skip`` (``DecodeLoop.idle_skip``, ``SPECJAX_IDLE_STEPS``; the EAGLE head defers its
pass). This times, inside the decode loop, seconds per target forward of plain decoding and
of the method under a policy that never drafts, with the idle path on and off (off:
``propose`` and ``update`` run every step, drafting nothing: the engine before the idle
path), at each batch size; medians of interleaved repeats after a compiling run. The
``policy`` variant runs the method's own policy as ``methods.build`` resolves it at that batch
size (above batch 1 the cost-aware ``adaptive``, which probes early on and then drafts
nothing where drafting does not pay): the step cost a benchmark's method pays, less what the
first steps (a probe among them) cost, since the difference of a short and a long run is
timed. Prints JSON (``--out`` writes it too).

    python scripts/measure_idle_step.py --method eagle --batch-sizes 1,4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics


@dataclasses.dataclass(frozen=True)
class NeverDraft:
    """A policy that gives every row k = 0 in every step."""

    max_k: int
    name: str = "never"
    stops_mid_draft: bool = False

    def init(self, batch):
        return ()

    def decide(self, state, ctx):
        import jax.numpy as jnp

        return jnp.zeros(ctx.seq_len.shape, jnp.int32)

    def update(self, state, k, n_draft, n_acc):
        return state


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="eagle")
    ap.add_argument("--method-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", default="plain,idle,propose-every-step",
                    help="which of plain, idle, propose-every-step, policy to time (plain is "
                         "always)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.machine import machine_description, print_and_write_json, utc_now
    from specjax.buckets import cache_length
    from specjax.engine import generate, idle_steps
    from specjax.models.loaders import load
    from specjax.sampling import SamplingParams

    lm = load(a.model)
    margs = methods.parse_method_args(a.method_arg)
    drafter = methods.build(a.method, lm, margs).drafter
    policy = NeverDraft(int(drafter.max_k))
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(a.prefix)]
    short, long = 4, 4 + a.steps
    cache_len = cache_length(a.prefix, long + 1)

    def per_forward(batch, variant):
        if variant == "policy":
            m = own[batch]
            kw = dict(drafter=m.drafter, policy=m.policy, verifier=m.verifier)
        else:
            kw = {} if variant == "plain" else dict(drafter=drafter, policy=policy)

        def decode(n):
            with idle_steps(variant != "propose-every-step"):
                r = generate(lm.model, [prompt] * batch, max_new_tokens=n, cache_len=cache_len,
                             sampling=SamplingParams(temperature=0.0), batch_size=batch, **kw)
            return r.wall_s[0] - r.prefill_s[0], max(r.target_forwards)

        (t1, f1), (t2, f2) = decode(short), decode(long)
        return max(t2 - t1, 1e-9) / max(f2 - f1, 1)

    variants = tuple(dict.fromkeys(["plain"] + a.variants.split(",")))
    unknown = set(variants) - {"plain", "idle", "propose-every-step", "policy"}
    if unknown:
        ap.error(f"--variants: unknown {sorted(unknown)}")
    batches = [int(x) for x in a.batch_sizes.split(",")]
    own = {b: methods.build(a.method, lm, margs, batch=b, cache_len=cache_len)
           for b in batches} if "policy" in variants else {}
    rows = []
    for b in batches:
        for v in variants:  # compile
            per_forward(b, v)
        ts = {v: [] for v in variants}
        for _ in range(a.repeats):
            for v in variants:
                ts[v].append(per_forward(b, v))
        med = {v: statistics.median(t) for v, t in ts.items()}
        rows.append({"batch": b, **{f"{v}_step_s": med[v] for v in variants},
                     **{f"{v.replace('-', '_')}_over_plain": med[v] / med["plain"]
                        for v in variants if v != "plain"}})
        print(json.dumps(rows[-1]), flush=True)
    out = {"command": "python scripts/measure_idle_step.py " + " ".join(
        [f"--method {a.method}"] + [f"--method-arg {x}" for x in a.method_arg]
        + [f"--batch-sizes {a.batch_sizes}", f"--prefix {a.prefix}", f"--steps {a.steps}",
           f"--repeats {a.repeats}", f"--variants {a.variants}"]), "date": utc_now(),
        "machine": machine_description(), "model": a.model, "method": a.method,
        "method_args": margs, "prefix": a.prefix, "steps": a.steps, "repeats": a.repeats,
        "rows": rows}
    print_and_write_json(out, a.out)


if __name__ == "__main__":
    main()
