"""The EAGLE-3 head trained on the Magpie corpus too (`gpu5`, shipped 2026-11-27, fourth GPU
session) against plain decoding on Spec-Bench: configs/spec_bench_heads.py (10 questions per
category, 128 new tokens, greedy, batch 1, float32; a chain of k = 3 and an EAGLE-2 dynamic
tree of 7 nodes; issue 21's benchmark) with a journal and results of its own. Journaled: rerun
the same command to continue (`--time-limit MINUTES` per session)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        journal="docs/results/spec_bench_heads_gpu5.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_gpu5.json",
        plot="docs/results/bench_spec_bench_heads_gpu5.png",
    )
