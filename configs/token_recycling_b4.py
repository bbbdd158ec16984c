"""Issue 23's robustness bar (no default below 0.97x of plain decoding at any batch size) for
Token Recycling above batch 1, where it had not been run: its default (the tree
`levels:3.2.2.1` since 2026-12-06, `adaptive`, each depth priced by its nodes) and the old
default tree `levels:4.3.2.1` (`@t4321`) against plain decoding at batch 4, interleaved,
with the settings of configs/ngram_b4.py: 52 Spec-Bench prompts (four per category), each
category's four decoded once as one batch of 4, 64 new tokens, greedy, float32, one static
cache of 1,024 positions. Journaled: `specjax bench --config configs/token_recycling_b4.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "token_recycling", "token_recycling@t4321"),
        method_args={"token_recycling@t4321": {"tree": "levels:4.3.2.1"}},
        journal="docs/results/token_recycling_b4.journal.jsonl",
        output="docs/results/bench_token_recycling_b4.json",
        plot="docs/results/bench_token_recycling_b4.png",
    )
