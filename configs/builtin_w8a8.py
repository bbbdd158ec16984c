"""Prompt lookup against plain decoding on the built-in prompts, both on a w8a8 target."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        quantize="w8a8",
        methods=("ar", "prompt_lookup"),
        prompts="builtin",
        max_new_tokens=128,
        repeats=3,
        output="docs/results/bench_builtin_w8a8.json",
        plot="docs/results/bench_builtin_w8a8.png",
    )
