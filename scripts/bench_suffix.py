"""The repeated-task workload of issue 24: suffix decoding against plain decoding and prompt
lookup where earlier answers come back.

Three parts, run in this order as one stream of requests (batch 1, greedy, SmolLM2-135M):
  round1  ``--num-tasks`` tasks (Spec-Bench questions, spread over its categories);
  round2  the same tasks asked again with a small change each (a polite prefix, a closing
          remark, a reworded instruction: see ``CHANGES``);
  edit    a multi-turn conversation that keeps editing one program (``EDITS``): every turn
          sends the whole history, the model's earlier answers included.
Every method runs on every request in turn (interleaved), outputs are checked identical to
plain decoding, compile time is excluded (a request whose program was freshly compiled is
timed a second time; the suffix drafter's cache learns only after both runs, explicitly).
The suffix drafter's global cache holds every earlier answer of the stream.

Other methods that learn every answer (``ngram``'s suffix cache and datastore) learn inside the
drafter, once per request: a run timed again starts from the drafter's state before the first
(its ``snapshot`` / ``restore``), so no timed run drafts its own answer.

Resumable: each finished request is appended to ``JOURNAL/records.jsonl`` (with its prompt's
token ids and plain decoding's prefill time: ``scripts/replay_suffix_bound.py`` reads them) and
the suffix cache saved to ``JOURNAL/suffix_cache.npz``; the same command continues where it
stopped (``--time-limit`` minutes per invocation), the other learning methods relearning the
recorded answers.

    python scripts/bench_suffix.py --tasks spec_bench:../shared/data/spec_bench/question.jsonl \\
        --journal runs/suffix_workload --out docs/results/suffix_workload.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CHANGES = (
    lambda t: "Please help me with this. " + t,
    lambda t: t + " Thank you!",
    lambda t: "Question: " + t,
    lambda t: t.rstrip() + "\n\nI am asking again because I lost your previous answer.",
)
EDIT_START = ("Write a Python function `word_counts(text)` that returns a dictionary mapping "
              "each word of the text to the number of times it occurs.")
EDITS = (
    "Add a docstring to the function.",
    "Make the counting ignore upper and lower case.",
    "Add type hints to the function.",
    "Rename the function to `count_words`.",
    "Make it ignore punctuation at the start and end of each word.",
    "Add a short example of calling the function at the end.",
    "Sort the returned dictionary by count, highest first.",
)


def pick_tasks(items: list[dict], n: int) -> list[dict]:
    """``n`` items spread over the categories (round robin, in file order)."""
    by_cat: dict[str, list[dict]] = {}
    for it in items:
        by_cat.setdefault(it["category"], []).append(it)
    out, i = [], 0
    while len(out) < n and any(i < len(v) for v in by_cat.values()):
        for v in by_cat.values():
            if i < len(v) and len(out) < n:
                out.append(v[i])
        i += 1
    return out


def summarize(records: list[dict], methods: list[str]) -> dict:
    parts = {}
    for part in ("round1", "round2", "edit", "all"):
        recs = [r for r in records if part == "all" or r["part"] == part]
        if not recs:
            continue
        row = {"requests": len(recs)}
        ar_s = sum(r["runs"]["ar"]["wall_s"] for r in recs)
        ar_tok = sum(r["runs"]["ar"]["new_tokens"] for r in recs)
        row["ar_tok_s"] = ar_tok / ar_s
        for m in methods:
            if m == "ar":
                continue
            runs = [r["runs"][m] for r in recs]
            tok, wall = sum(x["new_tokens"] for x in runs), sum(x["wall_s"] for x in runs)
            row[f"{m}_tok_s"] = tok / wall
            row[f"{m}_speedup"] = (tok / wall) / row["ar_tok_s"]
            row[f"{m}_median_speedup"] = statistics.median(
                r["runs"]["ar"]["wall_s"] / r["runs"][m]["wall_s"] for r in recs)
            row[f"{m}_tau"] = tok / max(1, sum(x["forwards"] for x in runs))
            row[f"{m}_identical"] = sum(x["identical"] for x in runs)
            if m.startswith("suffix"):
                steps = sum(x["suffix_steps"] for x in runs)
                row[f"{m}_hit_rate"] = sum(x["suffix_hits"] for x in runs) / max(1, steps)
                row[f"{m}_global_hit_rate"] = (sum(x["suffix_global_hits"] for x in runs)
                                               / max(1, steps))
        parts[part] = row
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", required=True, help="prompt spec, e.g. spec_bench:FILE")
    ap.add_argument("--num-tasks", type=int, default=40)
    ap.add_argument("--turns", type=int, default=len(EDITS) + 1,
                    help="turns of the editing conversation (at most %d)" % (len(EDITS) + 1))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", nargs="+", default=["ar,prompt_lookup,suffix"],
                    help="method names, comma-separated, or specs name:key=value,... one per "
                         "argument (';' inside a value stands for a comma), e.g. "
                         "suffix:nodes=8")
    ap.add_argument("--journal", default="runs/suffix_workload")
    ap.add_argument("--out", default="docs/results/suffix_workload.json")
    ap.add_argument("--time-limit", type=float, default=None, help="minutes for this call")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cache-lens", default="512,1024,2048",
                    help="cache lengths to use (the smallest that fits each request): few "
                         "distinct shapes, so few compiles")
    a = ap.parse_args()
    if not 1 <= a.turns <= len(EDITS) + 1:
        ap.error(f"--turns must be in 1..{len(EDITS) + 1}")

    from tqdm import tqdm

    from specjax import methods as mlib
    from specjax.bench.machine import machine_description, utc_now
    from specjax.bench.prompts import load_prompts
    from specjax.bench.timing import timed_generation
    from specjax.drafters.base import learns_across_calls
    from specjax.drafters.suffix import SuffixCache
    from specjax.engine import generate
    from specjax.models.loaders import load

    names = mlib.split_method_specs(a.methods)
    if "ar" not in names:
        names = ["ar"] + names
    lm = load(a.model)
    tok = lm.tokenizer
    tasks = pick_tasks(load_prompts(a.tasks, None, None), a.num_tasks)
    jdir = Path(a.journal)
    jdir.mkdir(parents=True, exist_ok=True)
    rec_path, cache_path = jdir / "records.jsonl", jdir / "suffix_cache.npz"
    cache_lens = sorted(int(x) for x in a.cache_lens.split(","))
    header = {"tasks": [t["id"] for t in tasks], "turns": a.turns, "methods": names,
              "cache_lens": cache_lens,
              "max_new_tokens": a.max_new_tokens, "model": a.model,
              "numerics": lm.model.numerics}
    records = []
    if rec_path.exists():
        lines = rec_path.read_text().splitlines()
        if lines and json.loads(lines[0]) != header:
            sys.exit(f"{rec_path} was written by another configuration; use another --journal")
        records = [json.loads(x) for x in lines[1:]]
    else:
        rec_path.write_text(json.dumps(header) + "\n")
    cache = SuffixCache.load(cache_path) if cache_path.exists() and records else SuffixCache()
    specs = {m: mlib.parse_method_spec(m) for m in names}
    built = {m: mlib.build(name, lm, {**args, "cache": cache, "learn": "false"}
                           if mlib.base_method(name) == "suffix" else args)
             for m, (name, args) in specs.items()}
    # methods other than `suffix` (whose cache this script keeps and saves) that learn from
    # every answer: a resumed journal teaches them the recorded answers again
    learners = [m for m in names if mlib.base_method(specs[m][0]) != "suffix"
                and learns_across_calls(built[m][0])]
    if records and learners:
        if any("prompt_ids" not in r for r in records):
            sys.exit(f"{rec_path} has no prompt ids (written before 2026-12-06): "
                     f"{', '.join(learners)} cannot relearn its answers; use another --journal")
        for m in learners:  # each its own answers, as it learnt them
            built[m][0].relearn([r["prompt_ids"] for r in records],
                                [r["runs"][m]["tokens"] for r in records])
    plan = ([("round1", i, t["prompt"]) for i, t in enumerate(tasks)]
            + [("round2", i, CHANGES[i % len(CHANGES)](t["prompt"]))
               for i, t in enumerate(tasks)]
            + [("edit", i, None) for i in range(a.turns)])
    history: list[dict] = []
    for r in records:  # the conversation so far, from the recorded answers
        if r["part"] == "edit":
            history += [{"role": "user", "content": r["text"]},
                        {"role": "assistant", "content": tok.decode(r["runs"]["ar"]["tokens"])}]
    t_start = time.perf_counter()
    bar = tqdm(total=len(plan), initial=len(records), desc="requests", unit="req")
    for part, i, text in plan[len(records):]:
        if a.time_limit is not None and time.perf_counter() - t_start > 60 * a.time_limit:
            print(f"time limit reached: {len(records)} of {len(plan)} requests done; run the "
                  "same command again to continue")
            break
        if part == "edit":
            text = EDIT_START if i == 0 else EDITS[i - 1]
            prompt = tok.encode(tok.apply_chat_template(
                history + [{"role": "user", "content": text}]), add_bos=False)
        else:
            prompt = tok.encode_chat(text)
        fits = [c for c in cache_lens if c >= len(prompt) + a.max_new_tokens]
        if not fits:
            sys.exit(f"request {part} {i}: {len(prompt)} prompt tokens + {a.max_new_tokens} "
                     f"do not fit the largest --cache-lens {cache_lens[-1]}")
        runs = {}
        for m in names:
            d, pol, ver = built[m]

            def gen():
                return generate(lm.model, [prompt], max_new_tokens=a.max_new_tokens,
                                cache_len=fits[0], eos_ids=tok.eos_ids, drafter=d, policy=pol,
                                verifier=ver)

            # a new program runs again, a learning drafter (`ngram`) from its state before
            r = timed_generation(gen, d)
            ex = r.extra or {}
            runs[m] = {"tokens": r.tokens[0], "new_tokens": len(r.tokens[0]),
                       "wall_s": r.wall_s[0], "prefill_s": r.prefill_s[0],
                       "forwards": r.target_forwards[0],
                       "identical": r.tokens[0] == runs["ar"]["tokens"] if m != "ar" else True}
            for key in ("drafted", "accepted", "suffix_steps", "suffix_hits",
                        "suffix_global_hits"):
                if key in ex:
                    runs[m][key] = ex[key][0]
        for m in names:
            if mlib.base_method(specs[m][0]) == "suffix":  # the answer joins the cache (once)
                cache.add(runs[m]["tokens"])
                break
        cache.save(cache_path)
        rec = {"part": part, "index": i, "text": text, "prompt_tokens": len(prompt),
               "prompt_ids": [int(t) for t in prompt], "runs": runs, "finished_at": utc_now()}
        records.append(rec)
        with rec_path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        if part == "edit":
            history += [{"role": "user", "content": text},
                        {"role": "assistant", "content": tok.decode(runs["ar"]["tokens"])}]
        bar.update(1)
    bar.close()
    out = {"command": " ".join(["python"] + sys.argv), "date": utc_now(),
           "machine": machine_description(), **header,
           "complete": len(records) == len(plan), "requests_done": len(records),
           "requests_total": len(plan), "cache": repr(cache),
           "summary": summarize(records, names)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
