"""``specjax bench`` as a function: :func:`run` carries out a :class:`BenchConfig`.

The CLI turns its flags into a config (:meth:`BenchConfig.from_args`) and calls :func:`run`;
a script can build the config in Python and do the same. The checks here name the flags,
which are the config's fields (``--batch-size`` is ``batch_size``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specjax import _runtime
from specjax.bench import curve
from specjax.bench.config import BenchConfig, _fmt
from specjax.bench.journal import Journal, prompts_digest
from specjax.bench.machine import environment
from specjax.bench.plots import plot, plot_verify_curve
from specjax.bench.prompts import load_prompts, parse_batch_sizes, parse_positive_ints
from specjax.bench.report import format_table
from specjax.bench.runner import run_bench, sweep_batches
from specjax.errors import BenchError
from specjax.fingerprint import exact_products_of
from specjax.methods import base_method


def _csv(values) -> str | None:
    """``(1, 4)`` -> ``"1,4"`` (a tuple field as its flag value); None stays None."""
    return None if values is None else _fmt(tuple(values))


def _load(config: BenchConfig):
    """The target model of ``config`` (its name, dtype, quantization, attention)."""
    listed = [m.strip().split("@")[0] for m in config.methods]
    return _runtime.load_for_run(
        config.model, config.dtype, config.quantize, config.attention_impl,
        decodes_text=not config.verify_curve, numerics=config.numerics,
        exact_products=config.exact_products,
        speculative=not config.verify_curve and any(m not in ("ar", "") for m in listed))


def run(config: BenchConfig, argv: list[str] | None = None) -> int:
    """Runs the benchmark ``config`` describes, or its verify-cost curve
    (``config.verify_curve``): prints the table (the curve), writes ``config.output`` (JSON)
    and ``config.plot`` (PNG) when set.

    Args:
      config: the experiment.
      argv: the command line to record in the results (``"command"``); default: the
        ``specjax bench`` flags that run ``config``.

    Returns:
      The exit status, 0.

    Raises:
      BenchError: a setting that cannot run (unknown method, bad curve sizes, a journal from
        other settings, ...); errors of loading the model or the prompts likewise.
    """
    from tqdm import tqdm

    from specjax.methods import METHODS

    if argv is None:
        argv = ["bench", *config.to_argv()]
    quantize = config.quantize
    in_loop = config.in_loop
    if in_loop and not config.verify_curve:
        raise BenchError("--in-loop only applies with --verify-curve")
    if config.verify_curve:
        ks = parse_positive_ints(_csv(config.curve_ks), "--curve-ks", strict=True)
        bs = parse_positive_ints(_csv(config.curve_batches), "--curve-batches", strict=True)
        if ks[0] != 1:
            raise BenchError(f"--curve-ks must start with 1 (times are relative to k = 1), "
                             f"got {_csv(config.curve_ks)!r}")
        if config.curve_prefix < 0:
            raise BenchError(f"--curve-prefix must be >= 0, got {config.curve_prefix}")
        lm = _load(config)
        with tqdm(total=len(ks) * len(bs), desc="verify curve", file=sys.stderr) as bar:
            if in_loop:  # looked up on the module, so a test can stand in for it
                result = curve.verify_curve_in_loop(lm, ks, bs, prefix=config.curve_prefix,
                                                    progress=bar.update)
            else:
                result = curve.verify_curve(lm, ks, bs, prefix=config.curve_prefix,
                                            progress=bar.update)
        result.update(environment(argv))
        result["model"] = config.model
        result["quantize"] = quantize
        result["numerics"] = config.numerics
        if (products := exact_products_of(lm)) is not None:
            result["exact_products"] = products
        for B, rel in result["relative"].items():
            print(f"batch {B:>3}: " + "  ".join(f"k={k}: {r:.2f}x" for k, r in
                                                 zip(result["ks"], rel)))
        return _save(result, config, plot_verify_curve)
    methods = [m.strip() for m in config.methods if m.strip()]
    bad = [m for m in methods if base_method(m) not in METHODS]
    if bad:
        raise BenchError(f"unknown methods {bad}; available: {', '.join(METHODS)} (a variant "
                         "label may follow '@', e.g. early_exit@topk)")
    if len(set(methods)) != len(methods):
        raise BenchError(f"--methods lists a method twice: {methods}; label variants, e.g. "
                         "early_exit,early_exit@topk")
    if config.repeats < 1:
        raise BenchError(f"--repeats must be >= 1, got {config.repeats}")
    # as --method-arg gives them: every method present, every value a string
    margs = {m: {k: _fmt(v) for k, v in config.method_args.get(m, {}).items()}
             for m in methods}
    if config.policies:
        methods, margs = policy_axis(methods, margs, list(config.policies))
    if config.peer and quantize != "none":
        raise BenchError(f"--peer {config.peer} runs the float weights, so it cannot stand "
                         f"beside a --quantize {quantize} target; drop one of the two")
    batch_sizes = parse_batch_sizes(_csv(config.batch_sizes))
    if config.batch_table:
        _table_methods(config, methods)
    if config.sweep_only and config.peer:
        raise BenchError(f"--peer {config.peer} runs one prompt at a time in the per-category "
                         "rows, which --sweep-only leaves out; drop one of the two")
    if config.samples > 1 and batch_sizes:
        raise BenchError("--samples decodes each prompt's samples as one group; it does not "
                         "combine with --batch-sizes")
    if config.samples > 1 and config.mesh:
        raise BenchError("--samples does not combine with --mesh yet (a mesh pads each "
                         "batch to its data axis, so a group's batches are not --batch-size "
                         "rows)")
    if config.samples > 1 and config.temperature == 0:
        raise BenchError("--samples N asks for N samples of each prompt: give a "
                         "--temperature > 0 (greedy decoding gives N copies of one answer)")
    mesh = None
    if config.mesh:
        from specjax.mesh import make_mesh

        mesh = make_mesh(config.mesh)
    if config.batch_size < 1:
        raise BenchError(f"--batch-size must be >= 1, got {config.batch_size}")
    cats = list(config.categories) if config.categories else None
    items = load_prompts(config.prompts, cats, config.limit)
    lm = _load(config)
    n_batches = (0 if config.sweep_only else len(items) if config.samples > 1 else
                 sum(-(-len([i for i in items if i["category"] == c]) // config.batch_size)
                     for c in {i["category"] for i in items}))
    n_ours = len(set(methods) | {"ar"})
    n_methods = n_ours + (2 if config.peer == "hf" else 0)
    n_sweep = sum(len(b) for b in sweep_batches(
        len(items), batch_sizes, 0 if config.sweep_only else config.batch_size).values())
    journal = None
    if config.journal:
        journal = Journal(config.journal, {
            "model": config.model, "methods": methods, "method_args": margs,
            "prompts": config.prompts, "categories": cats, "limit": config.limit,
            "n_prompts": len(items), "prompts_sha1": prompts_digest(items),
            "max_new_tokens": config.max_new_tokens, "batch_size": config.batch_size,
            "batch_sizes": batch_sizes, "temperature": config.temperature,
            "repeats": config.repeats, "peer": config.peer, "dtype": config.dtype,
            # only when set, so journals written before the flag existed still resume
            **({"quantize": quantize} if quantize != "none" else {}),
            **({"mesh": config.mesh} if config.mesh else {}),
            **({"samples": config.samples} if config.samples > 1 else {}),
            **({"sweep_only": True} if config.sweep_only else {}),
            **({"cache_len": config.cache_len} if config.cache_len else {}),
            # journals written before --numerics existed ran fast numerics
            **({"numerics": config.numerics} if config.numerics != "fast" else {}),
            **({"exact_products": exact_products_of(lm)}
               if config.exact_products not in (None, "xla") else {})})
    if config.time_limit is not None and config.time_limit < 0:
        raise BenchError(f"--time-limit must be >= 0 minutes, got {config.time_limit}")
    if config.time_limit == 0 and not config.journal:
        raise BenchError("--time-limit 0 runs nothing: it reports what a --journal holds")
    with tqdm(total=config.repeats * (n_batches * n_methods + n_sweep * n_ours), desc="bench",
              unit="run", file=sys.stderr) as bar:
        summary = run_bench(lm, items, methods, margs, max_new_tokens=config.max_new_tokens,
                            batch_size=config.batch_size, temperature=config.temperature,
                            repeats=config.repeats, peer=config.peer, progress=bar.update,
                            batch_sizes=batch_sizes, journal=journal,
                            time_limit_s=None if config.time_limit is None
                            else 60.0 * config.time_limit, mesh=mesh,
                            samples=config.samples, cache_len=config.cache_len,
                            sweep_only=config.sweep_only)
    prog = summary["progress"]
    if not prog["complete"]:
        print(f"specjax bench: partial result: {prog['groups_done']} of {prog['groups_total']} "
              "prompt batches done (each category sampled alike)"
              + (f"; run the same command again to continue from {config.journal}"
                 if config.journal else ""), file=sys.stderr)
    summary.update(environment(argv))
    summary.update({"model": config.model, "max_new_tokens": config.max_new_tokens,
                    "batch_size": config.batch_size, "batch_sizes": batch_sizes,
                    "sweep_only": config.sweep_only, "temperature": config.temperature,
                    "samples": config.samples,
                    "repeats": config.repeats, "prompts": config.prompts,
                    "n_prompts": len(items), "quantize": quantize, "mesh": config.mesh,
                    "numerics": config.numerics, "cache_len": config.cache_len})
    if (products := exact_products_of(lm)) is not None:
        summary["exact_products"] = products
    print(format_table(summary))
    if config.batch_table:
        summary["batch_tables"] = write_batch_tables(config, lm, summary, methods, argv)
    return _save(summary, config, plot)


def policy_axis(methods: list[str], margs: dict[str, dict[str, str]], policies: list[str]
                ) -> tuple[list[str], dict[str, dict[str, str]]]:
    """``--policies P1,P2``: every drafting method ``m`` becomes the variants ``m@P1``,
    ``m@P2`` (its arguments plus ``policy=P``), run interleaved like any method; ``ar`` stays.

    Raises:
      BenchError: an unknown policy, or a method that already sets ``policy=``.
    """
    from specjax.policies import POLICIES

    unknown = [p for p in policies if p not in POLICIES.names()]
    if unknown or not policies:
        raise BenchError(f"--policies: unknown {unknown or 'empty list'}; registered: "
                         f"{', '.join(POLICIES.names())}")
    out_m, out_a = [], {}
    for m in methods:
        if base_method(m) == "ar":
            out_m.append(m)
            out_a[m] = margs.get(m, {})
            continue
        if "policy" in margs.get(m, {}):
            raise BenchError(f"--policies sets each method's policy; {m} already has "
                             f"policy={margs[m]['policy']} (drop it or the flag)")
        for p in policies:
            label = f"{m}@{p}" if "@" not in m else f"{m}+{p}"
            out_m.append(label)
            out_a[label] = {**margs.get(m, {}), "policy": p}
    return out_m, out_a


def _table_methods(config: BenchConfig, methods: list[str]) -> list[str]:
    """The drafting methods a ``--batch-table`` is profiled for (each must run the fixed
    policy: the acceptance by position of a policy that varies k is not the drafter's)."""
    from specjax.methods import base_method, resolved

    out = []
    for m in methods:
        if base_method(m) == "ar":
            continue
        given = config.method_args.get(m, {})
        pol, d_args = resolved(m, given, greedy=config.temperature == 0.0)
        if pol != "fixed":
            raise BenchError(f"--batch-table profiles a drafter at its maximum k: run {m} with "
                             f"--method-arg {m}.policy=fixed (it has policy={pol})")
        if "tree" in d_args and "tree" not in given:  # a default tree (eagle, greedy, batch 1)
            raise BenchError(f"--batch-table profiles chains: run {m} with --method-arg "
                             f"{m}.k=K (its default at batch 1 is the tree {d_args['tree']})")
        out.append(m)
    if not out:
        raise BenchError("--batch-table needs a drafting method in --methods")
    return out


def write_batch_tables(config: BenchConfig, lm, summary: dict, methods: list[str],
                       argv) -> dict[str, str]:
    """Writes the batch-size-to-k table of every drafting method (see
    :mod:`specjax.policies.batch_table`); returns ``{method: path}``."""
    from specjax.bench.machine import utc_now
    from specjax.policies.batch_table import make_batch_table, table_key, write_table
    from specjax.cost_curves import measured_cost

    names = _table_methods(config, methods)
    rows: dict[str, dict[int, dict]] = {m: {} for m in names}
    for r in summary.get("by_batch_size", {}).get("rows", []):
        if r["method"] in rows:
            rows[r["method"]][r["batch_size"]] = r
    for r in summary["rows"]:
        if r["method"] in rows and r["category"] == "ALL":
            rows[r["method"]].setdefault(config.batch_size, r)
    out = {}
    base = Path(config.batch_table)
    for m in names:
        path = base if len(names) == 1 else base.with_name(f"{base.stem}_{m}{base.suffix}")
        table = make_batch_table(
            m, rows[m], lambda K, B: measured_cost(lm, K, B), table_key(lm),
            {"created": utc_now(), "command": "specjax bench " + " ".join(argv or []),
             "model": config.model, "prompts": config.prompts})
        write_table(path, table)
        print(f"batch table for {m}: " + ", ".join(
            f"B={b}: k={e['k']}" for b, e in table["entries"].items()) + f" -> {path}",
            file=sys.stderr)
        out[m] = str(path)
    return out


def _save(result: dict, config, plotter) -> int:
    """Writes the result JSON to ``config.output`` and its plot to ``config.plot`` (each when
    asked for)."""
    from specjax.distributed import is_main

    if not is_main():  # a multi-host run: process 0 writes the results
        return 0
    if config.output:
        Path(config.output).parent.mkdir(parents=True, exist_ok=True)
        Path(config.output).write_text(json.dumps(result, indent=2))
    if config.plot:
        plotter(result, config.plot)
    return 0
