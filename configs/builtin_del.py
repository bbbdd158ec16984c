"""DEL (dynamic exit layer and length) against a fixed early exit and plain decoding on the
built-in prompts (SmolLM2-135M, not LayerSkip-trained: its early layers rarely agree with the
last, so this measures whether DEL backs off where no exit pays, and what that costs)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "early_exit", "del"),
        method_args={"early_exit": {"k": 3}, "del": {"k": 3}},
        prompts="builtin",
        max_new_tokens=64,
        repeats=1,
        output="docs/results/bench_builtin_del.json",
        plot="docs/results/bench_builtin_del.png",
    )
