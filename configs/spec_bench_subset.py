"""Plain decoding and prompt lookup on 10 Spec-Bench questions per category (64 tokens)."""

from specjax.experiment import BenchConfig

QUESTIONS = "spec_bench:../shared/data/spec_bench/question.jsonl"


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup"),
        prompts=QUESTIONS,
        limit=10,
        max_new_tokens=64,
        repeats=1,
        peer="hf",
        output="docs/results/bench_spec_bench.json",
        plot="docs/results/bench_spec_bench.png",
    )
