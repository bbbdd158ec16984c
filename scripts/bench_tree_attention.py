"""Benchmark of tree attention (pallas_kernels/tree_attention) per implementation.

Times ``tree_attention`` for N tree nodes x committed prefix lengths at SmolLM2-135M head shapes
(B=1, H=9, KVH=3, Dh=64), float32 and bfloat16: median of ``--repeats`` runs after warm-up
(compile excluded). Reports the achieved bandwidth (bytes of the prefix K/V read, plus the tree
K/V, mask, q and out, over the time) and its fraction of two bandwidths measured in the same
run: a device-to-device copy (a large jnp ``a + 1``: read + write bytes over time; the GPU
reference) and a read (a large ``jnp.sum``; on CPU the copy is dominated by page faults of the
fresh output buffer, so the read is the fairer ceiling there). The cache holds exactly the
prefix (length == S); the tree mask is the ancestor mask of a random tree.

    python scripts/bench_tree_attention.py --output out/bench_tree_attention.json
    python scripts/bench_tree_attention.py --implementations xla pallas_mosaic_gpu   # on a GPU

On CPU only "xla" runs by default: "pallas_interpret" timings measure the interpreter, not a
kernel.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import platform
import statistics
import sys
import time
import warnings

import numpy as np

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M


def _best_seconds(fn, x, reps: int) -> float:
    fn(x).block_until_ready()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(x).block_until_ready()
        ts.append(time.perf_counter() - t)
    return min(ts)


def measure_bandwidths(mb: int, reps: int = 5) -> tuple[float, float]:
    """(copy, read) GB/s over ``mb`` MB, best of ``reps``: a device-to-device copy (``a + 1``
    into a fresh buffer; read + write bytes over time) and a full reduction (read bytes)."""
    import jax
    import jax.numpy as jnp

    n = mb * (1 << 20) // 4
    x = jnp.arange(n, dtype=jnp.float32)
    copy = 2 * n * 4 / _best_seconds(jax.jit(lambda a: a + 1.0), x, reps) / 1e9
    read = n * 4 / _best_seconds(jax.jit(jnp.sum), x, reps) / 1e9
    return copy, read


def make_inputs(nodes: int, length: int, dtype, seed: int = 0):
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32).astype(dtype)

    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, nodes)]
    mask = np.zeros((nodes, nodes), bool)
    for i in range(nodes):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parent[j]
    return (normal(1, nodes, HEADS, HEAD_DIM), normal(1, length, KV_HEADS, HEAD_DIM),
            normal(1, length, KV_HEADS, HEAD_DIM), jnp.array([length], jnp.int32),
            normal(1, nodes, KV_HEADS, HEAD_DIM), normal(1, nodes, KV_HEADS, HEAD_DIM),
            jnp.asarray(mask[None]))


def bytes_moved(nodes: int, length: int, itemsize: int) -> int:
    kv_prefix = 2 * length * KV_HEADS * HEAD_DIM * itemsize
    kv_tree = 2 * nodes * KV_HEADS * HEAD_DIM * itemsize
    q_out = 2 * nodes * HEADS * HEAD_DIM * itemsize
    return kv_prefix + kv_tree + q_out + nodes * nodes


def time_call(fn, args, warmup: int, repeats: int) -> tuple[float, float, float]:
    """(compile + first run seconds, median seconds, min seconds)."""
    t = time.perf_counter()
    fn(*args).block_until_ready()
    first = time.perf_counter() - t
    for _ in range(warmup):
        fn(*args).block_until_ready()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        ts.append(time.perf_counter() - t)
    return first, statistics.median(ts), min(ts)


def main(argv: list[str] | None = None) -> int:
    import jax
    import jax.numpy as jnp

    from specjax.pallas_kernels.tree_attention import api, tree_attention

    backend = jax.default_backend()
    default_impls = {"gpu": ["xla", "pallas_mosaic_gpu"],
                     "tpu": ["xla", "pallas_mosaic_tpu"]}.get(backend, ["xla"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--implementations", nargs="+", default=default_impls,
                   choices=api.IMPLEMENTATIONS)
    p.add_argument("--nodes", nargs="+", type=int, default=[1, 8, 32, 64])
    p.add_argument("--lengths", nargs="+", type=int, default=[256, 2048, 8192])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                   choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=20 if backend != "cpu" else 5)
    p.add_argument("--warmup", type=int, default=3 if backend != "cpu" else 1)
    p.add_argument("--block-k", type=int, default=None)
    p.add_argument("--num-splits", type=int, default=None)
    p.add_argument("--copy-mb", type=int, default=1024 if backend != "cpu" else 256)
    p.add_argument("--output", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)

    copy_gbs, read_gbs = measure_bandwidths(args.copy_mb)
    print(f"device: {jax.devices()[0].device_kind} ({backend}); jax {jax.__version__}; "
          f"copy bandwidth {copy_gbs:.1f} GB/s (read+write), read bandwidth {read_gbs:.1f} GB/s "
          f"({args.copy_mb} MB)", flush=True)
    rows = []
    for dtype_name in args.dtypes:
        dtype = jnp.dtype(dtype_name)
        for length in args.lengths:
            for nodes in args.nodes:
                inputs = make_inputs(nodes, length, dtype)
                moved = bytes_moved(nodes, length, dtype.itemsize)
                for impl in args.implementations:
                    row = dict(implementation=impl, dtype=dtype_name, nodes=nodes,
                               prefix_length=length, bytes=moved)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        effective = api.resolve_implementation(impl, dtype, HEAD_DIM,
                                                               args.block_k)
                    if effective != impl:
                        row.update(skipped=f"falls back to {effective!r} here")
                        rows.append(row)
                        print(f"{impl:18s} {dtype_name:8s} N={nodes:3d} L={length:5d}  "
                              f"skipped ({row['skipped']})", flush=True)
                        continue
                    fn = jax.jit(functools.partial(tree_attention, implementation=impl,
                                                   block_k=args.block_k,
                                                   num_splits=args.num_splits))
                    first, median, best = time_call(fn, inputs, args.warmup, args.repeats)
                    gbs = moved / median / 1e9
                    row.update(compile_and_first_s=first, median_s=median, min_s=best,
                               achieved_gbs=gbs, fraction_of_copy_bandwidth=gbs / copy_gbs,
                               fraction_of_read_bandwidth=gbs / read_gbs)
                    rows.append(row)
                    print(f"{impl:18s} {dtype_name:8s} N={nodes:3d} L={length:5d}  "
                          f"{median * 1e6:10.1f} us  {gbs:7.2f} GB/s  "
                          f"{100 * gbs / copy_gbs:5.1f}% of copy  "
                          f"{100 * gbs / read_gbs:5.1f}% of read", flush=True)

    print("\n| implementation | dtype | N | prefix | median (us) | GB/s | % of copy BW "
          "| % of read BW |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "skipped" in r:
            continue
        print(f"| {r['implementation']} | {r['dtype']} | {r['nodes']} | {r['prefix_length']} | "
              f"{r['median_s'] * 1e6:.1f} | {r['achieved_gbs']:.2f} | "
              f"{100 * r['fraction_of_copy_bandwidth']:.1f} | "
              f"{100 * r['fraction_of_read_bandwidth']:.1f} |")
    result = dict(
        benchmark="tree_attention",
        command="python " + " ".join([sys.argv[0]] + (sys.argv[1:] if argv is None else argv)),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=dict(backend=backend, kind=jax.devices()[0].device_kind,
                    machine=platform.machine(), processor=platform.processor()),
        jax_version=jax.__version__,
        shapes=dict(batch=1, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM),
        copy_bandwidth_gbs=copy_gbs, read_bandwidth_gbs=read_gbs,
        bandwidth_probe_mb=args.copy_mb,
        repeats=args.repeats, warmup=args.warmup, block_k=args.block_k,
        num_splits=args.num_splits, rows=rows,
        note="bytes = prefix K/V + tree K/V + q + out + mask; cache length == prefix length",
    )
    if args.output:
        import pathlib

        path = pathlib.Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
