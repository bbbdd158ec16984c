"""`ngram` and prompt lookup at batch 4 under their defaults since 2026-12-05, when the
model-free methods above batch 1 price verify blocks by whole loop steps against a plain
step (`specjax.cost_curves.measured_cost(..., in_loop=True)`, measured and cached on first
use) instead of a lone forward against a one-token forward: the run of configs/ngram_b4.py
(52 Spec-Bench questions, each category's four as one batch of 4, 64 new tokens, float32, a
1,024-position cache). Given the same kind of prices by hand
(configs/ngram_b4_in_loop_cost.py), `ngram` ran at 0.97x and prompt lookup at 1.00x, where
the old pricing gave 0.90x and 0.95x. Journaled: `specjax bench --config
configs/ngram_b4_loop_priced.py --time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        journal="docs/results/ngram_b4_loop_priced.journal.jsonl",
        output="docs/results/bench_ngram_b4_loop_priced.json",
        plot="docs/results/bench_ngram_b4_loop_priced.png",
    )
