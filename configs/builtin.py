"""Every method on the built-in prompts, with Hugging Face transformers beside them."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "early_exit", "layer_skip", "draft_model"),
        prompts="builtin",
        max_new_tokens=128,
        repeats=2,
        peer="hf",
        output="docs/results/bench_builtin.json",
        plot="docs/results/bench_builtin.png",
    )
