"""The model-free drafters against plain decoding on Spec-Bench (issue 24): 10 questions per
category (130), 128 new tokens, greedy, batch 1, float32. Prompt lookup with its defaults and
Token Recycling with its CPU tree (levels:4.3.2.1). Journaled: rerun the same command to
continue."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "token_recycling"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/spec_bench_model_free.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free.json",
        plot="docs/results/bench_spec_bench_model_free.png",
    )
