"""What one step of the speculative loop costs against a step of plain decoding, by the
number of junk tokens it drafts.

The probe drafter of ``specjax bench --verify-curve --in-loop`` (one fixed token, almost
never accepted, so each step yields one token) drafts ``n`` tokens a step; the engine's
maximum is ``--max-k`` (its verify buckets). ``n = 0`` is a draft-and-verify step with a
1-token block (the probe has no ``skip``, so it is not an idle step): what the speculative
step costs beyond its forward. Every run is timed in turn against plain decoding, per step,
in ``--repeats`` rounds (:func:`specjax.bench.curve.interleaved_seconds_per_forward`), and
each ratio is the median of the ratios within a round. Prints and writes (``--out``) JSON.
To compare with older code, run it with ``PYTHONPATH`` at a worktree of that revision.

    python scripts/step_cost_vs_plain.py --batch 4 --prefix 512 --max-k 8 --drafts 0,1,3,8
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--cache-len", type=int, default=1024)
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--drafts", default="0,1,3,8")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import numpy as np

    from specjax.bench.curve import _JunkDrafter, interleaved_seconds_per_forward
    from specjax.bench.machine import machine_description, print_and_write_json, utc_now
    from specjax.fingerprint import device_description
    from specjax.models.loaders import load

    drafts = [int(n) for n in a.drafts.split(",")]
    lm = load(a.model)
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(a.prefix)]
    budgets = (a.max_k + 2, a.max_k + 2 + a.steps)  # the same clipped tail in both
    if a.prefix + budgets[1] + 1 > a.cache_len:
        raise SystemExit(f"--cache-len {a.cache_len} cannot hold the {a.prefix}-token prompt "
                         f"and {budgets[1]} new tokens")
    runs = [(None, None)] + [(_JunkDrafter(max_k=a.max_k, n=n), None) for n in drafts]
    plain, *timed = interleaved_seconds_per_forward(lm, runs, prompt, a.batch, budgets,
                                                    a.cache_len, a.repeats)
    p = np.asarray(plain)
    res = {"command": "python scripts/step_cost_vs_plain.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None),
           "date": utc_now(), "device": device_description(), "machine": machine_description(),
           "model": a.model, "batch": a.batch, "prefix": a.prefix, "cache_len": a.cache_len,
           "max_k": a.max_k, "drafts": drafts, "plain_ms": float(np.median(p)) * 1e3,
           "step_ms": [float(np.median(t)) * 1e3 for t in timed],
           "relative": [float(np.median(np.asarray(t) / p)) for t in timed]}
    for n, ms, r in zip(drafts, res["step_ms"], res["relative"]):
        print(f"{n} drafted ({n + 1}-token block): {ms:6.1f} ms, {r:.3f} plain steps "
              f"({res['plain_ms']:.1f} ms)", flush=True)
    print_and_write_json(res, a.out)


if __name__ == "__main__":
    main()
