"""The shipped EAGLE-3 head (`gpu5`) with its products in int8 (`quantize=w8a8`, the CPU
default since 2026-11-28) against plain decoding on Spec-Bench: issue 21's benchmark (10
questions per category, 128 new tokens, greedy, batch 1, float32) for the chain of k = 3, the
float head's run beside it (configs/spec_bench_heads_gpu5.py: 1.40x, tau 1.92) being the
comparison. Journaled: rerun the same command to continue (`--time-limit MINUTES`)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", "eagle"),
        method_args={"eagle": {"k": 3, "quantize": "w8a8"}},
        journal="docs/results/spec_bench_heads_w8a8.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_w8a8.json",
        plot="docs/results/bench_spec_bench_heads_w8a8.png",
    )
