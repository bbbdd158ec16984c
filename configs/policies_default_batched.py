"""Issue 23: the model-based drafters' default policy above batch 1.

Since 2026-11-28 a model-based chain drafter (eagle, medusa, hydra, draft_model, early_exit,
layer_skip) built for a batch of more than one row defaults to `adaptive` with this machine's
measured verify curve and draft costs (`specjax.methods.BATCHED_DEFAULTS`), and a run whose
measured costs say that no draft can pay even fully accepted decodes plainly
(`specjax.engine.drafting_off`). This run checks the EAGLE-3 head's default against its old
default (fixed k = 3, pinned) and plain decoding of the same batch size at batch 4 and 16:
one question per Spec-Bench category (13 prompts), 64 new tokens, greedy, float32, one static
cache of 896 positions, as configs/policies_overhead.py. At batch 1 both were fixed k = 3 (the
primary per-category rows). Since 2026-12-07 the head's batch-1 greedy default is a 3-node
tree, so a rerun builds `eagle`'s batch-1 rows as that tree, which the recorded journal
refuses (another config); add `--method-arg eagle.k=3` to rerun them as recorded (the
resolved config of the recorded rows; this file stays the recorded command).
Journaled: `specjax bench --config configs/policies_default_batched.py --time-limit MINUTES`,
rerun the same command to continue.

As run, the cost-aware policies priced steps by draft-cost format 3; a rerun measures the
current model (configs/README.md, "Cost models of the policy configs")."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {}, "eagle@k3": {"k": 3, "policy": "fixed"}}
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", *args),
        method_args=args,
        batch_sizes=(4, 16),
        journal="docs/results/policies_default_batched.journal.jsonl",
        output="docs/results/bench_policies_default_batched.json",
        plot="docs/results/bench_policies_default_batched.png",
    )
