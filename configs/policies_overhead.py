"""Issue 23: the cost-aware policies once a drafting step's fixed overhead is counted.

configs/policies_idle.py ran `adaptive` and `smartspec` with idle steps (a step where no row
drafts costs a plain step) at 0.91x of plain decoding at batch 4: they kept probing with short
drafts, because their cost model put all of the drafter's measured excess per drafted token,
measured at k = 6 (`d = (step(6) - verify(7)) / 6`), so a one-token draft looked nearly free
while it costs the head's catch-up pass and the verify bookkeeping too (1.26x a plain step at
batch 4 with nothing drafted, scripts/measure_idle_step.py). specjax.draft_costs now measures
the drafter at k = 1 and at its maximum and splits the excess into `draft_overhead` (any step
that drafts) and `draft_cost` (per drafted token); both policies count both. Same prompts and
settings as configs/policies_idle.py (one question per Spec-Bench category, 64 new tokens,
greedy, float32, batch 1 and 4, one static cache of 896 positions), against plain decoding of
the same batch size. Journaled: `specjax bench --config configs/policies_overhead.py
--time-limit MINUTES`, rerun the same command to continue.

As run, the cost-aware policies priced steps by draft-cost format 3; a rerun measures the
current model (configs/README.md, "Cost models of the policy configs")."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle@adaptive": {"k": 6, "policy": "adaptive"},
            "eagle@smartspec": {"k": 6, "policy": "smartspec"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/policies_overhead.journal.jsonl",
        output="docs/results/bench_policies_overhead.json",
        plot="docs/results/bench_policies_overhead.png",
    )
