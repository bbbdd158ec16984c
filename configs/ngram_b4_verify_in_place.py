"""`ngram` and prompt lookup at batch 4 under their defaults after 2026-12-05's change to the
decode loop: the verify forward writes the target's cache in place, in one zero-or-one-trip
loop per block size, instead of deferring the write past a `lax.switch` (a 2-token block's
step fell from 1.40 to 1.14 plain steps at batch 4 on the project's CPU,
scripts/step_cost_vs_plain.py). The run of configs/ngram_b4_loop_priced.py (52 Spec-Bench
questions, each category's four as one batch of 4, 64 new tokens, float32, a 1,024-position
cache), whose prices (the in-loop probe, re-measured under its new key) now come from the
cheaper steps. Journaled: `specjax bench --config configs/ngram_b4_verify_in_place.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        journal="docs/results/ngram_b4_verify_in_place.journal.jsonl",
        output="docs/results/bench_ngram_b4_verify_in_place.json",
        plot="docs/results/bench_ngram_b4_verify_in_place.png",
    )
