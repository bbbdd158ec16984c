"""The interleaved runner: every method on the same batches of prompts, in turn.

For every repeat, every batch of prompts and every method in turn (so machine drift hits all
methods alike) the batch is generated and timed; compilation is timed apart and never enters
tokens/s. Work is planned as groups (one batch, every method), so a :class:`Journal` can
record finished groups and a later run continue from there.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from typing import Any, Callable

from specjax.bench.journal import Journal
from specjax.bench.machine import machine_description, utc_now
from specjax.bench.peers import _peer_runner
from specjax.bench.report import summarize, summarize_batch_sizes
from specjax.bench.timing import timed_generation
from specjax.drafters.base import learns_across_calls
from specjax.errors import BenchError
from specjax.fingerprint import exact_products_of
from specjax.methods import build, build_drafter, describe
from specjax.cost_curves import batch_bucket


@dataclasses.dataclass
class Run:
    method: str
    category: str
    repeat: int
    prompt_ids: list[str]
    new_tokens: int
    wall_s: float
    forwards: int
    drafted_at: list[int] | None
    accepted_at: list[int] | None
    tokens: list[list[int]]
    batch_size: int = 1  # rows requested per generate call
    prefill_s: float | None = None  # part of wall_s spent in the prefill (None: peers)


def run_bench(lm, items, methods: list[str], method_args: dict, *, max_new_tokens: int,
              batch_size: int, temperature: float, repeats: int, peer: str | None = None,
              seed: int = 0, progress: Callable | None = None,
              batch_sizes: list[int] | None = None, journal: "Journal | None" = None,
              time_limit_s: float | None = None, mesh=None,
              samples: int = 1, cache_len: int | None = None,
              sweep_only: bool = False) -> dict[str, Any]:
    """Runs every method on ``items``, interleaved, ``repeats`` times; returns the summary.

    Per-category rows use batches of ``batch_size`` prompts of one category. With
    ``batch_sizes``, each method (not the peers: transformers' prompt lookup runs one prompt
    at a time) also runs at each batch size B over all prompts, every batch filled to B rows by
    cycling through the prompts; ``summary["by_batch_size"]`` then holds tokens/s, speedup and
    identical-output flags per method and B.

    ``samples > 1``: every prompt is decoded ``samples`` times (sampling), its samples one
    group decoded ``batch_size`` rows at a time, in one ``generate`` call (a drafter that
    learns within a call, such as ``stand``, drafts later samples from earlier ones).

    A method whose drafter learns from every answer across calls (a suffix cache, a
    datastore: ``learns_across_calls``) runs its repeats of a batch back to back, each from
    the drafter as it was before the batch (``snapshot`` / ``restore``): no repeat drafts
    from its own earlier answer. A batch-size sweep with such a method is refused (it
    decodes every prompt again).

    ``cache_len``: one static KV-cache length for every ``generate`` call (default: each
    batch's prompt bucket + ``max_new_tokens``), so each method compiles one decode loop per
    batch size; a prompt that does not fit with its ``max_new_tokens`` is an error.

    ``sweep_only``: run the ``batch_sizes`` sweep alone (batch size 1 included when asked),
    no per-category rows; ``summary["rows"]`` is then empty.
    """
    if sweep_only and not batch_sizes:
        raise BenchError("--sweep-only runs only the batch-size sweep: give --batch-sizes too")
    from specjax.engine import generate
    from specjax.sampling import SamplingParams

    if "ar" not in methods:
        methods = ["ar"] + methods  # speedups are always against ar of the same run
    tok = lm.tokenizer
    sampling = SamplingParams(temperature=temperature, seed=seed)
    eos = tok.eos_ids
    encoded = [tok.encode_chat(it["prompt"]) for it in items]
    if cache_len is not None:
        over = [(it["id"], len(e)) for it, e in zip(items, encoded)
                if len(e) + max_new_tokens > cache_len]
        if over:
            longest = max(n for _, n in over)
            raise BenchError(
                f"--cache-len {cache_len} does not hold {len(over)} prompt(s) with "
                f"--max-new-tokens {max_new_tokens} (e.g. prompt {over[0][0]!r}: {over[0][1]} "
                f"tokens); it needs at least {longest + max_new_tokens}")
    built_at: dict[tuple[str, int], Any] = {}
    # the cache length the step costs are timed with: the run's own, or its median prompt's
    from specjax.buckets import median_cache_length

    priced_cache = cache_len or median_cache_length(map(len, encoded), max_new_tokens)

    def built_for(m: str, B: int):
        """Method ``m`` built for batch size ``B`` (a cost-aware policy's curve is per batch
        bucket; see specjax.cost_curves) and the run's cache length (its step costs)."""
        key = (m, batch_bucket(B))
        if key not in built_at:
            built_at[key] = build(m, lm, method_args.get(m, {}), batch=B,
                                  cache_len=priced_cache, greedy=temperature == 0.0,
                                  temperature=temperature)
        return built_at[key]

    if sweep_only:  # the sweep's batch sizes are the only ones built
        batch_size = min(batch_sizes)
    # batch size 1 is swept unless the per-category rows already ran it
    sweep_b = 0 if sweep_only else batch_size
    sweep = sweep_batches(len(items), batch_sizes or [], sweep_b)
    if sweep:  # checked on the drafters alone, before minutes of measuring costs
        leaky = [m for m in methods
                 if learns_across_calls(build_drafter(m, lm, method_args.get(m, {})))]
        if leaky:
            raise BenchError(
                f"{', '.join(leaky)} learn from every answer across calls (a suffix cache, "
                f"a datastore or carried-over tables): with --batch-sizes a prompt is decoded "
                f"again and would be drafted from its own earlier answer. Give those methods "
                f"learn=false (suffix, sssd, ngram) or memory=call (stand, token_recycling), or "
                f"run without --batch-sizes")
    built = {m: built_for(m, batch_size) for m in methods}
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_cat[it["category"]].append(i)
    batches = []
    for cat, idx in ({} if sweep_only else by_cat).items():
        if samples > 1:  # one group per prompt: its samples
            batches.extend((cat, [i] * samples) for i in idx)
            continue
        for s in range(0, len(idx), batch_size):
            batches.append((cat, idx[s:s + batch_size]))
    leaky = [m for m in methods if learns_across_calls(built[m][0])]
    # with a drafter that learns across calls, the repeats of a batch run back to back, each
    # from the drafter as it was before the batch (snapshot / restore): a repeat never drafts
    # from its own earlier answer, and every repeat sees what the earlier batches taught
    inner = repeats if (leaky and repeats > 1) else 1
    unsnapped = [m for m in leaky if not (callable(getattr(built[m][0], "snapshot", None))
                                          and callable(getattr(built[m][0], "restore", None)))]
    if inner > 1 and unsnapped:
        raise BenchError(
            f"{', '.join(unsnapped)} learn across calls and have no snapshot()/restore(): "
            f"their repeats of a batch cannot start from the same state; run --repeats 1")
    peers = {}
    if peer == "hf":
        for kind in ("hf_ar", "hf_prompt_lookup"):
            peers[kind] = _peer_runner(lm, kind, max_new_tokens, eos, temperature, seed)
    all_methods = methods + list(peers)
    runs: list[Run] = []
    sweep_runs: list[Run] = []
    compile_s = defaultdict(float)
    sweep_compile_s: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    def one(m: str, cat: str, rep: int, idx: list[int], B: int, compile_to) -> Run:
        prompts = [encoded[i] for i in idx]
        ids = [items[i]["id"] for i in idx]
        if m in peers:
            toks, wall = peers[m](prompts)
            return Run(m, cat, rep, ids, sum(len(t) for t in toks), wall, 0, None, None, toks,
                       B)
        d, pol, ver = built_for(m, B)
        rows = min(B, len(prompts)) if samples > 1 else len(prompts)  # rows per batch

        def gen():
            return generate(lm.model, prompts, max_new_tokens=max_new_tokens, mesh=mesh,
                            sampling=sampling, eos_ids=eos, batch_size=rows,
                            cache_len=cache_len, drafter=d, policy=pol, verifier=ver)

        r = timed_generation(gen, d, rows)  # run again from the drafter's state if compiled
        compile_to[m] += r.compile_s
        ex = r.extra or {}
        k = len(ex["drafted_at"][0]) if ex.get("drafted_at") else 0
        return Run(
            m, cat, rep, ids, sum(r.new_tokens), sum(r.wall_s[::rows]), sum(r.target_forwards),
            [sum(x[j] for x in ex["drafted_at"]) for j in range(k)] if k else None,
            [sum(x[j] for x in ex["accepted_at"]) for j in range(k)] if k else None,
            r.tokens, B, sum(r.prefill_s[::rows]))

    groups = plan_groups(batches, sweep, repeats // inner, items, batch_size)
    done: set[str] = set()
    here = machine_description()
    journal_machines: dict[str, int] = defaultdict(int)  # groups per machine, over sessions
    if journal is not None:  # the resolved configs (defaults included) must match too
        journal.header["configs"] = {m: describe(*built[m]) for m in methods}
        where = {it["id"]: i for i, it in enumerate(items)}
        for rec in journal.load():
            done.add(rec["group"])
            journal_machines[rec.get("machine", "not recorded")] += 1
            last_rep = {}  # per method, its last repeat in the record (inner repeats)
            for rd in rec["runs"]:
                last_rep[rd["method"]] = max(last_rep.get(rd["method"], 0), rd["repeat"])
            for rd in rec["runs"]:
                r = Run(**rd)
                (sweep_runs if rec["sweep"] else runs).append(r)
                d = built_for(r.method, r.batch_size)[0] if r.method in methods else None
                if learns_across_calls(d) and r.repeat == last_rep[r.method]:
                    # what it learnt from the finished runs, in order (of a batch decoded
                    # several times, the answer of the last repeat, as the drafter kept)
                    d.relearn([encoded[where[p]] for p in r.prompt_ids], r.tokens)
            for m, sec in rec["compile"].items():
                if rec["sweep"]:
                    sweep_compile_s[rec["batch_size"]][m] += sec
                else:
                    compile_s[m] += sec
    todo = [g for g in groups if g["key"] not in done]
    if progress and len(todo) < len(groups):
        n_skip = inner * sum(len(all_methods if not g["sweep"] else methods)  # runs
                             for g in groups if g["key"] in done)
        progress(n_skip)
    t_start = time.perf_counter()
    stopped = False
    ran = 0
    for g in todo:
        if time_limit_s is not None and (time_limit_s == 0 or (
                ran > 0 and time.perf_counter() - t_start > time_limit_s)):
            # a positive limit still runs one batch; 0 runs none (report a journal)
            stopped = True
            break
        ms = methods if g["sweep"] else all_methods
        target_compile = defaultdict(float)
        group_runs = []
        # interleaved, in reverse order every other prompt batch: on a 2-core Xeon VM
        # (2026-11-29) the same plain-decoding program ran 3-10% faster late in a batch's
        # runs than first over several batches, which a fixed order credits to the methods
        # listed last
        before = {m: built_for(m, g["batch_size"])[0].snapshot() for m in ms
                  if inner > 1 and m in leaky}
        for j in range(inner):
            for m in (ms[::-1] if (g["reversed"] != (j % 2 == 1)) else ms):
                if m in before:
                    built_for(m, g["batch_size"])[0].restore(before[m])
                group_runs.append(one(m, g["category"], g["repeat"] + j, g["idx"],
                                      g["batch_size"], target_compile))
                if progress:
                    progress(1)
        group_runs.sort(key=lambda r: (r.repeat, ms.index(r.method)))  # in the listed order
        (sweep_runs if g["sweep"] else runs).extend(group_runs)
        into = sweep_compile_s[g["batch_size"]] if g["sweep"] else compile_s
        for m, sec in target_compile.items():
            into[m] += sec
        if journal is not None:
            journal.append({"group": g["key"], "sweep": g["sweep"],
                            "batch_size": g["batch_size"],
                            "runs": [dataclasses.asdict(r) for r in group_runs],
                            "order": "reversed" if g["reversed"] else "listed",
                            "compile": dict(target_compile),
                            "machine": here, "finished_at": utc_now()})
            journal_machines[here] += 1
        ran += 1
    greedy = temperature == 0.0
    summary = summarize(runs, all_methods, [] if sweep_only else list(by_cat),
                        dict(compile_s), built, greedy=greedy)
    if batch_sizes:
        summary["by_batch_size"] = summarize_batch_sizes(
            runs, sweep_runs, methods, sorted(set(batch_sizes)), sweep_b, compile_s,
            sweep_compile_s, built, greedy)
    if sweep_only:  # no per-category rows to carry each method's resolved configuration
        summary["configs"] = {m: describe(*built[m]) for m in methods}
    numerics = getattr(lm.model, "numerics", "fast")
    products = exact_products_of(lm.model)
    for row in summary["rows"] + summary.get("by_batch_size", {}).get("rows", []):
        row["numerics"] = numerics  # the `same` column is a guarantee only when exact
        if products is not None:
            row["exact_products"] = products
    n_done = len(groups) - len(todo) + ran
    summary["progress"] = {"groups_done": n_done, "groups_total": len(groups),
                           "complete": n_done == len(groups), "stopped_by_time_limit": stopped}
    if journal is not None:
        # a journaled run can span sessions and machines: say which groups ran where
        summary["progress"]["machines"] = dict(journal_machines)
    return summary


def group_key(sweep: bool, repeat: int, category: str, ids: list, batch_size: int) -> str:
    return json.dumps([("sweep" if sweep else "cat"), repeat, category, batch_size,
                       [str(i) for i in ids]])


def plan_groups(batches, sweep, repeats: int, items, batch_size: int) -> list[dict]:
    """The order of work: for each repeat, one batch of every category in turn (round robin,
    so a run stopped early has sampled every category alike), then the batch-size sweep.
    Every method runs on a group back to back (interleaved), in the listed order on even
    groups of the plan and reversed on odd ones (``reversed``)."""
    per_cat: dict[str, list[list[int]]] = defaultdict(list)
    for cat, idx in batches:
        per_cat[cat].append(idx)
    order = []
    for j in range(max((len(v) for v in per_cat.values()), default=0)):
        for cat, bl in per_cat.items():
            if j < len(bl):
                order.append((cat, bl[j]))
    groups = []
    for rep in range(repeats):
        for cat, idx in order:
            ids = [items[i]["id"] for i in idx]
            groups.append({"key": group_key(False, rep, cat, ids, batch_size),
                           "sweep": False, "repeat": rep, "category": cat, "idx": idx,
                           "batch_size": batch_size})
        for B, bidx in sweep.items():
            for idx in bidx:
                ids = [items[i]["id"] for i in idx]
                groups.append({"key": group_key(True, rep, "ALL", ids, B), "sweep": True,
                               "repeat": rep, "category": "ALL", "idx": idx, "batch_size": B})
    for i, g in enumerate(groups):
        g["reversed"] = i % 2 == 1
    return groups


def sweep_batches(n: int, batch_sizes: list[int], batch_size: int) -> dict[int, list[list[int]]]:
    """Prompt indices of the batch-size sweep: for each B, ceil(n / B) batches of exactly B
    rows, cycling through the n prompts. B = 1 with ``batch_size`` = 1 is left out: the
    per-category runs are the same work and serve for it."""
    out = {}
    for B in sorted(set(batch_sizes)):
        if B == 1 and batch_size == 1:
            continue
        out[B] = [[i % n for i in range(s, s + B)] for s in range(0, n, B)]
    return out
