"""Prompt lookup on the built-in prompts (float32 target) with the adaptive policy's built-in
cost curve and with the curve measured by ``specjax bench --verify-curve``.

Recorded (2026-11-24) while the built-in curve was the older in-loop measurement; since then
the built-in curve is that measured curve, so a rerun compares a curve with itself unless
``docs/results/verify_curve.json`` is measured anew."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "prompt_lookup@curve"),
        method_args={"prompt_lookup@curve": {"cost": "docs/results/verify_curve.json"}},
        prompts="builtin",
        max_new_tokens=128,
        repeats=3,
        output="docs/results/bench_builtin_pl.json",
        plot="docs/results/bench_builtin_pl.png",
    )
