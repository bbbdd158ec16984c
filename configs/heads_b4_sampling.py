"""The shipped Medusa-1 and Hydra++ heads at batch 4 when sampling (temperature 0.7), under
their batch-4 default with no option given, as resolved since 2026-12-07 (fifty-first
session): `adaptive` with `idle_decay` 0.995 and `min_gain` 1.1, starting from the first-token
acceptance each head file records at temperature 0.7 (Medusa-1 0.236 over Spec-Bench at batch
1; Hydra++ from configs/spec_bench_hydra_sampling.py) where sampled runs had started from the
even prior. The results record the options each method resolved to (the prior among them),
so they keep their meaning if the default moves. A check of that path end to end with the
shipped files, as a scouting run: the 52 questions of configs/ngram_b4.py (each category's
four as one batch of 4), 64 new tokens, float32, a 1,024-position cache, two repeats, against
plain sampling of the same batch. Journaled: `specjax bench --config
configs/heads_b4_sampling.py --time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "medusa", "hydra"),
        method_args={},
        temperature=0.7,
        repeats=2,
        journal="docs/results/heads_b4_sampling.journal.jsonl",
        output="docs/results/bench_heads_b4_sampling.json",
        plot="docs/results/bench_heads_b4_sampling.png",
    )
