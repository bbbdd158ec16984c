"""Issue 23: prompt lookup's default (`adaptive`, k = 16) at batch 4 after the batch test
counts each row's chance of offering a draft when asked (2026-12-01), against plain decoding:
the 26 prompts of configs/policies_sweep_pl.py cycled into 7 batches of 4 (`sweep_only`), 64
new tokens, greedy, float32, one static cache of 896 positions. In that sweep (before the
change) the default ran at 0.77x of plain decoding at batch 4: a row without a lookup match
offers nothing, but the batch test counted every asked row at its expected tokens, so the
batch kept paying verify blocks for the few rows that matched. Journaled: `specjax bench
--config configs/policies_pl_offer_b4.py --time-limit MINUTES`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(  # the prompts and budgets of configs/policies_sweep_pl.py
        load_config(Path(__file__).with_name("policies_sweep_pl.py")),
        methods=("ar", "prompt_lookup"),
        method_args={},
        batch_sizes=(4,),
        journal="docs/results/policies_pl_offer_b4.journal.jsonl",
        output="docs/results/bench_policies_pl_offer_b4.json",
        plot="docs/results/bench_policies_pl_offer_b4.png",
    )
