"""Issue 23: the EAGLE-3 head's default policy (`adaptive`, the pooled finish rule) at
batch 4 with its step costs timed at the run's cache length (1,024 positions, since
2026-12-05; `specjax.draft_costs.probe_cache_length`) instead of the 256 positions the probe
used before, against the head's fixed k = 1 (the best fixed length of
configs/policies_eagle_b4_finish.py) and plain decoding of the same batch: the 52 Spec-Bench
questions of configs/ngram_b4.py (each category's four as one batch of 4), 64 new tokens,
greedy, float32, a 1,024-position cache, two repeats. Journaled: `specjax bench --config
configs/policies_eagle_b4_cachelen.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {}, "eagle@k1": {"k": 1, "policy": "fixed"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", *args),
        method_args=args,
        repeats=2,
        journal="docs/results/policies_eagle_b4_cachelen.journal.jsonl",
        output="docs/results/bench_policies_eagle_b4_cachelen.json",
        plot="docs/results/bench_policies_eagle_b4_cachelen.png",
    )
