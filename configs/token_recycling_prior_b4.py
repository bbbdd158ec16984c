"""Issue 23's robustness bar (no default below 0.97x of plain decoding at any batch size) for
Token Recycling's default since it starts from the table shipped for SmolLM2 (`prior=shipped`,
2026-12-06), at batch 4: the run of configs/token_recycling_b4.py (where the default, from
junk, decoded all but plainly: 1.00x) again with the prior, against plain decoding,
interleaved: 52 Spec-Bench prompts (four per category), each category's four decoded once as
one batch of 4, 64 new tokens, greedy, float32, one static cache of 1,024 positions.
Journaled: `specjax bench --config configs/token_recycling_prior_b4.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("token_recycling_b4.py")),
        methods=("ar", "token_recycling"),
        method_args={},
        journal="docs/results/token_recycling_prior_b4.journal.jsonl",
        output="docs/results/bench_token_recycling_prior_b4.json",
        plot="docs/results/bench_token_recycling_prior_b4.png",
    )
