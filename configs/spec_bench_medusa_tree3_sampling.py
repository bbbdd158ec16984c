"""Issue 21 / 23: the shipped Medusa-1 heads when sampling (temperature 0.7) over the 130
Spec-Bench questions (10 per category, 128 new tokens, batch 1, float32, one sample each),
against plain sampling in the same run: the chain default when sampling (`adaptive` chains of
up to 3 tokens, `idle_decay` 0.995; given explicitly, so the record keeps its meaning if the
default moves) against the 3-node static tree `medusa` drafts by default when greedy
(`fixed:0,1,0.0` under the same policy, verified by the lossless tree-sampling rule). The
26-prompt scouting run (configs/medusa_tree3_sampling_b1.py) found the tree 1.032x of the
chain, 95% 0.975-1.090. Journaled: `specjax bench --config
configs/spec_bench_medusa_tree3_sampling.py --time-limit MINUTES`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"medusa@chain": {"policy": "adaptive", "idle_decay": 0.995},
            "medusa@tree3": {"tree": "fixed:0,1,0.0", "policy": "adaptive",
                             "idle_decay": 0.995}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        temperature=0.7,
        journal="docs/results/spec_bench_medusa_tree3_sampling.journal.jsonl",
        output="docs/results/bench_spec_bench_medusa_tree3_sampling.json",
        plot="docs/results/bench_spec_bench_medusa_tree3_sampling.png",
    )
