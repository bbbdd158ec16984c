"""Token Recycling on summarization and rag at batch 1 with the tree `levels:3.2.2.1` under
its default's forward-only prices (`@t3221`), to separate the tree from the prices of
configs/token_recycling_tree3221_b1_1024.py (the same tree priced by whole loop steps at
1,024 positions: 1.14x against the default's 1.03x). 10 questions per category, 128 new
tokens, greedy, batch 1, float32, one run each, interleaved with plain decoding. Journaled:
`specjax bench --config configs/token_recycling_tree3221_b1_fwd.py --time-limit MINUTES`,
rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling@t3221"),
        method_args={"token_recycling@t3221": {"tree": "levels:3.2.2.1"}},
        categories=("summarization", "rag"),
        journal="docs/results/token_recycling_tree3221_b1_fwd.journal.jsonl",
        output="docs/results/bench_token_recycling_tree3221_b1_fwd.json",
        plot="docs/results/bench_token_recycling_tree3221_b1_fwd.png",
    )
