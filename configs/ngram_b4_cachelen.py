"""configs/ngram_b4_finish_r2.py after the in-loop verify curve began to be timed at the
run's cache length (2026-12-05: 1,024 positions here, `specjax.buckets.probe_cache_length`;
192 before): `ngram` and prompt lookup at their defaults against plain decoding at batch 4,
the 52 Spec-Bench questions of configs/ngram_b4.py, each category's four decoded twice as one
batch of 4. Journaled: `specjax bench --config configs/ngram_b4_cachelen.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4_finish_r2.py")),
        journal="docs/results/ngram_b4_cachelen.journal.jsonl",
        output="docs/results/bench_ngram_b4_cachelen.json",
        plot="docs/results/bench_ngram_b4_cachelen.png",
    )
