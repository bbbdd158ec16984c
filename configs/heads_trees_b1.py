"""Issue 21 / 23 (a scouting run): the shipped Medusa-1 and Hydra++ heads under their batch-1
default (`adaptive` chains of up to 3 tokens) against 3-node trees in the same 4-token verify
block at a fixed length (Hydra++: the EAGLE-2 dynamic tree of width 2, depth 3, the EAGLE-3
head's batch-1 greedy default since 2026-12-07; Medusa-1, whose heads draft static trees: the
two best first tokens and the best second after the first). Two questions per Spec-Bench
category (26 prompts), 128 new tokens, greedy, float32, against plain decoding in the same run.
Journaled: `specjax bench --config configs/heads_trees_b1.py --time-limit MINUTES`, rerun to
continue. Since 2026-12-07 Medusa-1's greedy batch-1 default is the 3-node tree under
`adaptive`: a fresh rerun needs `--method-arg medusa.k=3` for the chain recorded here."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {
        "hydra": {},
        "hydra@tree3": {"tree": "dynamic:width=2,nodes=3,depth=3", "policy": "fixed"},
        "medusa": {},
        "medusa@tree3": {"tree": "fixed:0,1,0.0", "policy": "fixed"},
    }
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        limit=2,
        journal="docs/results/heads_trees_b1.journal.jsonl",
        output="docs/results/bench_heads_trees_b1.json",
        plot="docs/results/bench_heads_trees_b1.png",
    )
