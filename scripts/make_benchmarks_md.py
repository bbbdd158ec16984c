"""Regenerates docs/benchmarks.md from the JSON results in docs/results/.

    python scripts/make_benchmarks_md.py

Hand-written context lives in docs/benchmarks_notes.md and is included verbatim at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "docs" / "results"


def fmt(v, spec=".1f", none="-"):
    if v is None:
        return none
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    return format(v, spec)


def decode_section(d: dict) -> list[str]:
    out = [
        "## Plain decoding (batch 1, greedy)",
        "",
        f"- date: {d['date']}; machine: {d['machine']}",
        f"- command: `{d['command']}`",
        f"- {d['prompts']} chat prompts x {d['repeats']} repeats, {d['max_new_tokens']} new "
        "tokens each (EOS ignored), all configurations interleaved in one process",
        f"- measured float32 matrix-vector read bandwidth: {d['read_bandwidth_GBps']:.1f} GB/s",
        "",
        "| configuration | decode tok/s (median) | min-max | prefill tok/s | compile s | "
        "vs transformers f32 | of bandwidth limit | same tokens as first row |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    first = d["results"][0]["config"]
    for r in d["results"]:
        if r["config"] == first:
            same = "-"
        elif r.get("same_tokens_as_first_config"):
            same = "yes"
        elif "common_prefix_with_first_median" in r:
            same = (f"no: first {r['common_prefix_with_first_median']:.0f} of "
                    f"{d['max_new_tokens']} (median)")
        else:
            same = "no"
        out.append(
            f"| {r['config']} | {r['decode_tok_s_median']:.1f} | "
            f"{r['decode_tok_s_min']:.1f}-{r['decode_tok_s_max']:.1f} | "
            f"{r['prefill_tok_s_median']:.0f} | {r['compile_s']:.1f} | "
            f"{fmt(r.get('vs_hf_float32'), '.2f')}x | "
            f"{fmt(r.get('fraction_of_bandwidth_limit'), '.0%')} | {same} |")
    out += [
        "",
        "`specjax-w8a8`: int8 weights and int8 activations in the linear layers and LM head "
        "(`--quantize w8a8`), float32 elsewhere. "
        "`hf-*`: a dense transformers `LlamaForCausalLM` holding the same dequantized weights; "
        "`hfgguf-*`: transformers' own GGUF loading, which keeps the weights packed (Q4_1/Q8_0) "
        "and runs its quantized kernels. Bandwidth limit = measured read bandwidth / (bytes of "
        "weights + KV cache read per token).",
        "",
    ]
    return out


def interval(ci) -> str:
    """A speedup interval ``[lo, hi]`` as ``lo-hi``, or ``-``."""
    return f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"


def bench_section(d: dict, title: str, png: str | None) -> list[str]:
    prog = d.get("progress")
    if prog and not prog.get("complete", True):
        title += f" (partial: {prog['groups_done']} of {prog['groups_total']} prompt batches)"
    decode = any(r.get("decode_speedup_vs_ar") for r in d["rows"])  # runs since 2026-11-24
    ci = any(r.get("speedup_ci") for r in d["rows"])  # runs since 2026-12-06
    out = [
        f"## {title}",
        "",
        f"- date: {d['date']}; machine: {d['machine']}; device: {d['device']}; jax {d['jax']}",
        f"- command: `{d['command']}`",
        f"- {d['n_prompts']} prompts" + (f" x {d['samples']} samples each (one group per "
                                         "prompt)" if d.get("samples", 1) > 1 else "") +
        (", batch-size sweep only (`--sweep-only`)" if d.get("sweep_only") else
         f", batch {d['batch_size']}") + f", temperature {d['temperature']}, "
        f"{d['max_new_tokens']} new tokens max, {d['repeats']} repeats (tokens/s = median over "
        "repeats of total tokens / total wall time; speedup against `ar` of the same run" +
        ("; decode speedup: the same for the decode phase alone, i.e. the tokens after each "
         "prompt's first over the time after its prefill)" if decode else ")"),
    ]
    if ci:
        out.append("- speedup 95%: the percentile interval of the speedup when the "
                   "category's prompt batches are drawn again with replacement, each with its "
                   "`ar` runs (paired bootstrap, repeats pooled; `specjax.bench.intervals`)")
    if prog and not prog.get("complete", True):
        out.append(f"- **partial run**: {prog['groups_done']} of {prog['groups_total']} prompt "
                   "batches so far (taken round robin over categories; the run continues from "
                   "its `--journal` in later sessions)")
    machines = (prog or {}).get("machines") or {}
    if len(machines) > 1 or "not recorded" in machines:
        where = "; ".join(f"{n} on {m}" for m, n in sorted(machines.items()))
        out.append(f"- journaled over several sessions; prompt batches per machine: {where} "
                   "(speedups are always against `ar` on the same batch, same machine)")
    if d["rows"]:
        out += [
            "",
            "| category | method | tok/s | min-max | speedup |" + (" decode speedup |" if decode
                                                                  else "") +
            (" speedup 95% |" if ci else "") + " tau | acceptance by position | same as ar |",
            "| --- | --- | ---: | ---: | ---: |" + (" ---: |" if decode else "") +
            (" ---: |" if ci else "") + " ---: | --- | :---: |",
        ]
    for r in d["rows"]:
        acc = r.get("acceptance_by_position")
        acc_s = " ".join(fmt(a, ".2f") for a in acc[:8]) if acc else "-"
        dec = r.get("decode_speedup_vs_ar")
        out.append(
            f"| {r['category']} | {r['method']} | {r['tokens_per_s']:.1f} | "
            f"{r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f} | "
            f"{fmt(r.get('speedup_vs_ar'), '.2f')}x |" +
            ((f" {dec:.2f}x |" if dec else " - |") if decode else "") +
            (f" {interval(r.get('speedup_ci'))} |" if ci else "") +
            f" {fmt(r.get('tau'), '.2f')} | {acc_s} | {fmt(r.get('identical_to_ar'))} |")
    sweep = d.get("by_batch_size")
    if sweep:
        out += [
            "",
            f"Throughput by batch size (`--batch-sizes {','.join(map(str, sweep['batch_sizes']))}`"
            "; all prompts, every batch filled by cycling through them; speedup against `ar` "
            "at the same batch size):",
            "",
            "| batch | method | tok/s | min-max | speedup | tau | drafted per step | same as ar |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | :---: |",
        ]
        for r in sweep["rows"]:
            out.append(
                f"| {r['batch_size']} | {r['method']} | {r['tokens_per_s']:.1f} | "
                f"{r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f} | "
                f"{fmt(r.get('speedup_vs_ar'), '.2f')}x | {fmt(r.get('tau'), '.2f')} | "
                f"{fmt(r.get('mean_drafted'), '.2f')} | {fmt(r.get('identical_to_ar'))} |")
    configs = ({r["method"]: r.get("config") for r in d["rows"] if r.get("config")}
               or d.get("configs") or {})  # --sweep-only runs keep them apart
    if configs:
        out += ["", "Method configurations:", ""]
        for m, c in configs.items():
            # every resolved option (`*_settings`) is for journals; the changed ones show
            out.append(f"- `{m}`: " + ", ".join(
                f"{k}={v}" for k, v in c.items()
                if k != "method" and v != {} and not k.endswith("_settings")))
    if png:
        out += ["", f"![{title}](results/{png})"]
    out.append("")
    return out


def verify_curve_section(d: dict, png: str | None, name: str = "verify_curve") -> list[str]:
    ks = d["ks"]
    q = d.get("quantize", "none")
    what = "" if q == "none" else f", {q} weights"
    if d.get("in_loop"):
        title = (f"## Verify-cost curve inside the loop{what} (one speculative step with a "
                 "k-token verify block, relative to a step that drafts nothing)")
        how = (f"- model {d.get('model')}{what}, prompt of {d['prefix']} tokens; the engine of "
               f"k = {d['engine_k']}, drafting k - 1 junk tokens per step (one token out per "
               f"step); per-step time from two token budgets {d['steps']} steps apart, median "
               "of repeats after compile. The adaptive policy can read it (`--method-arg "
               f"cost=docs/results/{name}.json`), but its default stays the standalone curve "
               "(see the notes).")
        unit = "k = 1 (ms per step)"
    else:
        title = (f"## Verify-cost curve{what} (one target forward over k tokens, relative to "
                 "k = 1)")
        how = (f"- model {d.get('model')}{what}, {d['prefix']} committed tokens in the cache "
               "under the timed forward; median of repeated runs after compile and warm-up. "
               "The adaptive policy reads this file with `--method-arg "
               f"cost=docs/results/{name}.json`.")
        unit = "k = 1 (ms)"
    out = [
        title,
        "",
        f"- date: {d['date']}; machine: {d['machine']}; device: {d['device']}; jax {d['jax']}",
        f"- command: `{d['command']}`",
        how,
        "",
        f"| batch | {unit} | " + " | ".join(f"k = {k}" for k in ks) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in ks) + " |",
    ]
    for B, rel in d["relative"].items():
        out.append(f"| {B} | {1e3 * d['seconds'][B][0]:.1f} | "
                   + " | ".join(f"{r:.2f}x" for r in rel) + " |")
    out.append("")
    if png:
        out += [f"![verify-cost curve](results/{png})", ""]
    return out


def sweep_section(d: dict) -> list[str]:
    out = [
        "## Self-speculation sweep (early-exit layer, draft length, skip sets)",
        "",
        f"- date: {d['date']}; machine: {d['machine']}",
        f"- command: `python scripts/sweep_self_spec.py {d['command'].split(')', 1)[-1].strip()}`",
        f"- {d['prompts']} built-in prompts, {d['max_new_tokens']} new tokens, greedy, batch 1; "
        "each configuration against plain decoding in its own interleaved run",
        "",
        "| method | exit layer / skipped layers | k | speedup | tau | acceptance by position "
        "| same as ar |",
        "| --- | --- | ---: | ---: | ---: | --- | :---: |",
    ]
    for r in d["rows"]:
        where = r.get("exit_layer") or r.get("skip_attn")
        acc = r.get("acceptance_by_position") or []
        out.append(f"| {r['method']} | {where} | {r['k']} | {r['speedup_vs_ar']:.2f}x | "
                   f"{r['tau']:.2f} | {' '.join(fmt(a, '.2f') for a in acc)} | "
                   f"{fmt(r['identical_to_ar'])} |")
    b = d["best"]
    out += ["", f"Best: `{b['method']}` with {'exit_layer' if 'exit_layer' in b else 'skip'}="
                f"{b.get('exit_layer') or b.get('skip_attn')}, k={b['k']}: "
                f"{b['speedup_vs_ar']:.2f}x (tau {b['tau']:.2f}).", ""]
    return out


def kernel_section(d: dict, name: str) -> list[str]:
    dev = d["device"]
    cmd = d.get("command", "python scripts/bench_tree_attention.py")
    part = d.get("part", "op")
    what = ("the prefix kernel alone (`--part prefix`)" if part == "prefix"
            else "the whole op (prefix part, tree part, merge)")
    calls = sorted({r["calls_per_timing"] for r in d["rows"] if "calls_per_timing" in r})
    rotated = (f"; each timing calls the op on {calls[0]}-{calls[-1]} distinct input sets in one "
               "program (L2 and dispatch defeated), per-call time shown"
               if calls and calls[-1] > 1 else "")
    out = [
        f"## Tree attention op (`pallas_kernels/tree_attention`), {dev.get('kind')} "
        f"(`{name}`)",
        "",
        f"- date: {d['date']}; device: {dev.get('kind')} ({dev.get('backend')}, "
        f"{dev.get('machine')}); jax {d['jax_version']}",
        f"- command: `{cmd}`",
        f"- timed: {what}; shapes: batch {d['shapes']['batch']}, {d['shapes']['heads']} query "
        f"heads, {d['shapes']['kv_heads']} kv heads, head dim {d['shapes']['head_dim']} "
        f"(SmolLM2-135M); median of {d['repeats']} runs after {d['warmup']} warm-up, compile "
        f"excluded{rotated}",
        f"- measured in the same run: copy {d['copy_bandwidth_gbs']:.1f} GB/s (read + write), "
        f"read {d['read_bandwidth_gbs']:.1f} GB/s" + (
            "; on a CPU the copy's time is mostly the first touch of its fresh output pages, "
            "so the \"of copy bw\" column overstates how near the op comes to the memory "
            "limit: read \"of read bw\""
            if dev.get("backend") == "cpu" else ""),
        "",
        "| implementation | dtype | nodes | prefix | median us | achieved GB/s | of copy bw "
        "| of read bw |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    left_out = []
    for r in d["rows"]:
        if "median_s" not in r:
            left_out.append(f"{r['implementation']} {r['dtype']}: "
                            f"{r.get('skipped') or r.get('error', '?')[:200]}")
            continue
        out.append(f"| {r['implementation']} | {r['dtype']} | {r['nodes']} | "
                   f"{r['prefix_length']} | {r['median_s'] * 1e6:.1f} | "
                   f"{r['achieved_gbs']:.1f} | {r['fraction_of_copy_bandwidth']:.1%} | "
                   f"{r['fraction_of_read_bandwidth']:.1%} |")
    out += ["", f"({d.get('note', '')})", ""]
    for line in dict.fromkeys(left_out):  # once each
        out += [f"- not timed: {line}"]
    if left_out:
        out += [""]
    return out


def replay_section(d: dict) -> list[str]:
    cats = d["categories"]
    names = list(next(iter(cats.values()))["strategies"])
    src = d.get("cost_source", "built-in")
    out = [
        "## Prompt lookup replayed offline (what each drafting strategy could give)"
        + ("" if src.startswith("built-in") else f", costs from {Path(src).name}"),
        "",
        f"- date: {d.get('date', '?')}; command: `{d['command']}`; model {d['model']}, "
        f"greedy, {d['max_new_tokens']} new tokens; strategies replayed over plain decoding's "
        f"outputs, verify forwards charged from the verify-cost curve ({src}; no prefill, no "
        "loop overhead)" + (
            f"; the replayed policy decides with the {d['policy_cost_source']} curve"
            if "policy_cost_source" in d else ""),
        "- cells: tokens per unit of verify cost, i.e. the decode-phase speedup if drafting were "
        "free (tau in brackets); oracle: tau of copying the longest run (<= 8) from anywhere "
        "in the prompt and the text so far" + (
            "; hindsight: the engine's lookup drafting, at every step, exactly the tokens that "
            "will be accepted (a perfect draft-length choice, the reference for any policy)"
            if any(n.startswith("hindsight") for n in names) else "") + (
            "; oracle copy, perfect length: the oracle's copies at the engine's verify costs, "
            "each step drafting exactly what is accepted (the ceiling of any copy-based "
            "drafter under any draft-length policy)"
            if any(n.startswith("oracle copy") for n in names) else ""),
        "",
        "| category | oracle tau | " + " | ".join(names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for cat, r in cats.items():
        cells = [f"{r['strategies'][n]['per_cost']:.2f} ({r['strategies'][n]['tau']:.2f})"
                 for n in names]
        out.append(f"| {cat} | {r['oracle']['tau']:.2f} | " + " | ".join(cells) + " |")
    ref = [n for n in names if not n.startswith(("chain", "tree"))]
    if all("plain_prefill_s" in r for r in cats.values()):
        out += [
            "",
            "End to end, with the prefill and decode times of the plain decoding run "
            "(`(prefill + decode) / (prefill + decode / speedup)`; upper bounds: no drafting or "
            "loop overhead is charged):",
            "",
            "| category | plain decoding's prefill share | " + " | ".join(ref) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in ref) + " |",
        ]
        for cat, r in cats.items():
            pre, dec = r["plain_prefill_s"], r["plain_decode_s"]
            out.append(f"| {cat} | {pre / max(pre + dec, 1e-9):.0%} | " + " | ".join(
                f"{r['strategies'][n]['end_to_end']:.2f}" for n in ref) + " |")
    return out + [""]


def refactor_section(before: dict, after: dict, title: str, tokens: dict | None) -> list[str]:
    """Two runs of the same bench command on two commits (back to back), side by side."""
    out = [f"## {title}", "",
           f"- before: {before['date']}, `{before['command']}` ({before.get('commit', '?')})",
           f"- after: {after['date']}, `{after['command']}` ({after.get('commit', '?')})",
           f"- machine: {after['machine']}", "",
           "| batch | method | tok/s before | tok/s after | after / before | compile s before | "
           "compile s after | same as ar (both) |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]

    def rows(d):
        got = {(1, r["method"]): r for r in d["rows"] if r["category"] == "ALL"}
        for r in (d.get("by_batch_size") or {}).get("rows", []):
            got[(r["batch_size"], r["method"])] = r
        return got

    rb, ra = rows(before), rows(after)
    for key in sorted(ra):
        if key not in rb:
            continue
        b, a = rb[key], ra[key]
        same = fmt(bool(b.get("identical_to_ar")) and bool(a.get("identical_to_ar")))
        out.append(f"| {key[0]} | {key[1]} | {b['tokens_per_s']:.1f} | {a['tokens_per_s']:.1f} |"
                   f" {a['tokens_per_s'] / b['tokens_per_s']:.3f} | "
                   f"{fmt(b.get('compile_s'), '.1f')} | {fmt(a.get('compile_s'), '.1f')} | "
                   f"{same} |")
    if tokens:
        out += ["", f"Outputs of the two commits compared token for token: {tokens['summary']}"]
    return out + [""]


def training_section() -> list[str]:
    """The recipe's cost: the committed corpus (its manifest), each recorded training run
    (docs/results/train_*.metrics.jsonl + curves) and the draft-cost measurements."""
    out = []
    man = ROOT / "data" / "corpus_smollm2" / "manifest.json"
    runs = sorted(RES.glob("train_*.metrics.jsonl"))
    costs = sorted(RES.glob("draft_cost_*.json"))
    if not (man.exists() or runs or costs):
        return out
    out += ["## Training recipe cost and draft cost", ""]
    if man.exists():
        m = json.loads(man.read_text())
        mach = m.get("machine") or "not recorded"
        out += [
            f"- Corpus `data/corpus_smollm2` (`specjax train data`, command in docs/training.md): "
            f"{m['num_records']} prompts in {len(m.get('shards', []))} of {m.get('num_shards')} "
            f"shards, {m['num_tokens']:,} tokens ({m.get('num_answer_tokens', 0):,} answer "
            f"tokens), {m.get('wall_s', 0) / 60:.1f} minutes of generation, "
            f"{m.get('tokens_per_s')} answer tokens/s ({m.get('decode_tokens_per_s')} while "
            f"decoding); refused for overlap: {m.get('refused')}; complete: "
            f"{m.get('complete')}; machine: {mach}.",
        ]
    for f in runs:
        rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        val = [r for r in rows if r["split"] == "val"]
        train = [r for r in rows if r["split"] == "train"]
        if not train:
            continue
        last = train[-1]
        accs = "; ".join(
            f"step {r['step']}: " + ", ".join(f"{100 * r['metrics'][k]:.1f}%" for k in
                                              sorted(r["metrics"]) if k.startswith("acc_"))
            for r in val)
        png = f.name.replace(".metrics.jsonl", "_curves.png")
        out += [f"- Training run `{f.name}`: {last['step']} steps in "
                f"{last['elapsed'] / 60:.1f} minutes ({last['elapsed'] / last['step']:.1f} s per "
                f"step, {last.get('tokens_per_s', 0):.0f} tokens/s at the end); validation "
                f"draft accuracy by position: {accs}."
                + (f" Curves: ![{png}](results/{png})" if (RES / png).exists() else "")]
    for f in costs:
        d = json.loads(f.read_text())
        out += [f"- Draft cost, `{d['command']}` ({d['date']}, {d['machine']}): a plain step "
                f"{1000 * d['plain_step_s']:.1f} ms; a {d['method']} step drafting k = {d['k']} "
                f"{1000 * d['method_step_s']:.1f} ms = {d['method_step_rel']:.2f} plain steps, of "
                f"which the {d['k'] + 1}-token verify is {d['verify_rel_in_loop']:.2f} (in-loop "
                f"probe); one draft token costs {d['draft_token_rel_abs']:.3f}-"
                f"{d['draft_token_rel']:.3f} of a plain step (seconds against seconds / each "
                f"against its own one-token step)."]
    return out + [""]


def exactness_section(d: dict, stem: str = "exactness") -> list[str]:
    """docs/results/exactness.json (scripts/measure_exactness.py): the price of exact numerics
    and token identity with and without them; ``exactness_*.json``: the same on other hosts
    (titled by the file)."""
    title = "The price of exact numerics (issue 22)" if stem == "exactness" else \
        f"The price of exact numerics on another host (issue 22; `{stem}.json`)"
    out = [f"## {title}", "",
           f"`{d['command']}` ({d['date']}, {d['machine']}); {d['prompts']} built-in prompts, "
           f"{d['max_new_tokens']} new tokens, median of {d['repeats']} repeats after a "
           "compiling run; decode tokens/s of the whole generate call. `identical`: prompts "
           "where prompt lookup's tokens equal plain decoding's (same numerics). The command "
           "continues where it stopped, one precision at a time: "
           + "; ".join(f"{p} measured {dt}" for p, dt in dict.fromkeys(
               (r["precision"], r.get("date", d["date"])) for r in d["rows"])) + ".", "",
           "| precision | numerics | plain b1 tok/s | plain b4 tok/s | exact cost b1 | "
           "exact cost b4 | prompt lookup b1 | b4 | identical b1 | b4 | unseen identical "
           "(b4) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in d["rows"]:
        cost = [f"{100 * r[k]:.0f}%" if k in r else "-" for k in ("ar_b1_cost_vs_fast",
                                                                   "ar_b4_cost_vs_fast")]
        un = (f"{r['unseen_identical']}/{r['unseen_prompts']}" if "unseen_prompts" in r
              else "-")
        out.append(
            f"| {r['precision']} | {r['numerics']} | {r['ar_b1_tok_s']:.1f} | "
            f"{r['ar_b4_tok_s']:.1f} | {cost[0]} | {cost[1]} | "
            f"{r['prompt_lookup_b1_speedup']:.2f}x | {r['prompt_lookup_b4_speedup']:.2f}x | "
            f"{r['identical_b1']}/{d['prompts']} | {r['identical_b4']}/{d['prompts']} | {un} |")
    return out + [""]


def prefill_section(now: dict, before: dict | None) -> list[str]:
    """docs/results/prefill_exact_vs_fast*.json (scripts/measure_prefill.py): the exact
    prefill's price, and the same script over the code before the prefill's own forms."""
    out = ["## The price of an exact prefill (issue 22)", "",
           f"`{now['command']}` ({now['date']}, {now['machine']}): {now['what']}. Seconds."
           + (f" Before: {before['date']}, {before['what']}." if before else ""), "",
           "| precision | prompt tokens | cache | exact s | fast s | exact / fast |"
           + (" exact s before | before / fast |" if before else ""),
           "| --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if before else "")]
    old = {(r["precision"], r["prompt_tokens"]): r for r in (before or {}).get("rows", [])}
    for r in now["rows"]:
        line = (f"| {r['precision']} | {r['prompt_tokens']} | {r['cache_len']} | "
                f"{r['exact_s']:.3f} | {r['fast_s']:.3f} | {r['exact_over_fast']:.2f}x |")
        if before:
            b = old.get((r["precision"], r["prompt_tokens"]))
            line += (f" {b['exact_s']:.3f} | {b['exact_over_fast']:.2f}x |" if b
                     else " - | - |")
        out.append(line)
    return out + [""]


def suffix_section(d: dict, latest: bool = True) -> list[str]:
    """docs/results/suffix_workload*.json (scripts/bench_suffix.py): suffix decoding on a
    repeated-task workload (the latest run first, then earlier ones)."""
    done = "" if d.get("complete") else (f" **Incomplete: {d['requests_done']} of "
                                         f"{d['requests_total']} requests so far.**")
    title = "## Suffix decoding on a repeated-task workload (issue 24)" + (
        "" if latest else f": the earlier run of {d['date'][:10]}")
    out = [title, "",
           f"`{d['command']}` ({d['date']}, {d['machine']}); SmolLM2-135M float32, "
           f"{d.get('numerics', 'exact')} numerics, greedy, batch 1, {d['max_new_tokens']} new "
           f"tokens; {len(d['tasks'])} Spec-Bench tasks (round 1), the same tasks with a small "
           f"change each (round 2), then {d['turns']} turns of one conversation editing a "
           "program. One stream of requests, every method on each request in turn; the suffix "
           "cache holds every earlier answer. Speedup: tokens/s over plain decoding's in the "
           "same run (sum of tokens over sum of decode time); median: of per-request ratios; "
           "tau: tokens per target forward; hits: steps that drafted (from the cache: "
           f"`global`). Final cache: {d.get('cache', '-')}.{done}", "",
           "| part | requests | plain tok/s | method | speedup | median | tau | hits | "
           "global hits | identical |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- "
           "| --- |"]
    for part, row in d["summary"].items():
        ms = [k[:-len("_speedup")] for k in row if k.endswith("_speedup")
              and not k.endswith("_median_speedup")]
        for m in ms:
            hit = (f"{100 * row[m + '_hit_rate']:.0f}%" if m + "_hit_rate" in row else "-")
            gh = (f"{100 * row[m + '_global_hit_rate']:.0f}%"
                  if m + "_global_hit_rate" in row else "-")
            out.append(f"| {part} | {row['requests']} | {row['ar_tok_s']:.1f} | {m} | "
                       f"{row[m + '_speedup']:.2f}x | {row[m + '_median_speedup']:.2f}x | "
                       f"{row[m + '_tau']:.2f} | {hit} | {gh} | "
                       f"{row[m + '_identical']}/{row['requests']} |")
    return out + [""]


def suffix_bound_section(d: dict) -> list[str]:
    """docs/results/suffix_workload_bound.json (scripts/replay_suffix_bound.py): the ceiling
    of copy-based drafting on the repeated-task workload beside the measured methods."""
    h = d["header"]
    methods = [m for m in h["methods"] if m != "ar"]
    out = ["### Its ceilings: oracles that draft the answer from what the drafter has seen",
           "", f"`{d['command']}` (journal of {d['requests']} requests; k <= {d['k']}, this "
           "machine's batch-1 verify curve at the engine's bucketed block sizes). At every "
           "step an oracle drafts exactly the tokens that will be accepted, along the "
           "cheapest path through the answer; drafting is free and the prefill is plain "
           "decoding's own. `suffix's rule` (not an oracle: the "
           "drafter's defaults replayed, charged for every drafted token, drafting free): the "
           "chain `suffix` drafts (the majority continuation of its 32 most recent "
           f"candidates, cut where a token has under {100 * d.get('cut', [0.1])[0]:.0f}% of "
           f"them or past {d.get('cut', [0.1, 1.0])[1]:g} times the match length); "
           "`suffix's vote`: the same chain cut at the right length; `suffix's candidates`: "
           "the best "
           "continuation of every earlier occurrence of the longest matched context (at most "
           f"{d.get('max_depth', 24)} tokens) in the prompt, the output so far and every "
           "earlier answer (what `suffix` reads; the ceiling of any drafter of the longest "
           "matched context's continuations, chain or tree, whatever its vote and length "
           "rule); `copy, outputs`: the longest run of the continuation "
           "found anywhere in those texts (the source chosen knowing the answer); `copy, "
           "everything`: also in every earlier prompt. Speedup over plain decoding (tau).", "",
           "| part | requests | suffix's rule | suffix's vote | suffix's candidates | "
           "copy, outputs | copy, everything | " + " | ".join(methods) + " |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | "
           + " | ".join("---:" for _ in methods) + " |"]
    for part, r in d["report"].items():
        cells = [f"{r[c + '_speedup']:.2f}x ({r[c + '_tau']:.2f})"
                 for c in ["bound_outputs_rule", "bound_outputs_vote",
                           "bound_outputs_matched", "bound_outputs",
                           "bound_everything"]
                 + methods]
        out.append(f"| {part} | {r['requests']} | " + " | ".join(cells) + " |")
    return out + [""]


def invariant_kernels_section(d: dict, name: str) -> list[str]:
    """docs/results/invariant_kernels_*.json (scripts/bench_invariant_matmul.py): the
    batch-invariant Pallas kernels of exact numerics against XLA's forms (issue 22)."""
    note = (" The kernels run in the Pallas interpreter on a CPU: these time the interpreter, "
            "not a kernel (the CPU keeps `exact_products=xla`)." if d.get("mode") == "interpret"
            else "")
    out = [f"## Batch-invariant Pallas kernels: {d['device']} ({d['mode']}; issue 22)", "",
           f"`{d['command']}` ({d['date']}, {d['machine']}, jax {d['jax']}; "
           f"`docs/results/{name}.json`). Median of {d['reps']} calls after a warm-up; "
           "`exact(xla)`: exact numerics' XLA form (rows padded to a probed row class); "
           "`identical`: the kernel's rows bit-identical across the row counts timed; checks "
           f"failed: {d['failed_checks']}.{note}", "",
           "| dtype | product | rows | kernel ms | XLA ms | exact(xla) ms | kernel / XLA | "
           "identical |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in d["cases"]:
        shape = (f"attention, {c['cache']} slots" if c["shape"] == "attention"
                 else f"{c['shape']} {c['out']}x{c['in']}")
        xla = f"{c['xla_ms']:.3f}" if "xla_ms" in c else "-"
        ratio = (f"{c['kernel_vs_xla']:.2f}x" if "kernel_vs_xla" in c
                 else f"{c['kernel_vs_exact_xla']:.2f}x (vs exact)")
        out.append(f"| {c['dtype']} | {shape} | {c['rows']} | {c['kernel_ms']:.3f} | {xla} | "
                   f"{c['exact_xla_ms']:.3f} | {ratio} | "
                   f"{'yes' if c['rows_identical'] else 'NO'} |")
    return out + [""]


def mesh_section(d: dict) -> list[str]:
    """docs/results/mesh_cpu.json (scripts/bench_mesh.py): decoding on simulated meshes."""
    out = ["## Decoding on simulated device meshes (issue 25)", "",
           f"`{d['command']}` ({d['date']}, {d['machine']}, JAX {d['jax']}); {d['model']} "
           f"float32, batch {d['batch']} (8 built-in prompts), {d['max_new_tokens']} new tokens, "
           f"greedy, on {d['simulated_devices']} simulated CPU devices sharing the machine's "
           "cores: a CPU shows what a mesh costs to compile and what its collectives add per "
           "step, not the speed of a pod. `split`: the logical axes the sharding table split "
           "on that mesh (SmolLM2: 9 query / 3 KV heads, MLP 1536). Identical: tokens equal to "
           "the single-device run's.", "",
           "| method | mesh | split | compile s | prefill s | ms / step | steps | tok/s | "
           "identical |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in d["rows"]:
        split = ", ".join(f"{k}->{v}" for k, v in r.get("split", {}).items()) or "-"
        out.append(f"| {r['method']} | {r['mesh']} | {split} | {r['compile_s']:.1f} | "
                   f"{r['prefill_s']:.3f} | {r['ms_per_step']:.1f} | {r['steps']} | "
                   f"{r['tokens_per_s']:.1f} | {r['identical_to_one_device']} |")
    return out + [""]


def main():
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python scripts/make_benchmarks_md.py` from the JSON files in "
        "`docs/results/` (each made by the command quoted in its section). Numbers are medians "
        "of runs interleaved in one process; speedups are against plain decoding (`ar`) "
        "measured in the same run. Hugging Face transformers runs on PyTorch CPU with the same "
        "weights.",
        "",
    ]
    f = RES / "bench_decode.json"
    if f.exists():
        lines += decode_section(json.loads(f.read_text()))
    lines += training_section()
    for f in sorted(RES.glob("exactness*.json"), key=lambda f: (f.stem != "exactness", f.stem)):
        lines += exactness_section(json.loads(f.read_text()), f.stem)
    f = RES / "prefill_exact_vs_fast.json"
    if f.exists():
        b = RES / "prefill_exact_vs_fast_before.json"
        lines += prefill_section(json.loads(f.read_text()),
                                 json.loads(b.read_text()) if b.exists() else None)
    runs = [json.loads(f.read_text()) for f in RES.glob("suffix_workload*.json")
            if not f.stem.endswith("_bound")]
    bound = RES / "suffix_workload_bound.json"
    for i, d in enumerate(sorted(runs, key=lambda d: d["date"], reverse=True)):
        lines += suffix_section(d, latest=i == 0)
        b = json.loads(bound.read_text()) if i == 0 and bound.exists() else None
        if b is not None and b["header"]["tasks"] == d["tasks"] \
                and b["header"]["methods"] == d["methods"]:  # replayed from this run's journal
            lines += suffix_bound_section(b)
    for f in sorted(RES.glob("invariant_kernels_*.json")):
        lines += invariant_kernels_section(json.loads(f.read_text()), f.stem)
    for name, title in (("bench_heads_b4_sampling", "The shipped Medusa-1 and Hydra++ heads' "
                                                    "batch-4 default when sampling "
                                                    "(temperature 0.7), starting from their "
                                                    "sampled records, Spec-Bench (4 questions "
                                                    "per category as batches of 4, 64 tokens, "
                                                    "2 repeats; a scouting run)"),
                        ("bench_spec_bench_hydra_sampling", "The shipped Hydra++ heads when "
                                                            "sampling (temperature 0.7), "
                                                            "their batch-1 default (adaptive "
                                                            "chains), Spec-Bench (10 questions "
                                                            "per category, 128 tokens; issues "
                                                            "21 and 23)"),
                        ("bench_heads_b4_prior", "The shipped Medusa-1 and Hydra++ heads' "
                                                 "batch-4 default since it starts from their "
                                                 "measured first-token acceptance, eight "
                                                 "repeats (64 tokens; issue 23's 0.97x bar)"),
                        ("bench_hydra_b4_all_repeats8", "Hydra++'s batch-4 default with the "
                                                        "even prior, all 13 categories since "
                                                        "its cheaper prompt pass, eight "
                                                        "repeats (64 tokens; issue 23's 0.97x "
                                                        "bar)"),
                        ("bench_hydra_b4_prompt_pass", "Hydra++'s batch-4 default since its "
                                                       "prompt pass runs the prefix layer at "
                                                       "each row's last position only, in the "
                                                       "four categories that missed the bar, "
                                                       "eight repeats (64 tokens; issue 23's "
                                                       "0.97x bar)"),
                        ("bench_heads_b4_repeats8", "The shipped Medusa-1 and Hydra++ heads' "
                                                    "batch-4 default with its margin, eight "
                                                    "repeats (adaptive chains, min_gain 1.1) "
                                                    "against plain decoding, Spec-Bench (4 "
                                                    "questions per category as batches of 4, "
                                                    "64 tokens; issue 23's 0.97x bar)"),
                        ("bench_heads_b4_margin", "The shipped Medusa-1 and Hydra++ heads' "
                                                  "batch-4 default with its margin (adaptive "
                                                  "chains, min_gain 1.1) against plain "
                                                  "decoding, Spec-Bench (4 questions per "
                                                  "category as batches of 4, 64 tokens, 4 "
                                                  "repeats; issue 23's 0.97x bar)"),
                        ("bench_medusa_b4_repeats", "The shipped Medusa-1 heads' batch-4 "
                                                    "default (adaptive chains) against plain "
                                                    "decoding, Spec-Bench (4 questions per "
                                                    "category as batches of 4, 64 tokens, 4 "
                                                    "repeats; issue 23's 0.97x bar)"),
                        ("bench_eagle_tree3_sampling_b1", "The shipped EAGLE-3 head when "
                                                          "sampling (temperature 0.7): the "
                                                          "chain of k = 3 against the 3-node "
                                                          "dynamic tree, Spec-Bench (2 "
                                                          "questions per category, 128 tokens; "
                                                          "a scouting run)"),
                        ("bench_medusa_tree3_b4", "The shipped Medusa-1 heads at batch 4: "
                                                  "the chain default against the 3-node "
                                                  "static tree under adaptive, Spec-Bench "
                                                  "(4 questions per category as batches of "
                                                  "4, 64 tokens, 2 repeats)"),
                        ("bench_spec_bench_medusa_tree3_sampling", "The shipped Medusa-1 heads "
                                                                   "when sampling (temperature "
                                                                   "0.7): the chain default "
                                                                   "against the 3-node static "
                                                                   "tree under adaptive (the "
                                                                   "default since), Spec-Bench "
                                                                   "(10 questions per category, "
                                                                   "128 tokens; issues 21 and "
                                                                   "23)"),
                        ("bench_medusa_tree3_sampling_b1", "The shipped Medusa-1 heads when "
                                                           "sampling (temperature 0.7): the "
                                                           "chain default against the 3-node "
                                                           "static tree under adaptive, "
                                                           "Spec-Bench (2 questions per "
                                                           "category, 128 tokens; a scouting "
                                                           "run)"),
                        ("bench_hydra_trees_adaptive_b1", "The shipped Hydra++ heads: their "
                                                          "batch-1 default (adaptive chains) "
                                                          "against 3-node trees under "
                                                          "adaptive, Spec-Bench (2 questions "
                                                          "per category, 128 tokens; a "
                                                          "scouting run)"),
                        ("bench_spec_bench_medusa_tree3", "The shipped Medusa-1 heads: "
                                                           "their batch-1 default (adaptive "
                                                           "chains) against a static 3-node "
                                                           "tree under adaptive, Spec-Bench "
                                                           "(10 questions per category, 128 "
                                                           "tokens; issues 21 and 23)"),
                        ("bench_spec_bench_eagle_tree3", "The shipped EAGLE-3 head as the "
                                                          "chain of k = 3 and as a 3-node "
                                                          "dynamic tree (the batch-1 greedy "
                                                          "default since 2026-12-07), "
                                                          "Spec-Bench (10 questions per "
                                                          "category, 128 tokens; issue 21)"),
                        ("bench_heads_trees_b1", "The shipped Medusa-1 and Hydra++ heads: "
                                                 "their batch-1 default against 3-node "
                                                 "trees at a fixed length, Spec-Bench (2 "
                                                 "questions per category, 128 tokens; a "
                                                 "scouting run)"),
                        ("bench_eagle_trees_b1", "The shipped EAGLE-3 head: the chain of "
                                                 "k = 3 against dynamic trees of 3 and 7 "
                                                 "nodes, Spec-Bench (2 questions per "
                                                 "category, 128 tokens; issue 21)"),
                        ("bench_spec_bench_heads_medusa_default_2", "Medusa-1's batch-1 "
                         "default (adaptive, measured step costs, idle_decay 0.995) on "
                         "Spec-Bench again, 130 questions (issue 23's robustness bar)"),
                        ("bench_spec_bench_token_recycling_prior_tree", "Token Recycling "
                         "from the shipped table recording every verified node's top ids "
                         "(record=tree) against the committed path, 130 Spec-Bench questions "
                         "at batch 1 (2026-12-06, fortieth session)"),
                        ("bench_token_recycling_prior_b4", "Token Recycling's default "
                         "(from the shipped table) at batch 4: 52 questions as 13 batches of "
                         "4 (issue 23's robustness bar; 2026-12-06, fortieth session)"),
                        ("bench_spec_bench_token_recycling_prior", "Token Recycling "
                         "starting from the table shipped for SmolLM2 (prior=shipped: each "
                         "token's most frequent successors in the model's own answers to "
                         "varied prompts) against starting from junk, 130 Spec-Bench "
                         "questions at batch 1 (2026-12-06, fortieth session)"),
                        ("bench_spec_bench_token_recycling_record_tree", "Token Recycling "
                         "recording every verified node's top ids (record=tree, the paper's "
                         "rule) against the committed path, both with the table carried "
                         "from question to question, 130 Spec-Bench questions at batch 1 "
                         "(2026-12-06, thirty-ninth session)"),
                        ("bench_spec_bench_token_recycling_hot", "Token Recycling with its "
                         "table carried from question to question (memory=keep, the paper's "
                         "global table) against each question starting cold, 130 Spec-Bench "
                         "questions at batch 1 (2026-12-06, thirty-ninth session)"),
                        ("bench_token_recycling_b4", "Token Recycling at batch 4: its "
                         "default (levels:3.2.2.1) and the old default tree levels:4.3.2.1, "
                         "52 questions as 13 batches of 4 (issue 23's robustness bar; "
                         "2026-12-06, thirty-eighth session)"),
                        ("bench_spec_bench_token_recycling_tree3221", "Token Recycling with "
                         "the tree levels:3.2.2.1 (the default since) against levels:4.3.2.1 "
                         "over the 130 Spec-Bench questions at batch 1 (2026-12-06, "
                         "thirty-eighth session)"),
                        ("bench_token_recycling_tree3221_b1_fwd", "Token Recycling at "
                         "batch 1 with the tree levels:3.2.2.1 under its default's "
                         "forward-only prices, summarization and rag, 20 questions "
                         "(2026-12-06, thirty-seventh session)"),
                        ("bench_token_recycling_tree3221_b1_1024", "Token Recycling at "
                         "batch 1 with a tree whose first level fits the 4-token verify "
                         "bucket (levels:3.2.2.1) priced by whole loop steps at 1,024 "
                         "positions, against its default, summarization and rag, 20 questions "
                         "(2026-12-06, thirty-seventh session)"),
                        ("bench_token_recycling_loop_priced_b1_1024", "Token Recycling "
                         "at batch 1 priced by the forward-only verify curve (its default) or "
                         "by whole loop steps at 1,024 positions, summarization and rag, 20 "
                         "questions (2026-12-06, thirty-seventh session)"),
                        ("bench_token_recycling_loop_priced_b1_short", "Token Recycling "
                         "at batch 1 priced by the forward-only verify curve (its default) or "
                         "by whole loop steps at 256 positions, translation, coding and "
                         "math_reasoning, 30 questions (2026-12-06, thirty-seventh session)"),
                        ("bench_token_recycling_loop_priced_b1", "Token Recycling at batch 1 "
                         "priced by the forward-only verify curve (its default) or by whole "
                         "loop steps at 2,048 positions, summarization and rag, 20 questions "
                         "(2026-12-06, thirty-seventh session)"),
                        ("bench_spec_bench_token_recycling_default_3", "Token Recycling "
                         "under its default since the in-place verify forward, Spec-Bench, "
                         "batch 1, 130 questions (2026-12-06, thirty-sixth session)"),
                        ("bench_spec_bench_token_recycling_default_2", "Token Recycling "
                         "under its default since 2026-12-05's thirty-first session "
                         "(adaptive, prompt=text) on Spec-Bench, 130 questions, batch 1 "
                         "(issue 23's robustness bar, issue 24's per-category figure)"),
                        ("bench_token_recycling_prompt_text", "Token Recycling's prompt "
                         "entries from the target's top ids (prompt=top_ids, the default "
                         "until 2026-12-05) or from the prompt's text (prompt=text, the "
                         "default since), summarization and rag, 20 questions, batch 1"),
                        ("bench_spec_bench_token_recycling_default", "Token Recycling "
                         "under its default since 2026-12-05 (adaptive, each depth of its "
                         "tree priced by its nodes) on Spec-Bench, 130 questions, batch 1 "
                         "(issue 23's robustness bar, issue 24's per-category figure)"),
                        ("bench_policies_heads_b4_cachelen", "Medusa-1 and Hydra++ at batch "
                         "4 under their default (`adaptive`, step costs timed at the run's "
                         "1,024-position cache), two repeats (2026-12-06, thirty-sixth "
                         "session)"),
                        ("bench_policies_eagle_b16_cachelen", "The EAGLE-3 head at batch 16 "
                         "under `adaptive` priced at 1,024 positions against fixed k = 1, "
                         "the 52 questions as four batches of 16 (2026-12-05 and 2026-12-06, "
                         "thirty-fifth and thirty-sixth sessions)"),
                        ("bench_ngram_b4_cachelen", "`ngram` and prompt lookup at batch 4 "
                         "with the in-loop verify curve timed at the run's 1,024-position "
                         "cache, two repeats (2026-12-05, thirty-fifth session)"),
                        ("bench_policies_eagle_b4_cachelen", "The EAGLE-3 head at batch 4 "
                         "under `adaptive` with its steps timed at the run's 1,024-position "
                         "cache, against fixed k = 1, two repeats (2026-12-05, thirty-fifth "
                         "session)"),
                        ("bench_policies_eagle_b4_idle", "The EAGLE-3 head at batch 4 with "
                         "`adaptive`'s steps priced 5% below the probe's, against the "
                         "default and fixed k = 1 (2026-12-05, thirty-fourth session)"),
                        ("bench_policies_eagle_b4_pool", "The EAGLE-3 head and prompt lookup "
                         "at batch 4 under `adaptive`'s pooled finish rule, its default since "
                         "2026-12-05, against fixed k = 1 (thirty-fourth session)"),
                        ("bench_policies_eagle_b4_finish", "The EAGLE-3 head at batch 4 after "
                         "the in-place verify forward: `adaptive`'s batch rules against fixed "
                         "k = 1 and 2 (2026-12-05, thirty-fourth session)"),
                        ("bench_ngram_b4_finish_r2", "`ngram` and prompt lookup at batch 4 "
                         "after `ngram`'s batch choice began valuing a block by how soon the "
                         "batch would finish, two repeats (2026-12-05, thirty-third "
                         "session)"),
                        ("bench_ngram_b4_finish", "`ngram` and prompt lookup at batch 4 "
                         "after `ngram`'s batch choice began valuing a block by how soon the "
                         "batch would finish (2026-12-05, thirty-third session), the "
                         "questions of bench_ngram_b4"),
                        ("bench_ngram_b4_verify_in_place", "`ngram` and prompt lookup at "
                         "batch 4 under their defaults after the verify forward began writing "
                         "the cache in place (2026-12-05, thirty-second session), the "
                         "questions of bench_ngram_b4 (issue 23's robustness bar above "
                         "batch 1)"),
                        ("bench_ngram_b4_loop_priced", "`ngram` and prompt lookup at batch "
                         "4 under their defaults since 2026-12-05 (above batch 1 priced by "
                         "whole loop steps against plain ones, measured), the questions of "
                         "bench_ngram_b4 (issue 23's robustness bar above batch 1)"),
                        ("bench_ngram_b4_in_loop_cost", "`ngram` and prompt lookup at batch "
                         "4 priced by what their loop steps cost against a plain step (given "
                         "by hand as cost=), the questions of bench_ngram_b4"),
                        ("bench_ngram_b4_min_gain", "`ngram` drafting only chains it is "
                         "confident of (min_gain=0.6) at batch 4, the questions of "
                         "bench_ngram_b4"),
                        ("bench_ngram_b4_floor", "`ngram` that never drafts "
                         "(min_gain=0.9999) at batch 4, the questions of bench_ngram_b4: the "
                         "cost of its lookups alone"),
                        ("bench_ngram_b4", "`ngram` (choosing the block for the batch "
                         "since 2026-12-05) and prompt lookup at batch 4, 52 Spec-Bench "
                         "questions, each category's four as one batch (issue 23's "
                         "robustness bar above batch 1)"),
                        ("bench_spec_bench_untrained_layer_skip", "Layer skipping under "
                         "its default policy (adaptive, measured step costs: no draft pays, "
                         "so it decodes plainly) on Spec-Bench, 130 questions, batch 1: plain "
                         "decoding timed against itself (issue 23)"),
                        ("bench_spec_bench_untrained_default_2", "The draft model under its "
                         "default policy after its stand-in stopped prefilling its own cache "
                         "(it takes the target's first layers' entries), Spec-Bench, 130 "
                         "questions, batch 1 (issue 23's robustness bar)"),
                        ("bench_spec_bench_untrained_default", "The draft model and the "
                         "early exit under their default policy (adaptive, idle_decay 0.995) "
                         "on Spec-Bench, 130 questions, batch 1 (issue 23's robustness bar)"),
                        ("bench_spec_bench_heads_mh_default", "Medusa-1 and Hydra++ heads "
                         "under their batch-1 default since 2026-12-03 (adaptive, measured "
                         "step costs, idle_decay 0.995) on Spec-Bench, 130 questions (issue "
                         "23's robustness bar)"),
                        ("bench_policies_hydra_b1", "Hydra++ at batch 1: fixed k = 3 (its "
                         "default then), adaptive, adaptive with idle_decay 0.995 and the "
                         "confidence stop, Spec-Bench (2 questions per category, 64 tokens, "
                         "2 repeats; issue 23)"),
                        ("bench_policies_untrained_idle_b1", "The draft model and the early "
                                                             "exit under their default "
                                                             "policy since 2026-12-01 "
                                                             "(adaptive, idle_decay 0.995) "
                                                             "and with idle_decay 0.98, "
                                                             "batch 1, Spec-Bench (1 "
                                                             "question per category; "
                                                             "issue 23)"),
                        ("bench_policies_pl_offer_b4", "Prompt lookup's default (adaptive) at "
                                                       "batch 4 with each row's chance of "
                                                       "offering a draft counted, Spec-Bench "
                                                       "(2 questions per category; issue 23)"),
                        ("bench_policies_untrained_default_b1", "The drafters not trained "
                                                                "for the target under their "
                                                                "default policy (adaptive, "
                                                                "idle_decay 0.98) at batch 1, "
                                                                "Spec-Bench (1 question per "
                                                                "category, 3 repeats; issue "
                                                                "23)"),
                        ("bench_policies_untrained_b1", "The drafters not trained for the "
                                                        "target at batch 1: fixed k = 3 (their "
                                                        "default until 2026-12-01) against "
                                                        "adaptive, Spec-Bench (1 question per "
                                                        "category; issue 23)"),
                        ("bench_policies_sweep_draft_model", "Every draft-length policy "
                                                             "on the draft model at batch 1, "
                                                             "4 and 16, Spec-Bench (2 "
                                                             "questions per category; issue "
                                                             "23)"),
                        ("bench_policies_sweep_pl", "Every draft-length policy on prompt "
                                                    "lookup at batch 1, 4 and 16, Spec-Bench "
                                                    "(2 questions per category; issue 23)"),
                        ("bench_policies_sweep_batched", "Every draft-length policy on the "
                                                         "EAGLE-3 head at batch 4 and 16, "
                                                         "Spec-Bench (2 questions per "
                                                         "category; issue 23)"),
                        ("bench_policies_step_cost_b1", "The heads at batch 1: fixed lengths "
                                                        "against adaptive and smartspec with "
                                                        "the step priced as timed in the "
                                                        "decode loop, Spec-Bench (2 questions "
                                                        "per category; issue 23)"),
                        ("bench_policies_default_b1", "The heads at batch 1: fixed k = 3 (the "
                                                      "default) against adaptive with measured "
                                                      "costs, Spec-Bench (1 question per "
                                                      "category; issue 23)"),
                        ("bench_policies_default_batched", "The model-based drafters' default "
                                                           "policy above batch 1 (adaptive, "
                                                           "plain decoding where no draft can "
                                                           "pay) against fixed k = 3, "
                                                           "Spec-Bench (1 question per "
                                                           "category), batch 4 and 16 (issue "
                                                           "23)"),
                        ("bench_eagle_lookup_orders", "eagle_lookup with one source per "
                                                      "lookup match order, against eagle, "
                                                      "Spec-Bench, 1 question per category, "
                                                      "3 repeats"),
                        ("bench_eagle_lookup_scout", "eagle_lookup (the EAGLE-3 head beside "
                                                     "prompt lookup; one lookup source for "
                                                     "both orders) against eagle, Spec-Bench, "
                                                     "1 question per category (a scouting run)"),
                        ("bench_eagle_w8a8_builtin", "EAGLE-3 heads: int8 products "
                                                     "(quantize=w8a8), built-in prompts, "
                                                     "batch 1, 3 repeats"),
                        ("bench_heads_gpu6_int8_specbench", "EAGLE-3 heads: int8 products "
                                                            "(quantize=w8a8) and a 24,576-token "
                                                            "vocabulary (g6), Spec-Bench, 1 "
                                                            "question per category"),
                        ("bench_heads_gpu5_specbench", "EAGLE-3 heads for SmolLM2: g3 (shipped "
                                                       "until 2026-11-27), g4 and g5 (trained on "
                                                       "the Magpie corpus too; g5 shipped), "
                                                       "Spec-Bench, 1 question per category"),
                        ("bench_heads_gpu3_specbench", "EAGLE-3 heads for SmolLM2: g2 and g3 (the "
                                                       "second GPU session's, shipped until "
                                                       "2026-11-27), Spec-Bench, "
                                                       "1 question per category"),
                        ("bench_heads_gpu_specbench", "EAGLE-3 heads for SmolLM2: the CPU-trained "
                                                      "one (ship) and the two GPU runs (g1, g2), "
                                                      "Spec-Bench, 1 question per category"),
                        ("bench_heads_gpu_indist", "The same heads on prompts of the training "
                                                   "pool: 5 trained on (seen), 5 never answered "
                                                   "(unseen)"),
                        ("bench_policies_eagle_gpu", "Draft-length policies on the GPU-trained "
                                                     "EAGLE-3 head (shipped 2026-11-26), "
                                                     "built-in prompts, batch 1"),
                        ("bench_stand_math", "STAND: 8 samples per question at temperature "
                                             "0.7, 20 math questions, samples one after "
                                             "another (batch 1)"),
                        ("bench_policies_eagle", "Draft-length policies on the CPU-trained "
                                                 "EAGLE-3 head (shipped until 2026-11-26), "
                                                 "built-in prompts, batch 1"),
                        ("bench_policies_eagle_b4", "Draft-length policies on the CPU-trained "
                                                    "EAGLE-3 head (shipped until 2026-11-26), "
                                                    "built-in prompts, batch 4"),
                        ("bench_policies_eagle_sdpp", "SpecDec++ against fixed k = 1 after "
                                                      "its stop rule's fix, batch 1"),
                        ("bench_hydra_int8", "The Hydra++ head stored as int8 rows (shipped "
                                             "2026-11-28) against its bfloat16 file, "
                                             "Spec-Bench, 1 question per category"),
                        ("bench_spec_bench_heads_mh", "Medusa-1 and Hydra++ heads on Spec-Bench "
                                                      "(10 questions per category, 128 tokens; "
                                                      "trained on an H200, shipped 2026-11-26)"),
                        ("bench_heads_mh_specbench", "Medusa-1 and Hydra++ heads: draft lengths "
                                                     "and a tree, Spec-Bench, 1 question per "
                                                     "category, 96 tokens"),
                        ("bench_policies_spec_bench_eagle", "Draft-length policies on Spec-Bench "
                                                            "at batch 1, 4 and 16 (the shipped "
                                                            "EAGLE-3 head; issue 23)"),
                        ("bench_policies_overhead_b16", "Cost-aware policies counting a "
                                                        "drafting step's fixed overhead, "
                                                        "Spec-Bench (1 question per "
                                                        "category), batch 16 (issue 23)"),
                        ("bench_policies_overhead", "Cost-aware policies counting a "
                                                    "drafting step's fixed overhead, "
                                                    "Spec-Bench (1 question per category), "
                                                    "batch 1 and 4 (issue 23)"),
                        ("bench_policies_idle", "Draft-length policies with idle steps "
                                                "(a step drafting nothing costs a plain "
                                                "step), Spec-Bench (1 question per "
                                                "category), batch 1 and 4 (issue 23)"),
                        ("bench_policies_draft_cost", "Cost-aware policies with the "
                                                      "drafter's measured cost counted, "
                                                      "Spec-Bench (1 question per category), "
                                                      "batch 1 and 4 (issue 23)"),
                        ("bench_spec_bench_eagle1", "An EAGLE-1 head trained on this 2-core "
                                                    "CPU (56 minutes), int8 products, on "
                                                    "Spec-Bench (10 questions per category, "
                                                    "128 tokens)"),
                        ("bench_spec_bench_heads_w8a8", "The shipped EAGLE-3 head with int8 "
                                                        "products (quantize=w8a8, the CPU "
                                                        "default since 2026-11-28) on "
                                                        "Spec-Bench (10 questions per "
                                                        "category, 128 tokens)"),
                        ("bench_spec_bench_heads_gpu5", "Trained head drafters on Spec-Bench (10 "
                                                        "questions per category, 128 tokens; the "
                                                        "gpu5 head, shipped)"),
                        ("bench_spec_bench_heads_gpu3", "Trained head drafters on Spec-Bench (10 "
                                                        "questions per category, 128 tokens; the "
                                                        "gpu3 head, shipped until 2026-11-27)"),
                        ("bench_spec_bench_heads_gpu", "Trained head drafters on Spec-Bench (10 "
                                                       "questions per category, 128 tokens; the "
                                                       "gpu2 head)"),
                        ("bench_spec_bench_heads", "Trained head drafters on Spec-Bench (10 "
                                                   "questions per category, 128 tokens; the "
                                                   "first CPU-trained head)"),
                        ("bench_builtin", "Speculative methods on the built-in prompts"),
                        ("bench_trees", "Token trees vs chains vs plain decoding (built-in "
                                        "prompts)"),
                        ("bench_spec_bench_full", "Spec-Bench full question file (480 "
                                                  "questions), every method, 128 tokens"),
                        ("bench_spec_bench", "Spec-Bench subset (10 questions per category, "
                                             "64 tokens)"),
                        ("bench_builtin_w8a8", "Speculative methods on the built-in prompts, "
                                               "w8a8 target (`--quantize w8a8`)"),
                        ("bench_builtin_pl", "Prompt lookup on the built-in prompts, float32, "
                                             "against plain decoding"),
                        ("bench_builtin_ngram", "The ngram drafter (suffix + prompt lookup + "
                                                "token recycling) on the built-in prompts"),
                        ("bench_builtin_del", "DEL on the built-in prompts: dynamic exit "
                                              "layer and length against the fixed early exit "
                                              "(SmolLM2-135M, not LayerSkip-trained)"),
                        ("bench_builtin_sssd", "SSSD on the built-in prompts: the shipped "
                                               "datastore with the machine's budget, without "
                                               "the budget, and the request's text alone"),
                        ("bench_spec_bench_model_free_8", "Model-free drafters on "
                         "Spec-Bench, eighth run: the seventh's settings after the verify "
                         "forward began writing the cache in place (2026-12-05), 130 "
                         "questions, 2 repeats"),
                        ("bench_spec_bench_model_free_7", "Model-free drafters on "
                         "Spec-Bench, seventh run: `ngram` with its sources since "
                         "2026-12-04 (suffix, prompt lookup, sssd) against prompt lookup, "
                         "130 questions, 2 repeats"),
                        ("bench_spec_bench_model_free_6_behind", "Model-free drafters on "
                         "the three Spec-Bench categories where `ngram` trailed, with its "
                         "new default sources (30 questions, 2 repeats)"),
                        ("bench_spec_bench_model_free_5_behind", "Model-free drafters on "
                         "the three Spec-Bench categories where `ngram` trailed, after the "
                         "datastore's device copy left the timed prefill (30 questions, 2 "
                         "repeats)"),
                        ("bench_spec_bench_model_free_4", "Model-free drafters on Spec-Bench, "
                                                          "fourth run: prompt lookup and "
                                                          "`ngram`, 2 repeats, after the "
                                                          "drafter plan hook"),
                        ("bench_spec_bench_model_free_3", "Model-free drafters on Spec-Bench "
                                                          "(10 questions per category, 128 "
                                                          "tokens)"),
                        ("bench_spec_bench_model_free_2", "Model-free drafters on Spec-Bench, "
                                                          "second run, stopped at 18 "
                                                          "questions: `ngram` without the "
                                                          "SSSD datastore source"),
                        ("bench_spec_bench_model_free", "Model-free drafters on Spec-Bench, "
                                                        "first run, stopped: the earlier "
                                                        "`ngram` (10 questions per category, "
                                                        "128 tokens)")):
        f = RES / f"{name}.json"
        if f.exists():
            png = f"{name}.png" if (RES / f"{name}.png").exists() else None
            lines += bench_section(json.loads(f.read_text()), title, png)
    before, after = RES / "bench_issue20_before.json", RES / "bench_issue20_after.json"
    if before.exists() and after.exists():
        tok = RES / "issue20_outputs.json"
        lines += refactor_section(json.loads(before.read_text()), json.loads(after.read_text()),
                                  "Extension-point refactor (issue 20): plain decoding and "
                                  "prompt lookup before and after, built-in prompts",
                                  json.loads(tok.read_text()) if tok.exists() else None)
    for f in sorted(RES.glob("replay_prompt_lookup*.json")):
        lines += replay_section(json.loads(f.read_text()))
    for f in sorted(RES.glob("verify_curve*.json")):
        png = f"{f.stem}.png" if (RES / f"{f.stem}.png").exists() else None
        lines += verify_curve_section(json.loads(f.read_text()), png, f.stem)
    f = RES / "mesh_cpu.json"
    if f.exists():
        lines += mesh_section(json.loads(f.read_text()))
    f = RES / "sweep_self_spec.json"
    if f.exists():
        lines += sweep_section(json.loads(f.read_text()))
    for f in sorted(RES.glob("bench_tree_attention*.json")):
        lines += kernel_section(json.loads(f.read_text()), f.stem)
    notes = ROOT / "docs" / "benchmarks_notes.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    (ROOT / "docs" / "benchmarks.md").write_text("\n".join(lines))
    print(f"wrote {ROOT / 'docs' / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
