"""All 480 Spec-Bench questions, every method, transformers beside them, journaled so that the
run (10-11 hours on a 2-core CPU) goes on over several sessions: add ``--time-limit MINUTES``.
scripts/spec_bench_full.sh runs these settings from a worktree pinned to one engine commit."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "early_exit", "layer_skip", "draft_model"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        max_new_tokens=128,
        repeats=1,
        peer="hf",
        journal="docs/results/spec_bench_full.journal.jsonl",
        output="docs/results/bench_spec_bench_full.json",
        plot="docs/results/bench_spec_bench_full.png",
    )
