"""Issue 21: the shipped EAGLE-3 head's chain against EAGLE-2 dynamic trees sized to the verify
buckets, at batch 1, since the in-place verify forward (2026-12-05) made long blocks cheaper.

The chain of k = 3 verifies a 4-token block; a dynamic tree of 3 nodes (the 3 best of the
candidates by cumulative draft log-probability: the chain is one such tree) verifies the same
block, and one of 7 nodes the 8-token block. Two questions per Spec-Bench category (26
prompts), 128 new tokens, greedy, float32, every method against plain decoding in the same
run. Journaled: `specjax bench --config configs/eagle_trees_b1.py`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {
        "eagle": {"k": 3},
        "eagle@dyn3w2": {"tree": "dynamic:width=2,nodes=3,depth=3"},
        "eagle@dyn3w3": {"tree": "dynamic:width=3,nodes=3,depth=3"},
        "eagle@dyn7": {"tree": "dynamic:width=3,nodes=7,depth=4"},
    }
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        limit=2,
        journal="docs/results/eagle_trees_b1.journal.jsonl",
        output="docs/results/bench_eagle_trees_b1.json",
        plot="docs/results/bench_eagle_trees_b1.png",
    )
