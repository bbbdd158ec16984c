"""Prompt lookup (its defaults: adaptive policy with the built-in verify-cost curve) against
plain decoding on the built-in prompts, float32 target, 5 repeats: the engine issue's targets
(input-grounded prompts, summarisation and code editing, >= 2x; chat >= 0.95x)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup"),
        prompts="builtin",
        max_new_tokens=128,
        repeats=5,
        output="docs/results/bench_builtin_pl.json",
        plot="docs/results/bench_builtin_pl.png",
    )
