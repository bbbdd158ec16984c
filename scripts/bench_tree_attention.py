"""Benchmark of tree attention (pallas_kernels/tree_attention) per implementation.

Times ``tree_attention`` for N tree nodes x committed prefix lengths at SmolLM2-135M head shapes
(``--batch``, H=9, KVH=3, Dh=64), float32 and bfloat16: median of ``--repeats`` runs after
warm-up (compile excluded), once each implementation's output has matched "xla" on the float32
upcast of the same inputs (a mismatch fails the case). Reports the achieved bandwidth (bytes of
the prefix K/V read, plus the tree K/V, mask, q and out, over the time) and its fraction of two
bandwidths measured in the same run: a device-to-device copy (a large jnp ``a + 1``: read +
write bytes over time; the GPU reference) and a read (a large ``jnp.sum``; on CPU the copy is
dominated by page faults of the fresh output buffer, so the read is the fairer ceiling there).
The cache holds exactly the prefix (length == S); the tree mask is the ancestor mask of a
random tree. ``--part prefix`` times the prefix kernel alone.

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


def make_inputs(nodes: int, length: int, dtype, seed: int = 0, batch: int = 1):
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
    b = batch
    return (normal(b, nodes, HEADS, HEAD_DIM), normal(b, length, KV_HEADS, HEAD_DIM),
            normal(b, length, KV_HEADS, HEAD_DIM), jnp.full((b,), length, jnp.int32),
            normal(b, nodes, KV_HEADS, HEAD_DIM), normal(b, nodes, KV_HEADS, HEAD_DIM),
            jnp.asarray(np.broadcast_to(mask[None], (b, nodes, nodes))))


def bytes_moved(nodes: int, length: int, itemsize: int, batch: int = 1,
                part: str = "op") -> int:
    """The fewest bytes the op must move: each input read once, the output written once.
    ``part="prefix"``: the prefix kernel alone (prefix K/V and q in, float32 partials out)."""
    kv_prefix = 2 * length * KV_HEADS * HEAD_DIM * itemsize
    q = nodes * HEADS * HEAD_DIM * itemsize
    if part == "prefix":
        return batch * (kv_prefix + q + nodes * HEADS * (HEAD_DIM + 2) * 4)
    kv_tree = 2 * nodes * KV_HEADS * HEAD_DIM * itemsize
    return batch * (kv_prefix + kv_tree + 2 * q + nodes * nodes)


def prefix_partial(impl: str, block_k: int | None, num_splits: int | None):
    """The prefix part alone of ``impl``: grouped queries -> the unnormalised
    :class:`~specjax.pallas_kernels.tree_attention.reference.Partial` (acc, m, l)."""
    from specjax.pallas_kernels.tree_attention import api, reference

    def op(q, k_cache, v_cache, lengths, k_tree, v_tree, tree_mask):
        qg = reference.group_queries(q, KV_HEADS)
        scale = reference.default_scale(HEAD_DIM)
        if impl == "xla":
            return reference.prefix_partial_xla(qg, k_cache, v_cache, lengths, scale)
        bk, splits = api.kernel_settings(impl, q.shape[0], KV_HEADS, block_k, num_splits)
        if impl == "pallas_mosaic_gpu":
            from specjax.pallas_kernels.tree_attention import mosaic_gpu

            return mosaic_gpu.prefix_partial_mosaic_gpu(qg, k_cache, v_cache, lengths, scale,
                                                        block_k=bk, num_splits=splits)
        from specjax.pallas_kernels.tree_attention import kernel

        return kernel.prefix_partial_pallas(qg, k_cache, v_cache, lengths, scale, block_k=bk,
                                            num_splits=splits, mode=api.PALLAS_MODES[impl])

    return op


def prefix_op(impl: str, block_k: int | None, num_splits: int | None):
    """What ``--part prefix`` times: the accumulator of :func:`prefix_partial`."""
    partial = prefix_partial(impl, block_k, num_splits)
    return lambda *inputs: partial(*inputs).acc


def normalised_prefix(part) -> np.ndarray:
    """The prefix-only attention output ``acc / l`` of a Partial (0 where nothing is
    visible), comparable across implementations whatever their split of the prefix."""
    acc, l = np.asarray(part.acc, np.float32), np.asarray(part.l, np.float32)[..., None]
    return np.where(l > 0, acc / np.where(l > 0, l, 1.0), 0.0)


def time_call(fn, args, warmup: int, repeats: int) -> tuple[float, float, float]:
    """(compile + first run seconds, median seconds, min seconds) of ``fn(*args)``."""
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


def time_rotating(op, input_sets, warmup: int, repeats: int) -> tuple[float, float, float]:
    """Like :func:`time_call`, per call of ``op``, for one jitted program that calls ``op`` once
    on each of ``input_sets`` (distinct buffers, together larger than the GPU's L2 cache, so
    the prefix is read from HBM and not from L2; and one launch of the program amortises the
    host's dispatch over all the calls, which a microsecond kernel would otherwise not see)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def many(sets):
        # a scalar per call (the sum of its output, so no element can be optimised away)
        # keeps every call live without copying its output back
        return jnp.stack([jnp.sum(op(*s).astype(jnp.float32)) for s in sets])

    first, median, best = time_call(many, (input_sets,), warmup, repeats)
    r = len(input_sets)
    return first, median / r, best / r


# (atol, rtol) of an implementation's whole-op output against "xla" run on the float32
# upcast of the same inputs (as in tests/test_tree_attention.py)
CHECK_TOLERANCES = {"float32": (2e-5, 2e-5), "bfloat16": (2e-2, 2e-2)}


def part_output(impl: str, inputs, part: str = "op", block_k=None, num_splits=None
                ) -> np.ndarray:
    """What ``impl`` computes for ``part`` on ``inputs``, as float32: the whole op, or
    :func:`normalised_prefix` of the prefix part."""
    import jax
    import jax.numpy as jnp

    from specjax.pallas_kernels.tree_attention import tree_attention

    if part == "prefix":
        return normalised_prefix(jax.jit(prefix_partial(impl, block_k, num_splits))(*inputs))
    out = jax.jit(functools.partial(tree_attention, implementation=impl, block_k=block_k,
                                    num_splits=num_splits))(*inputs)
    return np.asarray(out.astype(jnp.float32))


def xla_reference(inputs, part: str = "op") -> np.ndarray:
    """:func:`part_output` of "xla" on the float32 upcast of ``inputs``."""
    import jax.numpy as jnp

    up = [x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x
          for x in inputs]
    return part_output("xla", up, part)


def check_against_xla(impl: str, inputs, ref: np.ndarray, dtype_name: str, block_k,
                      num_splits, part: str = "op") -> float:
    """Largest ``|out - ref| - rtol * |ref|`` of what ``impl`` computes for ``part`` against
    ``ref`` (:func:`xla_reference` of ``inputs`` and ``part``; <= atol means correct): a timing
    of a kernel that computes the wrong thing is worthless, and the kernel tests use small
    caches only."""
    out = part_output(impl, inputs, part, block_k, num_splits)
    _, rtol = CHECK_TOLERANCES[dtype_name]
    return float(np.max(np.abs(out - ref) - rtol * np.abs(ref)))


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
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--part", choices=["op", "prefix"], default="op",
                   help="op: the whole tree_attention call (prefix kernel, tree part, merge); "
                        "prefix: the prefix kernel alone, whose bytes are what bandwidth is "
                        "about at long prefixes")
    p.add_argument("--copy-mb", type=int, default=1024 if backend != "cpu" else 256)
    p.add_argument("--rotate-mb", type=int, default=256 if backend != "cpu" else 0,
                   help="time each case over distinct input sets of at least this many MB "
                        "together, called in one program (defeats the L2 cache and the "
                        "per-call dispatch on a GPU; 0: one input set, one call per timing)")
    p.add_argument("--output", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)

    copy_gbs, read_gbs = measure_bandwidths(args.copy_mb)
    print(f"device: {jax.devices()[0].device_kind} ({backend}); jax {jax.__version__}; "
          f"copy bandwidth {copy_gbs:.1f} GB/s (read+write), read bandwidth {read_gbs:.1f} GB/s "
          f"({args.copy_mb} MB)", flush=True)
    rows = []
    failed = 0
    for dtype_name in args.dtypes:
        dtype = jnp.dtype(dtype_name)
        for length in args.lengths:
            for nodes in args.nodes:
                inputs = make_inputs(nodes, length, dtype, batch=args.batch)
                moved = bytes_moved(nodes, length, dtype.itemsize, args.batch, args.part)
                n_sets = min(32, -(-args.rotate_mb * (1 << 20) // moved)) if args.rotate_mb else 0
                sets = [inputs] + [make_inputs(nodes, length, dtype, seed=i, batch=args.batch)
                                   for i in range(1, n_sets)] if n_sets else []
                ref = None  # computed once per case, for the first implementation that runs
                for impl in args.implementations:
                    row = dict(implementation=impl, dtype=dtype_name, nodes=nodes,
                               prefix_length=length, batch=args.batch, part=args.part,
                               bytes=moved)
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
                    op = (prefix_op(impl, args.block_k, args.num_splits)
                          if args.part == "prefix" else
                          functools.partial(tree_attention, implementation=impl,
                                            block_k=args.block_k, num_splits=args.num_splits))
                    try:
                        if ref is None:
                            ref = xla_reference(inputs, args.part)
                        excess = check_against_xla(impl, inputs, ref, dtype_name, args.block_k,
                                                   args.num_splits, args.part)
                        row.update(check_excess_over_rtol=excess)
                        if not excess <= CHECK_TOLERANCES[dtype_name][0]:
                            raise AssertionError(
                                f"wrong result: |out - ref| exceeds rtol * |ref| by {excess:.3g}"
                                f" > atol {CHECK_TOLERANCES[dtype_name][0]}")
                        if sets:
                            first, median, best = time_rotating(op, sets, args.warmup,
                                                                args.repeats)
                        else:
                            first, median, best = time_call(jax.jit(op), inputs, args.warmup,
                                                            args.repeats)
                    except Exception as e:  # noqa: BLE001 - recorded, and the run goes on
                        row.update(error=f"{type(e).__name__}: {e}"[:2000])
                        rows.append(row)
                        failed += 1
                        print(f"{impl:18s} {dtype_name:8s} N={nodes:3d} L={length:5d}  "
                              f"FAILED {row['error'][:300]}", flush=True)
                        continue
                    row.update(calls_per_timing=max(1, len(sets)))
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
        if "skipped" in r or "error" in r:
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
        part=args.part,
        shapes=dict(batch=args.batch, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM),
        copy_bandwidth_gbs=copy_gbs, read_bandwidth_gbs=read_gbs,
        bandwidth_probe_mb=args.copy_mb,
        repeats=args.repeats, warmup=args.warmup, block_k=args.block_k,
        rotate_mb=args.rotate_mb,
        num_splits=args.num_splits, rows=rows,
        note=("bytes = prefix K/V + tree K/V + q + out + mask (part op) or prefix K/V + q + "
              "float32 partials (part prefix); cache length == prefix length"),
    )
    if args.output:
        import pathlib

        path = pathlib.Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    if failed:
        print(f"{failed} case(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
