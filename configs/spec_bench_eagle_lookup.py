"""The EAGLE head alone and beside prompt lookup (`eagle_lookup`) against plain decoding on
Spec-Bench: issue 21's benchmark (10 questions per category, 128 new tokens, greedy, batch 1,
float32), the shipped EAGLE-3 head with int8 products (the CPU default) in both. Journaled:
rerun the same command to continue (`--time-limit MINUTES`)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", "eagle", "eagle_lookup"),
        method_args={"eagle": {"k": 3}, "eagle_lookup": {"k": 3}},
        journal="docs/results/spec_bench_eagle_lookup.journal.jsonl",
        output="docs/results/bench_spec_bench_eagle_lookup.json",
        plot="docs/results/bench_spec_bench_eagle_lookup.png",
    )
