"""Token Recycling's default at batch 1 against the same policy priced by whole decode-loop
steps at 1,024 positions (`@loop1024`, docs/results/step_curve_vs_plain_b1_1024_2026-12-06.json),
on summarization and rag, whose prompts' caches hold 640-1,408 positions (1,024 the nearest
probe length). configs/token_recycling_loop_priced_b1.py gave these questions the
2,048-position curve, twice their caches, and lost 3% to the default. 10 questions per
category, 128 new tokens, greedy, batch 1, float32, one run each, interleaved with plain
decoding. Journaled: `specjax bench --config configs/token_recycling_loop_priced_b1_1024.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config

LOOP_CURVE = "docs/results/step_curve_vs_plain_b1_1024_2026-12-06.json#1"


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling", "token_recycling@loop1024"),
        method_args={"token_recycling@loop1024": {"cost": LOOP_CURVE}},
        categories=("summarization", "rag"),
        journal="docs/results/token_recycling_loop_priced_b1_1024.journal.jsonl",
        output="docs/results/bench_token_recycling_loop_priced_b1_1024.json",
        plot="docs/results/bench_token_recycling_loop_priced_b1_1024.png",
    )
