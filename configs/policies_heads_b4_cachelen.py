"""Issue 23: the Medusa-1 and Hydra++ heads' default policy above batch 1 (`adaptive`, the
pooled finish rule, `specjax.methods.BATCHED_DEFAULTS`) with their step costs timed at the run's
cache length (1,024 positions; `specjax.buckets.probe_cache_length`), against plain decoding
of the same batch: the 52 Spec-Bench questions of configs/ngram_b4.py (each category's four as
one batch of 4), 64 new tokens, greedy, float32, a 1,024-position cache, two repeats. The
robustness bar of issue 23 (no category below 0.97x) for the two heads at batch 4.
Journaled: `specjax bench --config configs/policies_heads_b4_cachelen.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "medusa", "hydra"),
        method_args={},
        repeats=2,
        journal="docs/results/policies_heads_b4_cachelen.journal.jsonl",
        output="docs/results/bench_policies_heads_b4_cachelen.json",
        plot="docs/results/bench_policies_heads_b4_cachelen.png",
    )
