"""Token Recycling's default at batch 1 priced two ways, side by side on the two Spec-Bench
categories with the longest prompts (summarization, rag): its default (`adaptive`, each depth
of its tree priced by the forward-only verify curve, a lone T-token forward against a
one-token one, which is what batch 1 reads today) and `@loop` (the same policy priced by whole
decode-loop steps against a plain step at 2,048 positions, the curve of
docs/results/step_curve_vs_plain_b1_2048_2026-12-06.json: 1.08 / 1.22 / 1.55 / 1.71 / 1.89
plain steps for blocks of 2 / 4 / 8 / 9 / 11 tokens, 6-29% above the forward-only prices;
these questions' caches hold 640-1,408 positions, so 2,048 over-states them:
configs/token_recycling_loop_priced_b1_1024.py prices them at 1,024).
Over the 130 questions (configs/spec_bench_token_recycling_default_3.py) rag ran at 0.94x in
decode time. The settings of that run: 10 questions per category, 128 new tokens, greedy,
batch 1, float32, one run each, interleaved with plain decoding. Journaled: `specjax bench
--config configs/token_recycling_loop_priced_b1.py --time-limit MINUTES`, rerun the same
command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config

LOOP_CURVE = "docs/results/step_curve_vs_plain_b1_2048_2026-12-06.json#1"


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling", "token_recycling@loop"),
        method_args={"token_recycling@loop": {"cost": LOOP_CURVE}},
        categories=("summarization", "rag"),
        journal="docs/results/token_recycling_loop_priced_b1.journal.jsonl",
        output="docs/results/bench_token_recycling_loop_priced_b1.json",
        plot="docs/results/bench_token_recycling_loop_priced_b1.png",
    )
