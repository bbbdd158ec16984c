"""A/B of the one-token cache write: the lone one-token forward of ``specjax bench
--verify-curve`` (cache donated, batch ``--batch``) with :func:`specjax.cache.write_block`
against the plain one-element scatter it replaced on 2026-12-02, at each static cache size.

XLA rewrites a one-element scatter into a dynamic-update-slice, fuses it into exact
attention's gather of the cache, and then copies every layer's cache buffer to write it in
place; ``write_block`` scatters a second, dropped entry instead, which stays a scatter.
Both programs are compiled in one process and timed interleaved (the order reversed every
round), medians printed as JSON (``--out`` writes it too).

    python scripts/ab_one_token_write.py --cache-lens 144,256,1024,4096
"""

from __future__ import annotations

import argparse
import functools
import time


def scatter_write(buf, new, offsets):
    """The write before 2026-12-02: one scatter of the block, out-of-range entries dropped."""
    import jax.numpy as jnp

    B, T = new.shape[:2]
    idx = offsets[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    return buf.at[jnp.arange(B)[:, None], idx].set(new.astype(buf.dtype), mode="drop")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cache-lens", default="144,256,1024,4096")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    import specjax.models.llama as llama
    from specjax.bench.machine import machine_description, print_and_write_json, utc_now
    from specjax.fingerprint import device_description
    from specjax.models.loaders import load
    from specjax.models.numerics import compiler_options

    model = load(a.model).model
    graphdef, params = nnx.split(model)
    variants = {"scatter (before)": scatter_write, "write_block": llama.write_block}
    res = {"command": "python scripts/ab_one_token_write.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None),
           "date": utc_now(), "device": device_description(), "machine": machine_description(),
           "model": a.model, "batch": a.batch, "prefix": a.prefix, "ms": {}}
    B = a.batch
    toks = jnp.zeros((B, 1), jnp.int32)
    pos = jnp.full((B, 1), a.prefix, jnp.int32)
    try:
        for S in (int(s) for s in a.cache_lens.split(",")):
            progs = {}
            for name, wb in variants.items():
                llama.write_block = wb  # read at trace time

                @functools.partial(jax.jit, donate_argnames=("cache",),
                                   compiler_options=compiler_options(model.exact))
                def fwd(params, tokens, positions, cache):
                    o = nnx.merge(graphdef, params)(tokens, positions, cache)
                    return jnp.argmax(o.logits, -1), o.cache

                cache = model.init_cache(B, S).with_lengths(jnp.full((B,), a.prefix, jnp.int32))
                for _ in range(2):  # compile, warm up
                    out, cache = fwd(params, toks, pos, cache)
                    jax.block_until_ready(out)
                progs[name] = [fwd, cache, []]
            for r in range(a.rounds):
                for name in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                    p = progs[name]
                    t0 = time.perf_counter()
                    out, p[1] = p[0](params, toks, pos, p[1])
                    jax.block_until_ready(out)
                    p[2].append(time.perf_counter() - t0)
            res["ms"][str(S)] = {n: round(float(np.median(p[2])) * 1e3, 2)
                                 for n, p in progs.items()}
            print(f"cache {S:5d}: " + "  ".join(f"{n} {v:.1f} ms"
                                                for n, v in res["ms"][str(S)].items()),
                  flush=True)
    finally:
        llama.write_block = variants["write_block"]
    print_and_write_json(res, a.out)


if __name__ == "__main__":
    main()
