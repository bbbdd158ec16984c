"""Issue 23's policy benchmark on Spec-Bench, the shipped EAGLE-3 head: every registered
draft-length policy with the same drafter on the same prompts, interleaved, against plain
decoding, at batch 1 (per category: 2 questions per category, 26 prompts) and, over the same 26
prompts, at batch 4 and 16 (`--batch-sizes`: speedup against plain decoding of the same batch
size, tau and mean drafted length per batch size, and a panel of tokens/s against batch size).
Fixed k = 1..4 are the reference (the best fixed k in hindsight per batch size); the dynamic
policies draft up to k = 6. 64 new tokens, greedy, float32.

One static cache of 896 positions for every run (`cache_len`: the longest of the 26 prompts is
769 tokens with the chat template): each method compiles one decode loop per batch size instead
of one per prompt-length bucket (these prompts fall in 5 buckets; at ~40 s a compile and 14
methods that is ~47 min of compiling per batch size on a 2-core CPU instead of ~9). Every
run, plain decoding included, attends over the same 896 positions, so short prompts run slower
than with their own bucket; the ratios compare like with like.

`batch_table` is not in this run: its table is written by a profiling run of its own
(`--batch-table`); per-category figures exist at batch 1 only (a batch of 4 or 16 mixes the
categories). `adaptive` and `smartspec` run with `draft_cost=0`, as they did when this run
began (they count a measured draft cost by default since; configs/policies_draft_cost.py
measures that). Journaled: `specjax bench --config configs/policies_spec_bench_eagle.py
--time-limit MINUTES`, rerun the same command to continue."""

from specjax.experiment import BenchConfig

DYNAMIC = ("confidence", "adaptive", "specdec++", "heuristic", "dsde", "gammatune",
           "gammatune+", "smartspec", "pearl")


def get_config() -> BenchConfig:
    fixed = {f"eagle@k{k}": {"k": k, "policy": "fixed"} for k in (1, 2, 3, 4)}
    dynamic = {f"eagle@{p}": {"k": 6, "policy": p} for p in DYNAMIC}
    for p in ("adaptive", "smartspec"):  # as run: before draft costs were measured
        dynamic[f"eagle@{p}"]["draft_cost"] = 0
    return BenchConfig(
        methods=("ar", *fixed, *dynamic),
        method_args={**fixed, **dynamic},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=2,
        max_new_tokens=64,
        batch_sizes=(1, 4, 16),
        repeats=1,
        cache_len=896,
        journal="docs/results/policies_spec_bench_eagle.journal.jsonl",
        output="docs/results/bench_policies_spec_bench_eagle.json",
        plot="docs/results/bench_policies_spec_bench_eagle.png",
    )
