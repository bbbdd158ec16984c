"""configs/ngram_b4_finish.py with two repeats: `ngram` and prompt lookup at batch 4 under
`ngram`'s batch choice by how soon the batch would finish (2026-12-05), the 52 Spec-Bench
questions of configs/ngram_b4.py, each category's four decoded twice as one batch of 4 (one
run per batch carried up to 25% of noise per category on the project's VM that day).
Journaled: `specjax bench --config configs/ngram_b4_finish_r2.py --time-limit MINUTES`,
rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4_finish.py")),
        repeats=2,
        journal="docs/results/ngram_b4_finish_r2.journal.jsonl",
        output="docs/results/bench_ngram_b4_finish_r2.json",
        plot="docs/results/bench_ngram_b4_finish_r2.png",
    )
