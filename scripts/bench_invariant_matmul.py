"""Times the batch-invariant product (pallas_kernels/invariant_matmul) against the backend's own
product and against exact numerics' XLA form (rows padded to a measured row class), at
SmolLM2-135M's product shapes, for a few row counts: the per-product price of invariance by
construction (issue 22). ``--attention`` times the attention part
(pallas_kernels/invariant_attention) against exact numerics' XLA form the same way, one row
of SmolLM2's heads over a ``--cache``-slot cache, the rows being the tokens of a block.

    python scripts/bench_invariant_matmul.py --output out/bench_invariant_matmul.json  # GPU/TPU
    python scripts/bench_invariant_matmul.py --rows 1 4 --reps 3                       # CPU

Each case first checks that the kernel's rows are bit-identical across the row counts timed
(a mismatch fails the run) and within float rounding of XLA's product; then the median of
``--reps`` timed calls after a warm-up (compile excluded) for each form. On CPU the kernel runs
in the Pallas interpreter: its time measures the interpreter, not a kernel (the CPU keeps
``exact_products="xla"``); the script is for a GPU or TPU. A result saved as
``docs/results/invariant_kernels_<where>.json`` gets its table in docs/benchmarks.md
(``scripts/make_benchmarks_md.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys

import numpy as np

from specjax.bench.timing import median_seconds

# SmolLM2-135M [out, in]: q/k/v, o, gate/up, down, the LM head
SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536),
          "lm_head": (49152, 576)}


def _attention_cases(args, mode: str, cases: list) -> int:
    """Appends the attention part's timings to ``cases``; returns the failed checks."""
    import jax
    import jax.numpy as jnp

    from specjax.models.numerics import _product_attention
    from specjax.pallas_kernels.invariant_attention import invariant_attention_part

    failed = 0
    s = args.cache
    for dname in args.dtypes:
        dtype = jnp.dtype(dname)
        kernel = jax.jit(lambda *a: invariant_attention_part(*a, dtype, mode=mode))
        planned = jax.jit(lambda *a: _product_attention(*a, dtype))
        rng = np.random.default_rng(0)
        t_max = max(args.rows)
        q = jnp.asarray(rng.standard_normal((1, t_max, 9, 64)), dtype)
        k = jnp.asarray(rng.standard_normal((1, 3, s, 64)), dtype)
        v = jnp.asarray(rng.standard_normal((1, 3, s, 64)), dtype)
        pre = jnp.asarray(np.arange(s)[None, None] < (s // 2 + np.arange(t_max))[None, :, None])
        m_t = jnp.full((1, t_max, 3, 3), -jnp.inf, jnp.float32)
        full = [np.asarray(a) for a in kernel(q, k, v, pre, m_t)]
        same = all(np.array_equal(np.asarray(kernel(q[:, :m], k, v, pre[:, :m], m_t[:, :m])[0]),
                                  full[0][:, :m]) for m in args.rows)
        ref = np.asarray(planned(q, k, v, pre, m_t)[0])  # unnormalised: relative to its size
        err = float(np.max(np.abs(full[0] - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        failed += not (same and err < 1e-2)
        for m in args.rows:
            a = (q[:, :m], k, v, pre[:, :m], m_t[:, :m])
            row = {"dtype": dname, "shape": "attention", "cache": s, "rows": m,
                   "rows_identical": same, "max_rel_vs_xla": err,
                   "kernel_ms": 1e3 * median_seconds(kernel, *a, repeats=args.reps),
                   "exact_xla_ms": 1e3 * median_seconds(planned, *a, repeats=args.reps)}
            row["kernel_vs_exact_xla"] = row["kernel_ms"] / row["exact_xla_ms"]
            cases.append(row)
            print(f"{dname:9s} attention rows={m:3d} cache={s} kernel {row['kernel_ms']:8.3f} ms"
                  f"  exact(xla) {row['exact_xla_ms']:8.3f} ms  x{row['kernel_vs_exact_xla']:.2f}"
                  f"  {'identical' if same else 'ROWS DIFFER'} err {err:.1e}", flush=True)
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--mode", default=None, help="kernel mode (default: the backend's)")
    ap.add_argument("--attention", action="store_true",
                    help="also time the attention part (tokens per call = --rows)")
    ap.add_argument("--cache", type=int, default=1024, help="cache slots for --attention")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from specjax.models.llama import exact_matmul
    from specjax.pallas_kernels.invariant_matmul import default_mode, invariant_matmul

    mode = args.mode or default_mode()
    kernel = jax.jit(lambda x, w: invariant_matmul(x, w, jnp.float32, mode=mode))
    xla = jax.jit(lambda x, w: jnp.einsum("ti,oi->to", x, w,
                                          preferred_element_type=jnp.float32))
    planned = jax.jit(lambda x, w: exact_matmul(x, w, jnp.float32))
    cases, failed = [], 0
    for dname in args.dtypes:
        dtype = jnp.dtype(dname)
        for name in args.shapes:
            n, k = SHAPES[name]
            kx, kw = jax.random.split(jax.random.PRNGKey(n + k))
            xs = jax.random.normal(kx, (max(args.rows), k), jnp.float32).astype(dtype)
            w = (jax.random.normal(kw, (n, k), jnp.float32) / np.sqrt(k)).astype(dtype)
            full = np.asarray(kernel(xs, w))
            same = all(np.array_equal(np.asarray(kernel(xs[:m], w)), full[:m])
                       for m in args.rows)
            err = float(np.max(np.abs(full - np.asarray(xla(xs, w)))))
            ok = same and err < (1e-3 if dname == "float32" else 5e-2)
            failed += not ok
            for m in args.rows:
                x = xs[:m]
                row = {"dtype": dname, "shape": name, "out": n, "in": k, "rows": m,
                       "rows_identical": same, "max_abs_vs_xla": err}
                for form, fn in (("kernel", kernel), ("xla", xla), ("exact_xla", planned)):
                    row[f"{form}_ms"] = 1e3 * median_seconds(fn, x, w, repeats=args.reps)
                row["kernel_vs_xla"] = row["kernel_ms"] / row["xla_ms"]
                row["kernel_vs_exact_xla"] = row["kernel_ms"] / row["exact_xla_ms"]
                row["kernel_gb_s"] = n * k * dtype.itemsize / row["kernel_ms"] / 1e6
                cases.append(row)
                print(f"{dname:9s} {name:8s} rows={m:3d} kernel {row['kernel_ms']:8.3f} ms  "
                      f"xla {row['xla_ms']:8.3f} ms  exact(xla) {row['exact_xla_ms']:8.3f} ms  "
                      f"x{row['kernel_vs_xla']:.2f}  {row['kernel_gb_s']:.0f} GB/s  "
                      f"{'identical' if same else 'ROWS DIFFER'} err {err:.1e}", flush=True)
    if args.attention:
        failed += _attention_cases(args, mode, cases)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
              "machine": platform.node(), "backend": jax.default_backend(),
              "device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
              "mode": mode, "reps": args.reps, "cases": cases, "failed_checks": failed}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
