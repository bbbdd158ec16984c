"""Issue 23: should the head drafters default to `adaptive` at batch 1 too?

At batch 1 `eagle`, `hydra` and `medusa` default to fixed k = 3 (`specjax.methods`), and over
the 130 Spec-Bench questions Hydra++ fell to 0.93x of plain decoding on translation (Medusa-1
0.98x), below issue 23's robustness bar of 0.97x in every category. `adaptive` with this
machine's measured verify curve and draft costs (per drafted token and per drafting step)
backs off per row where drafts are rejected. Each head under fixed k = 3 (pinned) and
`adaptive` (k up to 3, the same maximum) against plain decoding: one question per Spec-Bench
category (13 prompts), 64 new tokens, greedy, float32, one static cache of 896 positions, as
configs/policies_overhead.py. Journaled: `specjax bench --config configs/policies_default_b1.py
--time-limit MINUTES`, rerun the same command to continue.

As run, the cost-aware policies priced steps by draft-cost format 3; a rerun measures the
current model (configs/README.md, "Cost models of the policy configs")."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {}
    for head in ("eagle", "hydra", "medusa"):
        args[f"{head}@k3"] = {"k": 3, "policy": "fixed"}
        args[f"{head}@adaptive"] = {"k": 3, "policy": "adaptive"}
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", *args),
        method_args=args,
        batch_sizes=None,
        journal="docs/results/policies_default_b1.journal.jsonl",
        output="docs/results/bench_policies_default_b1.json",
        plot="docs/results/bench_policies_default_b1.png",
    )
