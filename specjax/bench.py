"""``specjax bench``: methods side by side on the same prompts, in one process, interleaved.

For every repeat, every batch of prompts and every method in turn (so machine drift hits all
methods alike) the batch is generated and timed; compilation is timed apart (ahead-of-time) and
never enters tokens/s. Per method and category the report holds tokens/s (median over repeats
and its min/max), the speedup over ``ar`` measured in the same run, tau (new tokens per target
forward), acceptance by draft position, compile time, and whether the greedy output is
identical to ``ar`` for every prompt.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from specjax.data.builtin import BUILTIN  # noqa: F401  (the default prompts, re-exported)
from specjax.methods import base_method, build, describe
from specjax.errors import BenchError  # noqa: F401  (re-exported)


def load_prompts(spec: str, categories: list[str] | None = None, limit: int | None = None
                 ) -> list[dict]:
    """A prompt spec -> ``[{"id", "category", "prompt"}]`` (prompts without one: ``all``).

    ``spec`` is anything ``specjax.data.load_prompts`` reads: ``builtin``, a JSONL file,
    ``spec_bench:PATH``, ``mt_bench[:PATH]``, ``humaneval[:PATH]``, ``gsm8k:PATH``,
    ``sharegpt:PATH``, ``text:PATH``. ``limit``: at most that many prompts per category.
    """
    from specjax import data

    try:
        records = data.load_prompts(spec)
    except data.DataError as e:
        raise BenchError(str(e)) from None
    items = [{"id": r.id, "category": r.category or "all", "prompt": r.prompt}
             for r in records]
    categories = [c.strip() for c in categories or [] if c.strip()]
    if categories:
        known = sorted({it["category"] for it in items})
        bad = [c for c in categories if c not in known]
        if bad:
            raise BenchError(f"unknown categories {bad}; the prompts have: {', '.join(known)}")
        items = [it for it in items if it["category"] in categories]
    if limit is not None:
        per = defaultdict(int)
        kept = []
        for it in items:
            if per[it["category"]] < limit:
                kept.append(it)
                per[it["category"]] += 1
        items = kept
    if not items:
        raise BenchError("no prompts to benchmark")
    return items


def parse_bench_method_args(items: list[str], methods: list[str]) -> dict[str, dict[str, str]]:
    """``METHOD.key=value`` -> ``{method: {key: value}}``."""
    out: dict[str, dict[str, str]] = {m: {} for m in methods}
    for it in items:
        if "=" not in it or "." not in it.split("=", 1)[0]:
            raise BenchError(f"--method-arg must look like METHOD.key=value, got {it!r}")
        lhs, v = it.split("=", 1)
        m, k = lhs.split(".", 1)
        if m not in out:
            raise BenchError(f"--method-arg {it!r} names method {m!r}, which is not in "
                             f"--methods ({', '.join(methods)})")
        out[m][k] = v
    return out


def parse_positive_ints(text: str | None, flag: str, strict: bool = False) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: integers >= 1. ``strict``: given in increasing order
    without repeats and at least one (for curve axes, where a shuffled list is a typo);
    otherwise sorted and deduplicated, and None or '' -> ``[]``."""
    if not text and not strict:
        return []
    try:
        vals = [int(x) for x in (text or "").split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BenchError(f"{flag} takes integers >= 1, got {text!r}")
    if strict and vals != sorted(set(vals)):
        raise BenchError(f"{flag} takes increasing integers >= 1, got {text!r}")
    return sorted(set(vals))


def parse_batch_sizes(text: str | None) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]`` (sorted, unique); None or '' -> ``[]``."""
    return parse_positive_ints(text, "--batch-sizes")


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


def _peer_runner(lm, kind: str, max_new: int, eos_ids, temperature: float = 0.0,
                 seed: int = 0):
    """Hugging Face transformers on the same (dequantized) weights: dense float32 PyTorch.
    ``temperature > 0`` samples from the plain temperature-scaled distribution (transformers'
    default top-k of 50 is switched off), as specjax's methods do in the same run."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise BenchError("--peer hf needs torch and transformers (pip install -e '.[bench]')"
                         ) from e
    model = dense_hf_model(lm)
    gen_kwargs = dict(max_new_tokens=max_new, do_sample=False, pad_token_id=0,
                      eos_token_id=list(eos_ids) or None)
    if temperature > 0:
        gen_kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
        torch.manual_seed(seed)
    if kind == "hf_prompt_lookup":
        gen_kwargs["prompt_lookup_num_tokens"] = 10

    def run(prompts: list[list[int]]):
        toks, walls = [], 0.0
        for p in prompts:  # transformers' prompt lookup supports batch size 1 only
            with torch.no_grad():
                t0 = time.perf_counter()
                out = model.generate(torch.tensor([p]), **gen_kwargs)
                walls += time.perf_counter() - t0
            toks.append(out[0, len(p):].tolist())
        return toks, walls

    return run


