"""The model-free drafters against plain decoding on all 13 Spec-Bench categories (issue 24's
benchmark), eighth run: the seventh run's settings (configs/spec_bench_model_free_7.py:
prompt lookup and ``ngram`` at their defaults, the first 10 questions of each category, two
repeats, 128 new tokens, greedy, batch 1, float32 exact numerics) after 2026-12-05's change to
the decode loop, whose verify forward now writes the target's cache in place (cheaper
speculative steps: docs/benchmarks_notes.md, "The verify forward writes the cache in place
..."). Journaled: rerun the same command to continue (`--time-limit MINUTES` per session)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_7.py")),
        journal="docs/results/spec_bench_model_free_8.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free_8.json",
        plot="docs/results/bench_spec_bench_model_free_8.png",
    )
