"""What a verify block costs relative to a one-token forward, by static cache size.

The model's attention reads the whole static KV cache (masked past each row's length), so
both a plain step and a k-token verify block grow with the cache the engine allocates (a
bucket of the prompt length plus the token budget), and the block's price relative to a plain
step need not be the one measured on the short cache of the cost-curve probe
(:mod:`specjax.cost_curves`: a 128-token prefix). This times the lone verify forward of
``specjax bench --verify-curve`` (:func:`specjax.bench.curve.verify_curve`) at each cache size,
the same prefix, and prints seconds and the relative curve per cache size as JSON (``--out``
writes it too).

    python scripts/verify_cost_vs_cache.py --cache-lens 256,1024,2048,4096 --ks 1,2,4,8,16
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cache-lens", default="256,1024,2048,4096")
    ap.add_argument("--ks", default="1,2,4,8,16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    from specjax.bench.curve import verify_curve
    from specjax.bench.machine import machine_description, print_and_write_json, utc_now
    from specjax.fingerprint import device_description
    from specjax.models.loaders import load

    lm = load(a.model)
    ks = tuple(int(k) for k in a.ks.split(","))
    res = {"command": "python scripts/verify_cost_vs_cache.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None),
           "date": utc_now(), "device": device_description(), "machine": machine_description(),
           "model": a.model, "batch": a.batch, "prefix": a.prefix, "ks": list(ks), "by_cache": {}}
    for S in (int(s) for s in a.cache_lens.split(",")):
        c = verify_curve(lm, ks=ks, batches=(a.batch,), prefix=a.prefix, repeats=a.repeats,
                         cache_len=S)
        secs = c["seconds"][str(a.batch)]
        res["by_cache"][str(S)] = {"seconds": secs, "relative": c["relative"][str(a.batch)]}
        print(f"cache {S:5d}: " + "  ".join(f"k={k} {s * 1e3:6.1f} ms ({s / secs[0]:.2f})"
                                            for k, s in zip(ks, secs)), flush=True)
    print_and_write_json(res, a.out)


if __name__ == "__main__":
    main()
