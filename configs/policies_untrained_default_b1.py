"""Issue 23's robustness bar for the drafters that are not trained for the target, with their
default policy: the draft model (by default the target's first layers, `draft_model`), the
early exit (`early_exit`) and layer skipping (`layer_skip`) on SmolLM2 at batch 1, each built
with no options (since 2026-12-01: `adaptive` with this machine's measured step costs and
`idle_decay = 0.98`, k up to 3; `specjax.methods.CHAIN_DEFAULTS`), against plain decoding.

The same 13 prompts (one Spec-Bench question per category), 64 new tokens, greedy, float32 and
static cache of 896 positions as configs/policies_untrained_b1.py, where fixed k = 3 (their
default until then) ran at 0.51-0.63x of plain decoding and `adaptive` with `decay = 0.9` at
0.94-1.00x; 3 repeats (the median per category), since one run of one question per category
carries about 10% of noise here (`layer_skip` decoding plainly spread over 0.82-1.19x of
`ar` in that run). Journaled: `specjax bench --config configs/policies_untrained_default_b1.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", "draft_model", "early_exit", "layer_skip"),
        method_args={},
        batch_sizes=None,
        repeats=3,
        journal="docs/results/policies_untrained_default_b1.journal.jsonl",
        output="docs/results/bench_policies_untrained_default_b1.json",
        plot="docs/results/bench_policies_untrained_default_b1.png",
    )
