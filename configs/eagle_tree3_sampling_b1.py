"""Issue 21 / 23 (a scouting run): the shipped EAGLE-3 head when sampling (temperature 0.7) at
batch 1, where `eagle` keeps its chain of k = 3, against the 3-node EAGLE-2 dynamic tree it
drafts by default when greedy (`dynamic:width=2,nodes=3,depth=3`, the same 4-token verify
block; its candidates are deterministic, the head's best by cumulative log-probability, so
it is verified by the lossless rule for deterministic candidates). Two questions per
Spec-Bench category (26 prompts), 128 new tokens, float32, one sample each, against plain
sampling in the same run. Journaled: `specjax bench --config configs/eagle_tree3_sampling_b1.py
--time-limit MINUTES`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    # the methods of the greedy 130-question run, sampled on 2 questions per category
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_eagle_tree3.py")),
        limit=2,
        temperature=0.7,
        journal="docs/results/eagle_tree3_sampling_b1.journal.jsonl",
        output="docs/results/bench_eagle_tree3_sampling_b1.json",
        plot="docs/results/bench_eagle_tree3_sampling_b1.png",
    )
