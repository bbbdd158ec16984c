"""Issue 23's robustness bar for the Hydra++ head at batch 1: its default (fixed k = 3) is the
one trained-head default below 0.97x of plain decoding in a category (translation 0.93x over
the 130 Spec-Bench questions, configs/spec_bench_heads_mh.py; summarization 0.96x on the 26
prompts of configs/policies_step_cost_b1.py), and `adaptive` with the policy's own `decay`
(0.9) was worse there (summarization 0.91x at tau 1.07: it probed often and lost). This run
asks whether the setting that made the untrained drafters robust (`adaptive` with this
machine's measured step costs and `idle_decay = 0.995`: a row whose drafts are rejected probes
about once per 165 idle steps; specjax.methods.CHAIN_DEFAULTS) does the same for Hydra++
without giving up its gain elsewhere, and how the mid-draft `confidence` stop (top-1 draft
probability below 0.4, no measurement needed) compares.

Against plain decoding, interleaved: `hydra` (its default, fixed k = 3), `hydra@adaptive`
(k <= 3, `decay` 0.9 as in the earlier run), `hydra@idle` (k <= 3, `idle_decay` 0.995) and
`hydra@confidence` (k = 3, threshold 0.4). The 26 prompts of configs/policies_step_cost_b1.py
(two per Spec-Bench category), 64 new tokens, greedy, float32, one static cache of 896
positions, 2 repeats (the median per prompt). Journaled: `specjax bench --config
configs/policies_hydra_b1.py --time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"hydra@adaptive": {"k": 3, "policy": "adaptive"},
            "hydra@idle": {"k": 3, "policy": "adaptive", "idle_decay": 0.995},
            "hydra@confidence": {"k": 3, "policy": "confidence", "threshold": 0.4}}
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", "hydra", *args),
        method_args=args,
        limit=2,
        batch_sizes=None,
        repeats=2,
        journal="docs/results/policies_hydra_b1.journal.jsonl",
        output="docs/results/bench_policies_hydra_b1.json",
        plot="docs/results/bench_policies_hydra_b1.png",
    )
