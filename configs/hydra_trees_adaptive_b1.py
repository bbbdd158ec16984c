"""Issue 21 / 23 (a scouting run): the shipped Hydra++ heads under their batch-1 default
(`adaptive` chains of up to 3 tokens, `idle_decay` 0.995) against 3-node trees in the same
4-token verify block under the same policy, as Medusa-1's default tree since 2026-12-07
(configs/spec_bench_medusa_tree3.py): the static tree of the two best first tokens and the
best second after the first (`fixed:0,1,0.0`, depth 2), and the EAGLE-2 dynamic tree of width
2, depth 3 (at a fixed length level with the default, configs/heads_trees_b1.py). `adaptive`
cuts a tree at the depth that pays, each depth priced by its step timed in the decode loop.
Two questions per Spec-Bench category (26 prompts), 128 new tokens, greedy, float32, against
plain decoding in the same run. Journaled: `specjax bench --config
configs/hydra_trees_adaptive_b1.py --time-limit MINUTES`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    adaptive = {"policy": "adaptive", "idle_decay": 0.995}
    args = {
        "hydra": {},
        "hydra@static3": {"tree": "fixed:0,1,0.0", **adaptive},
        "hydra@dynamic3": {"tree": "dynamic:width=2,nodes=3,depth=3", **adaptive},
    }
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        limit=2,
        journal="docs/results/hydra_trees_adaptive_b1.journal.jsonl",
        output="docs/results/bench_hydra_trees_adaptive_b1.json",
        plot="docs/results/bench_hydra_trees_adaptive_b1.png",
    )
