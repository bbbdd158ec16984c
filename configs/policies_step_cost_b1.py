"""Issue 23: the cost-aware policies with the step priced as timed in the decode loop, batch 1.

`adaptive` and `smartspec`, built by name for a head drafter, now price a step that drafts k
tokens at what it was timed to cost in the decode loop (`step_cost`, specjax.draft_costs),
where they used to add a per-token cost and an overhead to the lone-forward verify curve: that
sum priced the EAGLE-3 head's 3-token step at 1.45 plain steps where the loop took 1.20, and
`adaptive` drafted shorter than paid (configs/policies_default_b1.py: 1.29x against fixed
k = 3's 1.34x). Each head under fixed lengths and the two cost-aware policies (k up to 3, the
same maximum) against plain decoding: two questions per Spec-Bench category (26 prompts), 64
new tokens, greedy, float32, one static cache of 896 positions. Journaled: `specjax bench
--config configs/policies_step_cost_b1.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {f"eagle@k{k}": {"k": k, "policy": "fixed"} for k in (1, 2, 3)}
    for head in ("eagle", "hydra", "medusa"):
        if head != "eagle":
            args[f"{head}@k3"] = {"k": 3, "policy": "fixed"}
        args[f"{head}@adaptive"] = {"k": 3, "policy": "adaptive"}
    args["eagle@smartspec"] = {"k": 3, "policy": "smartspec"}
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", *args),
        method_args=args,
        limit=2,
        batch_sizes=None,
        journal="docs/results/policies_step_cost_b1.journal.jsonl",
        output="docs/results/bench_policies_step_cost_b1.json",
        plot="docs/results/bench_policies_step_cost_b1.png",
    )
