"""Issue 23: configs/policies_overhead.py at batch 16 (the 13 prompts as one batch), with the
EAGLE default (fixed k = 3) beside the cost-aware policies. Journaled: `specjax bench --config
configs/policies_overhead_b16.py --time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    base = load_config(Path(__file__).with_name("policies_overhead.py"))
    args = {"eagle@k3": {"k": 3, "policy": "fixed"}, **base.method_args}
    return dataclasses.replace(
        base,
        methods=("ar", *args),
        method_args=args,
        batch_sizes=(16,),
        journal="docs/results/policies_overhead_b16.journal.jsonl",
        output="docs/results/bench_policies_overhead_b16.json",
        plot="docs/results/bench_policies_overhead_b16.png",
    )