def dense_hf_model(lm):
    """A transformers LlamaForCausalLM (float32, PyTorch CPU) holding ``lm``'s weights."""
    import torch
    import transformers

    from specjax.models.weights import model_to_tensors

    cfg = lm.config
    if cfg.architecture != "llama":
        raise BenchError(f"--peer hf supports llama-architecture models, not {cfg.architecture}")
    extra = {}
    rs = cfg.rope_scaling
    if rs is not None and rs.kind == "factors":
        raise BenchError("--peer hf cannot rebuild a model whose rotary embeddings use "
                         "per-frequency factors (a GGUF rope_freqs tensor)")
    if rs is not None:  # transformers reads the same dict from rope_scaling (4.x and 5.x)
        extra["rope_scaling"] = {"rope_type": rs.kind, "factor": rs.factor}
        if rs.kind == "llama3":
            extra["rope_scaling"].update(
                low_freq_factor=rs.low_freq_factor, high_freq_factor=rs.high_freq_factor,
                original_max_position_embeddings=rs.original_max_position)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        max_position_embeddings=cfg.max_position_embeddings, **extra)
    model = transformers.LlamaForCausalLM(hf_cfg)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in model_to_tensors(lm.model).items()}
    if cfg.tie_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)
    model.eval()
    return model


def run_bench(lm, items, methods: list[str], method_args: dict, *, max_new_tokens: int,
              batch_size: int, temperature: float, repeats: int, peer: str | None = None,
              seed: int = 0, progress: Callable | None = None,
              batch_sizes: list[int] | None = None, journal: "Journal | None" = None,
              time_limit_s: float | None = None) -> dict[str, Any]:
    """Runs every method on ``items``, interleaved, ``repeats`` times; returns the summary.

    Per-category rows use batches of ``batch_size`` prompts of one category. With
    ``batch_sizes``, each method (not the peers: transformers' prompt lookup runs one prompt
    at a time) also runs at each batch size B over all prompts, every batch filled to B rows by
    cycling through the prompts; ``summary["by_batch_size"]`` then holds tokens/s, speedup and
    identical-output flags per method and B.
    """
    from specjax.engine import generate
    from specjax.sampling import SamplingParams

    if "ar" not in methods:
        methods = ["ar"] + methods  # speedups are always against ar of the same run
    tok = lm.tokenizer
    sampling = SamplingParams(temperature=temperature, seed=seed)
    eos = tok.eos_ids
    encoded = [tok.encode_chat(it["prompt"]) for it in items]
    built = {m: build(m, lm, method_args.get(m, {})) for m in methods}
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_cat[it["category"]].append(i)
    batches = []
    for cat, idx in by_cat.items():
        for s in range(0, len(idx), batch_size):
            batches.append((cat, idx[s:s + batch_size]))
    sweep = sweep_batches(len(items), batch_sizes or [], batch_size)
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
        d, pol = built[m]

        def gen():
            return generate(lm.model, prompts, max_new_tokens=max_new_tokens,
                            sampling=sampling, eos_ids=eos, batch_size=len(prompts),
                            drafter=d, policy=pol)

        r = gen()
        if r.compile_s > 0:
            # the first execution of a freshly compiled program pays one-time set-up on top
            # of compilation (on XLA:CPU ~0.5-1.4 s for SmolLM2's loops): time a second run
            # and book the first run's excess with the compile time
            r2 = gen()
            r2.compile_s = r.compile_s + max(0.0, r.wall_s[0] - r2.wall_s[0])
            r = r2
        compile_to[m] += r.compile_s
        ex = r.extra or {}
        k = len(ex["drafted_at"][0]) if ex.get("drafted_at") else 0
        return Run(
            m, cat, rep, ids, sum(r.new_tokens), r.wall_s[0], sum(r.target_forwards),
            [sum(x[j] for x in ex["drafted_at"]) for j in range(k)] if k else None,
            [sum(x[j] for x in ex["accepted_at"]) for j in range(k)] if k else None,
            r.tokens, B, r.prefill_s[0])

    groups = plan_groups(batches, sweep, repeats, items, batch_size)
    done: set[str] = set()
    here = machine_description()
    journal_machines: dict[str, int] = defaultdict(int)  # groups per machine, over sessions
    if journal is not None:  # the resolved configs (defaults included) must match too
        journal.header["configs"] = {m: describe(*built[m]) for m in methods}
        for rec in journal.load():
            done.add(rec["group"])
            journal_machines[rec.get("machine", "not recorded")] += 1
            for rd in rec["runs"]:
                r = Run(**rd)
                (sweep_runs if rec["sweep"] else runs).append(r)
            for m, sec in rec["compile"].items():
                if rec["sweep"]:
                    sweep_compile_s[rec["batch_size"]][m] += sec
                else:
                    compile_s[m] += sec
    todo = [g for g in groups if g["key"] not in done]
    if progress and len(todo) < len(groups):
        n_skip = sum(len(all_methods if not g["sweep"] else methods)
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
        for m in ms:  # interleaved
            group_runs.append(one(m, g["category"], g["repeat"], g["idx"], g["batch_size"],
                                  target_compile))
            if progress:
                progress(1)
        (sweep_runs if g["sweep"] else runs).extend(group_runs)
        into = sweep_compile_s[g["batch_size"]] if g["sweep"] else compile_s
        for m, sec in target_compile.items():
            into[m] += sec
        if journal is not None:
            journal.append({"group": g["key"], "sweep": g["sweep"],
                            "batch_size": g["batch_size"],
                            "runs": [dataclasses.asdict(r) for r in group_runs],
                            "compile": dict(target_compile),
                            "machine": here, "finished_at": utc_now()})
            journal_machines[here] += 1
        ran += 1
    greedy = temperature == 0.0
    summary = summarize(runs, all_methods, list(by_cat), dict(compile_s), built, greedy=greedy)
    if batch_sizes:
        summary["by_batch_size"] = summarize_batch_sizes(
            runs, sweep_runs, methods, sorted(set(batch_sizes)), batch_size, compile_s,
            sweep_compile_s, built, greedy)
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
    Every method runs on a group back to back (interleaved)."""
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
    return groups


class Journal:
    """An append-only JSONL record of finished groups, so a long benchmark can stop (time
    limit, Ctrl-C, end of a session) and continue later where it left off.

    Line 1 is a header with everything that must match for the runs to be comparable (model,
    methods and their arguments, prompts, budgets); each further line is one finished group
    (every method's runs on one batch of prompts). A line cut short by a crash is ignored.
    """

    def __init__(self, path: str | os.PathLike, header: dict):
        self.path = Path(path)
        self.header = header

    def load(self) -> list[dict]:
        self.header = json.loads(json.dumps(self.header))  # tuples -> lists, as read back
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w") as f:
                f.write(json.dumps({"header": self.header}) + "\n")
            return []
        lines = self.path.read_text().splitlines()
        try:
            old = json.loads(lines[0])["header"]
        except (ValueError, KeyError, IndexError):
            raise BenchError(f"{self.path}: not a specjax bench journal (line 1 is not a "
                             "header)") from None
        diff = sorted(k for k in set(old) | set(self.header) if old.get(k) != self.header.get(k))
        if diff:
            detail = "; ".join(f"{k}: journal {old.get(k)!r}, now {self.header.get(k)!r}"
                               for k in diff)
            raise BenchError(f"{self.path} was written by a different benchmark ({detail}); "
                             "use a new --journal file or the same settings")
        out = []
        for n, line in enumerate(lines[1:], start=2):
            try:
                out.append(json.loads(line))
            except ValueError:
                if n == len(lines):  # the last line, cut short by a crash: redo that group
                    break
                raise BenchError(f"{self.path}:{n}: malformed journal line") from None
        return out

    def append(self, record: dict):
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


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


def summarize_batch_sizes(runs, sweep_runs, methods, batch_sizes, batch_size, compile_s,
                          sweep_compile_s, built, greedy) -> dict:
    """Rows ``{method, batch_size, tokens_per_s, ..., speedup_vs_ar}`` over all prompts, per
    batch size; speedups and identical-output flags against ``ar`` at the same batch size."""
    rows = []
    for B in batch_sizes:
        if B == 1 and batch_size == 1:
            rb = [r for r in runs if r.method in methods]
            comp = compile_s
        else:
            rb = [r for r in sweep_runs if r.batch_size == B]
            comp = sweep_compile_s.get(B, {})
        for row in summarize(rb, methods, [], dict(comp), built, greedy)["rows"]:
            row.pop("category")
            row.pop("config", None)
            rows.append({"method": row.pop("method"), "batch_size": B, **row})
    return {"batch_sizes": list(batch_sizes), "rows": rows}


def per_repeat_rates(runs: list[Run], reps, tokens, seconds) -> list[float]:
    """``sum(tokens(r)) / sum(seconds(r))`` over the runs of each repeat in ``reps``."""
    return [sum(tokens(r) for r in runs if r.repeat == k) /
            max(sum(seconds(r) for r in runs if r.repeat == k), 1e-9) for k in reps]


def decode_rates(runs: list[Run], reps) -> list[float] | None:
    """Decode-phase tokens/s per repeat: the tokens after each row's first (which the prefill
    picks) over the wall time after the prefill; None when a run has no prefill time (a peer,
    or a journal written before prefill times were kept)."""
    if not runs or any(r.prefill_s is None for r in runs):
        return None
    return per_repeat_rates(runs, reps, lambda r: r.new_tokens - len(r.prompt_ids),
                            lambda r: r.wall_s - r.prefill_s)


def summarize(runs: list[Run], methods, categories, compile_s, built, greedy: bool) -> dict:
    ref_tokens = {}
    for r in runs:
        if r.method == "ar":
            for pid, t in zip(r.prompt_ids, r.tokens):
                ref_tokens.setdefault(pid, t)
    rows = []
    for cat in categories + ["ALL"]:
        cat_runs = [r for r in runs if cat == "ALL" or r.category == cat]
        tps, dps = {}, {}
        for m in methods:
            mr = [r for r in cat_runs if r.method == m]
            reps = sorted({r.repeat for r in mr})
            tps[m] = per_repeat_rates(mr, reps, lambda r: r.new_tokens, lambda r: r.wall_s)
            dps[m] = decode_rates(mr, reps)
        ar_med = statistics.median(tps["ar"]) if tps.get("ar") else None
        ar_dec = statistics.median(dps["ar"]) if dps.get("ar") else None
        for m in methods:
            mr = [r for r in cat_runs if r.method == m]
            if not mr:
                continue
            med = statistics.median(tps[m])
            fw = sum(r.forwards for r in mr)
            row = {
                "method": m,
                "category": cat,
                "tokens_per_s": med,
                "tokens_per_s_min": min(tps[m]),
                "tokens_per_s_max": max(tps[m]),
                "speedup_vs_ar": med / ar_med if ar_med else None,
                "decode_speedup_vs_ar": (statistics.median(dps[m]) / ar_dec
                                         if ar_dec and dps.get(m) else None),
                "tau": (sum(r.new_tokens for r in mr) / fw) if fw else None,
                "new_tokens": sum(r.new_tokens for r in mr) // max(len({r.repeat for r in mr}),
                                                                     1),
                "prompts": len({p for r in mr for p in r.prompt_ids}),
                "compile_s": compile_s.get(m, 0.0),
            }
            if mr[0].drafted_at is not None:
                K = len(mr[0].drafted_at)
                dr = [sum(r.drafted_at[j] for r in mr) for j in range(K)]
                ac = [sum(r.accepted_at[j] for r in mr) for j in range(K)]
                row["acceptance_by_position"] = [a / d if d else None for a, d in zip(ac, dr)]
                row["drafted"] = sum(dr)
                row["accepted"] = sum(ac)
            if greedy:
                row["identical_to_ar"] = all(
                    t == ref_tokens.get(pid) for r in mr for pid, t in zip(r.prompt_ids,
                                                                           r.tokens))
            if m in built:
                row["config"] = describe(*built[m])
            rows.append(row)
    return {"rows": rows, "methods": methods, "categories": categories}


def format_table(summary: dict) -> str:
    lines = [f"{'category':16s} {'method':18s} {'tok/s':>8s} {'min-max':>13s} {'speedup':>8s} "
             f"{'decode':>7s} {'tau':>6s} {'same':>5s}"]
    for r in summary["rows"]:
        same = {True: "yes", False: "NO", None: "-"}[r.get("identical_to_ar")]
        tau = f"{r['tau']:.2f}" if r.get("tau") else "-"
        sp = f"{r['speedup_vs_ar']:.2f}x" if r.get("speedup_vs_ar") else "-"
        dsp = f"{r['decode_speedup_vs_ar']:.2f}x" if r.get("decode_speedup_vs_ar") else "-"
        lines.append(f"{r['category']:16s} {r['method']:18s} {r['tokens_per_s']:8.1f} "
                     f"{r['tokens_per_s_min']:6.1f}-{r['tokens_per_s_max']:<6.1f} {sp:>8s} "
                     f"{dsp:>7s} {tau:>6s} {same:>5s}")
    if summary.get("by_batch_size"):
        lines += ["", f"{'batch':>5s} {'method':18s} {'tok/s':>8s} {'min-max':>13s} "
                      f"{'speedup':>8s} {'tau':>6s} {'same':>5s}"]
        for r in summary["by_batch_size"]["rows"]:
            same = {True: "yes", False: "NO", None: "-"}[r.get("identical_to_ar")]
            tau = f"{r['tau']:.2f}" if r.get("tau") else "-"
            sp = f"{r['speedup_vs_ar']:.2f}x" if r.get("speedup_vs_ar") else "-"
            lines.append(f"{r['batch_size']:5d} {r['method']:18s} {r['tokens_per_s']:8.1f} "
                         f"{r['tokens_per_s_min']:6.1f}-{r['tokens_per_s_max']:<6.1f} {sp:>8s} "
                         f"{tau:>6s} {same:>5s}")
    return "\n".join(lines)


def plot(summary: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    cats = summary["categories"] + ["ALL"]
    methods = [m for m in summary["methods"] if m != "ar"]
    sweep = summary.get("by_batch_size")
    fig, axes = plt.subplots(1, 3 if sweep else 2, figsize=(19.5 if sweep else 13, 4.5))
    ax = axes[0]
    w = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        vals = [next((r["speedup_vs_ar"] or 0 for r in rows
                      if r["method"] == m and r["category"] == c), 0) for c in cats]
        ax.bar([j + i * w for j in range(len(cats))], vals, width=w, label=m)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks([j + w * (len(methods) - 1) / 2 for j in range(len(cats))])
    ax.set_xticklabels(cats, rotation=30, ha="right")
    ax.set_ylabel("speedup over ar (same run)")
    ax.set_title("Speedup by method and category")
    ax.legend(fontsize=8)
    ax = axes[1]
    for m in methods:
        r = next((r for r in rows if r["method"] == m and r["category"] == "ALL"), None)
        if r and r.get("acceptance_by_position"):
            ys = [v if v is not None else float("nan") for v in r["acceptance_by_position"]]
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=m)
    ax.set_xlabel("draft position (tree depth)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("acceptance rate (given drafted)")
    ax.set_ylim(0, 1.02)
    ax.set_title("Acceptance by draft position (all categories)")
    ax.legend(fontsize=8)
    if sweep:
        plot_batch_sizes(axes[2], sweep)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_batch_sizes(ax, sweep: dict):
    """Tokens/s (median, min-max bars) against batch size, one line per method."""
    bs = sweep["batch_sizes"]
    for m in dict.fromkeys(r["method"] for r in sweep["rows"]):
        rs = {r["batch_size"]: r for r in sweep["rows"] if r["method"] == m}
        xs = [b for b in bs if b in rs]
        ys = [rs[b]["tokens_per_s"] for b in xs]
        err = [[y - rs[b]["tokens_per_s_min"] for b, y in zip(xs, ys)],
               [rs[b]["tokens_per_s_max"] - y for b, y in zip(xs, ys)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=m)
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs)
    ax.set_xticklabels([str(b) for b in bs])
    ax.set_xlabel("batch size (rows decoded together)")
    ax.set_ylabel("tokens/s (all rows)")
    ax.set_title("Throughput by batch size (all prompts)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, {platform.platform()}"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def environment(argv: list[str]) -> dict:
    import jax

    return {
        "date": utc_now(),
        "machine": machine_description(),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "command": "specjax " + shlex.join(argv),
    }


def main_bench(args, argv) -> int:
    from tqdm import tqdm

    from specjax.cli import _load
    from specjax.methods import METHODS

    quantize = getattr(args, "quantize", "none")
    in_loop = getattr(args, "in_loop", False)
    if in_loop and not args.verify_curve:
        raise BenchError("--in-loop only applies with --verify-curve")
    if args.verify_curve:
        ks = parse_positive_ints(args.curve_ks, "--curve-ks", strict=True)
        bs = parse_positive_ints(args.curve_batches, "--curve-batches", strict=True)
        if ks[0] != 1:
            raise BenchError(f"--curve-ks must start with 1 (times are relative to k = 1), "
                             f"got {args.curve_ks!r}")
        if args.curve_prefix < 0:
            raise BenchError(f"--curve-prefix must be >= 0, got {args.curve_prefix}")
        lm = _load(args)
        with tqdm(total=len(ks) * len(bs), desc="verify curve", file=sys.stderr) as bar:
            if in_loop:
                curve = verify_curve_in_loop(lm, ks, bs, prefix=args.curve_prefix,
                                             progress=bar.update)
            else:
                curve = verify_curve(lm, ks, bs, prefix=args.curve_prefix,
                                     progress=bar.update)
        curve.update(environment(argv))
        curve["model"] = args.model
        curve["quantize"] = quantize
        for B, rel in curve["relative"].items():
            print(f"batch {B:>3}: " + "  ".join(f"k={k}: {r:.2f}x" for k, r in
                                                 zip(curve["ks"], rel)))
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(curve, indent=2))
        if args.plot:
            plot_verify_curve(curve, args.plot)
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if base_method(m) not in METHODS]
    if bad:
        raise BenchError(f"unknown methods {bad}; available: {', '.join(METHODS)} (a variant "
                         "label may follow '@', e.g. early_exit@topk)")
    if len(set(methods)) != len(methods):
        raise BenchError(f"--methods lists a method twice: {methods}; label variants, e.g. "
                         "early_exit,early_exit@topk")
    if args.repeats < 1:
        raise BenchError(f"--repeats must be >= 1, got {args.repeats}")
    margs = parse_bench_method_args(args.method_arg, methods)
    if args.peer and quantize != "none":
        raise BenchError(f"--peer {args.peer} runs the float weights, so it cannot stand beside "
                         f"a --quantize {quantize} target; drop one of the two")
    batch_sizes = parse_batch_sizes(getattr(args, "batch_sizes", None))
    if args.batch_size < 1:
        raise BenchError(f"--batch-size must be >= 1, got {args.batch_size}")
    cats = args.categories.split(",") if args.categories else None
    items = load_prompts(args.prompts, cats, args.limit)
    lm = _load(args)
    n_batches = sum(-(-len([i for i in items if i["category"] == c]) // args.batch_size)
                    for c in {i["category"] for i in items})
    n_ours = len(set(methods) | {"ar"})
    n_methods = n_ours + (2 if args.peer == "hf" else 0)
    n_sweep = sum(len(b) for b in sweep_batches(len(items), batch_sizes, args.batch_size
                                                ).values())
    journal = None
    if args.journal:
        journal = Journal(args.journal, {
            "model": args.model, "methods": methods, "method_args": margs,
            "prompts": args.prompts, "categories": cats, "limit": args.limit,
            "n_prompts": len(items), "prompts_sha1": prompts_digest(items),
            "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
            "batch_sizes": batch_sizes, "temperature": args.temperature,
            "repeats": args.repeats, "peer": args.peer, "dtype": getattr(args, "dtype", None),
            # only when set, so journals written before the flag existed still resume
            **({"quantize": quantize} if quantize != "none" else {})})
    if args.time_limit is not None and args.time_limit < 0:
        raise BenchError(f"--time-limit must be >= 0 minutes, got {args.time_limit}")
    if args.time_limit == 0 and not args.journal:
        raise BenchError("--time-limit 0 runs nothing: it reports what a --journal holds")
    with tqdm(total=args.repeats * (n_batches * n_methods + n_sweep * n_ours), desc="bench",
              unit="run", file=sys.stderr) as bar:
        summary = run_bench(lm, items, methods, margs, max_new_tokens=args.max_new_tokens,
                            batch_size=args.batch_size, temperature=args.temperature,
                            repeats=args.repeats, peer=args.peer, progress=bar.update,
                            batch_sizes=batch_sizes, journal=journal,
                            time_limit_s=None if args.time_limit is None
                            else 60.0 * args.time_limit)
    prog = summary["progress"]
    if not prog["complete"]:
        print(f"specjax bench: partial result: {prog['groups_done']} of {prog['groups_total']} "
              "prompt batches done (each category sampled alike)"
              + (f"; run the same command again to continue from {args.journal}"
                 if args.journal else ""), file=sys.stderr)
    summary.update(environment(argv))
    summary.update({"model": args.model, "max_new_tokens": args.max_new_tokens,
                    "batch_size": args.batch_size, "batch_sizes": batch_sizes,
                    "temperature": args.temperature,
                    "repeats": args.repeats, "prompts": args.prompts, "n_prompts": len(items),
                    "quantize": quantize})
    print(format_table(summary))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(summary, indent=2))
    if args.plot:
        plot(summary, args.plot)
    return 0


def prompts_digest(items: list[dict]) -> str:
    import hashlib

    h = hashlib.sha1()
    for it in items:
        h.update(json.dumps([str(it["id"]), it["category"], it["prompt"]]).encode())
    return h.hexdigest()


def verify_curve(lm, ks=(1, 2, 4, 8, 16, 32, 64), batches=(1, 4, 16), prefix: int = 256,
                 repeats: int = 7, progress: Callable | None = None) -> dict:
    """Time of one target forward over k new tokens (per batch size), relative to k = 1.

    The forward runs as in verification: a block of k tokens on top of a ``prefix``-token
    committed cache, cache donated (updated in place) as inside the decode loop.
    """
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    graphdef, params = nnx.split(lm.model)

    @functools.partial(jax.jit, donate_argnames=("cache",))
    def fwd(params, tokens, positions, cache):
        m = nnx.merge(graphdef, params)
        o = m(tokens, positions, cache)
        return jnp.argmax(o.logits, -1), o.cache

    def time_one(B, k):
        S = prefix + max(ks)
        cache = lm.model.init_cache(B, S).with_lengths(jnp.full((B,), prefix, jnp.int32))
        toks = jnp.zeros((B, k), jnp.int32)
        pos = prefix + jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32)[None], (B, k))
        for _ in range(2):  # compile + warm-up
            a, cache = fwd(params, toks, pos, cache)
            jax.block_until_ready(a)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a, cache = fwd(params, toks, pos, cache)
            jax.block_until_ready(a)
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    out = {"ks": list(ks), "batches": list(batches), "prefix": prefix, "seconds": {},
           "relative": {}}
    return _fill_curve(out, ks, batches, time_one, progress)


def _fill_curve(out: dict, ks, batches, time_one, progress) -> dict:
    """Fills ``out["seconds"]`` and ``out["relative"]`` (to the first k) per batch size with
    ``time_one(B, k)`` seconds."""
    for B in batches:
        secs = []
        for k in ks:
            secs.append(time_one(B, k))
            if progress:
                progress(1)
        out["seconds"][str(B)] = secs
        out["relative"][str(B)] = [s / secs[0] for s in secs]
    return out


@dataclasses.dataclass(frozen=True)
class _JunkDrafter:
    """Drafts ``n`` copies of one token every step (fewer when the engine asks for fewer; 0:
    a plain step inside the loop), the in-loop curve's probe: the target verifies an
    ``n + 1``-token block and, as the junk is almost never accepted, each step yields one
    token. ``max_k`` sets the engine's verify buckets, whatever ``n``."""

    max_k: int
    n: int
    token: int = 0
    name: str = "junk"
    deterministic: bool = True
    tree: None = None

    def __post_init__(self):
        if not 0 <= self.n <= self.max_k:
            raise BenchError(f"the junk drafter drafts 0..max_k ({self.max_k}) tokens, "
                             f"got {self.n}")

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len):
        return ()

    def propose(self, params, target, state, ctx, k, greedy):
        import jax.numpy as jnp

        from specjax.tree import DraftTree

        B = ctx.seq.shape[0]
        return (DraftTree.chain(jnp.full((B, self.max_k), self.token, jnp.int32),
                                jnp.minimum(k, self.n)), state, ctx.target_cache)

    def update(self, params, state, ctx, n_acc, tree, path):
        return state


