"""Issue 23: the cost-aware policies once a step that drafts nothing costs a plain step.

configs/policies_draft_cost.py measured `adaptive` and `smartspec` (with the drafter's own
cost counted) backing off at batch 4 (0.17 / 0.54 tokens drafted per step) yet at 0.89x /
0.88x of plain decoding in the decode phase: a step that drafted nothing still ran the EAGLE
head and the verify machinery (1.20-1.26x a plain step, scripts/measure_idle_step.py). The
loop now runs such steps as plain steps (idle steps, docs/design.md). The same prompts and
settings (one question per Spec-Bench category, 64 new tokens, greedy, float32, batch 1 and 4,
one static cache of 896 positions) for the two policies and the default fixed k = 3, against
plain decoding of the same batch size. Journaled: `specjax bench --config
configs/policies_idle.py --time-limit MINUTES`, rerun the same command to continue.

As run, the cost-aware policies priced steps by draft-cost format 3; a rerun measures the
current model (configs/README.md, "Cost models of the policy configs")."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle@k3": {"k": 3, "policy": "fixed"},
            "eagle@adaptive": {"k": 6, "policy": "adaptive"},
            "eagle@smartspec": {"k": 6, "policy": "smartspec"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/policies_idle.journal.jsonl",
        output="docs/results/bench_policies_idle.json",
        plot="docs/results/bench_policies_idle.png",
    )
