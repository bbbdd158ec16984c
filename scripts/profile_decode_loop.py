"""Where a decode step's time goes, by XLA operation kind, for plain decoding and any method.

Traces (``jax.profiler``, perfetto JSON) the decode loop of one synthetic prompt at two token
budgets with one cache length (one compiled program), sums the trace events of each operation
kind (``copy_bitcast_fusion``, ``ynn_fusion``, ... with the numbering dropped) and divides the
difference of the two runs by the difference of their target forwards: the prefill, the
transfers and the shorter drafts of the last steps before a budget cancel. Plain decoding is
always traced; ``--method junk:N`` drafts N copies of one token every step (the verify block
of N + 1 tokens of ``specjax bench --verify-curve --in-loop``), any other method is built as
``specjax bench`` builds it. Event totals include nested events (a ``cond`` holds its branch's
fusions), so compare kinds between runs rather than adding them up; calls per step say
whether a run does more work of a kind (traced times vary by 10-15% between runs of one
program on a 2-core VM, calls do not). ``--batch B`` decodes B
copies of the prompt (each method built with the defaults of that batch size);
``--never-draft`` runs each method under a policy that drafts nothing (its idle steps).
Tracing inflates a step about 3x on the project's 2-core CPU, so compare kinds, not totals.

    python scripts/profile_decode_loop.py --prefix 1150 --method junk:1 --method prompt_lookup
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import sys
import tempfile
from pathlib import Path


def kind_totals(trace_dir: Path) -> tuple[collections.Counter, collections.Counter]:
    """Microseconds and calls per operation kind in a perfetto trace (Python frames and the
    runtime's executor and thread-pool events left out)."""
    (f,) = glob.glob(str(trace_dir / "**" / "*.trace.json.gz"), recursive=True)
    data = json.load(gzip.open(f))
    events = data["traceEvents"] if isinstance(data, dict) else data
    out, calls = collections.Counter(), collections.Counter()
    for e in events:
        name = e.get("name", "")
        if (e.get("ph") != "X" or "dur" not in e or name.startswith(("$", "end:"))
                or "Thunk" in name or "Slinky" in name):
            continue
        kind = re.sub(r"[.\d]+$", "", name)
        out[kind] += e["dur"]
        calls[kind] += 1
    return out, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", action="append", default=[],
                    help="junk:N or a method, name[:key=value,...] with ';' for a comma inside "
                         "a value (repeatable); plain decoding is always run")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prefix", type=int, default=1150, help="prompt tokens")
    ap.add_argument("--budgets", default="24,72", help="the two token budgets traced")
    ap.add_argument("--batch", type=int, default=1, help="rows (copies of the prompt)")
    ap.add_argument("--never-draft", action="store_true",
                    help="run each method under a policy that drafts nothing (its idle steps, "
                         "as scripts/measure_idle_step.py times them)")
    ap.add_argument("--top", type=int, default=12, help="operation kinds printed per run")
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    a = ap.parse_args()
    short, long = (int(x) for x in a.budgets.split(","))
    if not 0 < short < long:
        ap.error("--budgets: two token budgets, the first smaller")

    import jax

    from specjax import methods
    from specjax.bench.curve import _JunkDrafter
    from specjax.bench.machine import machine_description, utc_now
    from specjax.buckets import cache_length
    from specjax.engine import generate
    from specjax.models.loaders import load

    lm = load(a.model)
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(a.prefix)]
    runs = {"plain": (None, None)}
    for spec in a.method:
        if spec.startswith("junk:"):
            n = int(spec.removeprefix("junk:"))
            runs[spec] = (_JunkDrafter(max_k=max(n, 1), n=n), None)
        else:
            name, args = methods.parse_method_spec(spec)
            m = methods.build(name, lm, args, batch=a.batch)  # the batch's defaults
            if a.never_draft:
                from measure_idle_step import NeverDraft  # scripts/ is on sys.path

                runs[spec] = (m.drafter, NeverDraft(int(m.drafter.max_k)))
            else:
                runs[spec] = (m.drafter, m.policy)
    K = max((int(d.max_k) for d, _ in runs.values() if d is not None), default=0)
    cache_len = cache_length(a.prefix, long + K + 2)
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (drafter, policy) in runs.items():
            def decode(n):
                return generate(lm.model, [prompt] * a.batch, max_new_tokens=n,
                                cache_len=cache_len, drafter=drafter, policy=policy,
                                batch_size=a.batch)

            decode(short)  # compile
            got = {}
            for n in (short, long):
                d = Path(tmp) / f"{len(table)}_{n}"
                with jax.profiler.trace(str(d), create_perfetto_trace=True):
                    r = decode(n)
                got[n] = (kind_totals(d), max(r.target_forwards),
                          r.wall_s[0] - r.prefill_s[0])
            ((ka, ca), fa, ta), ((kb, cb), fb, tb) = got[short], got[long]
            df = max(fb - fa, 1)
            per = {k: (kb[k] - ka[k]) / df / 1e3 for k in set(ka) | set(kb)}
            order = sorted(per, key=lambda k: -per[k])
            table[name] = {"forwards": [fa, fb], "decode_ms_per_step": (tb - ta) / df * 1e3,
                           "ms_per_step": {k: per[k] for k in order},
                           "calls_per_step": {k: (cb[k] - ca[k]) / df for k in order}}
            print(f"{name}: forwards {fa} -> {fb}, decode {(tb - ta) / df * 1e3:.1f} ms a step "
                  f"(traced)", flush=True)
            for k in order[:a.top]:
                print(f"  {per[k]:8.3f} ms/step {(cb[k] - ca[k]) / df:7.2f} calls/step  {k}",
                      flush=True)
    out = {"command": "python scripts/profile_decode_loop.py " + " ".join(sys.argv[1:]),
           "date": utc_now(), "machine": machine_description(), "model": a.model,
           "prefix": a.prefix, "batch": a.batch, "cache_len": cache_len,
           "budgets": [short, long], "runs": table}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