def verify_curve_in_loop(lm, ks=(1, 2, 4, 8, 16, 17), batches=(1,), prefix: int = 256,
                         steps: int = 64, repeats: int = 5,
                         progress: Callable | None = None) -> dict:
    """Time of one step of the speculative loop whose verify block holds k tokens (k - 1
    drafted), relative to a step that drafts nothing: what the adaptive policy's cost curve
    stands for, measured where it is paid, with drafting, verification and commit included.

    The probe drafts junk (one fixed token), so each step yields one token. The engine
    drafts less in the last steps before the token budget, so each repeat decodes two budgets
    ``steps`` apart with the same tail (one cache size, one compiled program) and a step's
    time is the difference of their decode times over the difference of their forwards;
    median over ``repeats``, after a compiling run. The drafter's maximum is ``max(ks) - 1``
    (as an engine with ``k = max(ks) - 1``: its verify blocks are 1, 2, 4, ... and max(ks)
    tokens), so give the ks of that engine's buckets to time exactly its block sizes. Same
    JSON layout as :func:`verify_curve`, plus ``in_loop: true``.
    """
    import numpy as np

    from specjax.engine import bucket_length, generate
    from specjax.sampling import SamplingParams

    if max(ks) < 2:
        raise BenchError("the in-loop curve needs a k >= 2 (a drafted token)")
    K = max(ks) - 1
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(max(prefix, 1))]
    short, long = K + 2, K + 2 + steps  # token budgets: the same clipped tail
    cache_len = -(-(bucket_length(len(prompt)) + long + 1) // 64) * 64
    out = {"ks": list(ks), "batches": list(batches), "prefix": prefix, "seconds": {},
           "relative": {}, "in_loop": True, "steps": steps, "engine_k": K}

    def decode(n, drafter, B):  # the engine's default policy asks for max_k every step
        r = generate(lm.model, [prompt] * B, max_new_tokens=n, cache_len=cache_len,
                     sampling=SamplingParams(temperature=0.0), batch_size=B, drafter=drafter)
        return r.wall_s[0] - r.prefill_s[0], max(r.target_forwards)

    def time_one(B, k):
        drafter = _JunkDrafter(max_k=K, n=k - 1)
        ts = []
        for rep in range(repeats + 1):  # the first run compiles
            t1, f1 = decode(short, drafter, B)
            t2, f2 = decode(long, drafter, B)
            if rep:
                ts.append(max(t2 - t1, 1e-9) / max(f2 - f1, 1))
        return float(np.median(ts))

    return _fill_curve(out, ks, batches, time_one, progress)


def plot_verify_curve(curve: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for B, rel in curve["relative"].items():
        ax.plot(curve["ks"], rel, marker="o", label=f"batch {B}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per row in the forward (k)")
    ax.set_ylabel("time relative to k = 1")
    ax.set_title(f"Verify-cost curve inside the loop (prompt {curve['prefix']})"
                 if curve.get("in_loop") else f"Verify-cost curve (prefix {curve['prefix']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
