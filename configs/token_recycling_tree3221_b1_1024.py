"""Token Recycling on summarization and rag at batch 1 with a tree whose first level fits a
cheaper verify bucket, priced by whole decode-loop steps at 1,024 positions
(`@t3221loop`: `tree=levels:3.2.2.1`, 8 nodes, depths verified in blocks of 4 / 6 / 8 / 9
tokens, buckets 4 / 8 / 8 / 9; `cost=` docs/results/step_curve_vs_plain_b1_1024_2026-12-06.json,
where a 4-token block costs 1.13 plain steps and an 8-token one 1.45), against the default
(`levels:4.3.2.1`, whose first level already needs the 8-token bucket, priced by the
forward-only curve). configs/token_recycling_loop_priced_b1_1024.py found the default tree
under these prices drafting on 105 steps instead of 358 and 2% slower than the default. 10
questions per category, 128 new tokens, greedy, batch 1, float32, one run each, interleaved
with plain decoding. Journaled: `specjax bench --config
configs/token_recycling_tree3221_b1_1024.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config

LOOP_CURVE = "docs/results/step_curve_vs_plain_b1_1024_2026-12-06.json#1"


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling", "token_recycling@t3221loop"),
        method_args={"token_recycling@t3221loop": {"tree": "levels:3.2.2.1",
                                                   "cost": LOOP_CURVE}},
        categories=("summarization", "rag"),
        journal="docs/results/token_recycling_tree3221_b1_1024.journal.jsonl",
        output="docs/results/bench_token_recycling_tree3221_b1_1024.json",
        plot="docs/results/bench_token_recycling_tree3221_b1_1024.png",
    )
