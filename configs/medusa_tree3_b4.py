"""Issue 23: the shipped Medusa-1 heads at batch 4, where `medusa` keeps its chain default
(`adaptive` chains of up to 3 tokens, the pooled finish rule, `idle_decay` 0.995; given
explicitly so the record keeps its meaning if the default moves), against the 3-node static
tree it drafts by default at batch 1 when greedy (`fixed:0,1,0.0` under the same policy, each
depth priced by its step timed in the decode loop at batch 4), and plain decoding of the same
batch: the 52 Spec-Bench questions of configs/ngram_b4.py (each category's four as one batch
of 4), 64 new tokens, greedy, float32, a 1,024-position cache, two repeats (as
configs/policies_heads_b4_cachelen.py, where the chain barely drafted: 0.99x, first tokens
accepted 28%). Journaled: `specjax bench --config configs/medusa_tree3_b4.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"medusa@chain": {"policy": "adaptive", "idle_decay": 0.995},
            "medusa@tree3": {"tree": "fixed:0,1,0.0", "policy": "adaptive",
                             "idle_decay": 0.995}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", *args),
        method_args=args,
        repeats=2,
        journal="docs/results/medusa_tree3_b4.journal.jsonl",
        output="docs/results/bench_medusa_tree3_b4.json",
        plot="docs/results/bench_medusa_tree3_b4.png",
    )
