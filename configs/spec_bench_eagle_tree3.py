"""Issue 21's benchmark (configs/spec_bench_heads.py: 10 questions per Spec-Bench category,
130 in all, 128 new tokens, greedy, batch 1, float32) for the shipped EAGLE-3 head as the
chain of k = 3 and as the EAGLE-2 dynamic tree of 3 nodes (width 2, depth 3: the 3 best of
the candidates by cumulative draft log-probability, verified in the chain's 4-token block),
which led the chain by 5% on 26 prompts (configs/eagle_trees_b1.py). Journaled: rerun the
same command to continue (`--time-limit MINUTES`)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {"k": 3},
            "eagle@tree3": {"tree": "dynamic:width=2,nodes=3,depth=3"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/spec_bench_eagle_tree3.journal.jsonl",
        output="docs/results/bench_spec_bench_eagle_tree3.json",
        plot="docs/results/bench_spec_bench_eagle_tree3.png",
    )
