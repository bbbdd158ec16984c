"""Token Recycling with the tree `levels:3.2.2.1` (`@t3221`: 8 nodes whose first level fits
the 4-token verify bucket) against its default tree `levels:4.3.2.1` and plain decoding over
the 130 Spec-Bench questions, interleaved, under the default's forward-only prices: the
paired test of whether the cheaper first level should become the default (on summarization
and rag it gave 1.16x against 1.03x, configs/token_recycling_tree3221_b1_fwd.py). The
settings of configs/spec_bench_model_free_3.py: 10 questions per category, 128 new tokens,
greedy, batch 1, float32, one run each. Journaled: `specjax bench --config
configs/spec_bench_token_recycling_tree3221.py --time-limit MINUTES`, rerun the same command
to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_default_3.py")),
        methods=("ar", "token_recycling", "token_recycling@t3221"),
        method_args={"token_recycling@t3221": {"tree": "levels:3.2.2.1"}},
        journal="docs/results/spec_bench_token_recycling_tree3221.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_tree3221.json",
        plot="docs/results/bench_spec_bench_token_recycling_tree3221.png",
    )
