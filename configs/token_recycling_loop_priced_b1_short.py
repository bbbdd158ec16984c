"""Token Recycling's default at batch 1 priced two ways on three Spec-Bench categories with
short prompts (translation, coding, math_reasoning: caches of 256 positions): its default
(`adaptive`, each depth of its tree priced by the forward-only verify curve, a lone T-token
forward against a one-token one) and `@loop256` (the same policy priced by whole decode-loop
steps against a plain step at 256 positions,
docs/results/step_curve_vs_plain_b1_256_2026-12-06.json: 1.00 / 1.02 / 1.18 / 1.51 / 1.53
plain steps for blocks of 2 / 4 / 8 / 9 / 11 tokens, where the forward-only curve says
0.96 / 1.11 / 1.36 / 1.47 / 1.44: its 4- and 8-token blocks cheaper). The companion of
configs/token_recycling_loop_priced_b1.py (rag and summarization, priced at 2,048
positions). 10 questions per category, 128 new tokens, greedy, batch 1, float32, one run
each, interleaved with plain decoding. Journaled: `specjax bench --config
configs/token_recycling_loop_priced_b1_short.py --time-limit MINUTES`, rerun the same
command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config

LOOP_CURVE = "docs/results/step_curve_vs_plain_b1_256_2026-12-06.json#1"


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling", "token_recycling@loop256"),
        method_args={"token_recycling@loop256": {"cost": LOOP_CURVE}},
        categories=("translation", "coding", "math_reasoning"),
        journal="docs/results/token_recycling_loop_priced_b1_short.journal.jsonl",
        output="docs/results/bench_token_recycling_loop_priced_b1_short.json",
        plot="docs/results/bench_token_recycling_loop_priced_b1_short.png",
    )
