"""Token Recycling with its table carried from question to question (`memory=keep`, the
paper's global table: a hot start; `@hot`) against its default (each question starts cold)
and plain decoding over the 130 Spec-Bench questions, interleaved: a replay of the default
tree over the tree run's answers gave 1.62 accepted-plus-one tokens per step hot against 1.52
cold. The questions run in the benchmark's order (the categories taking turns), the hot table
learning from every earlier answer; the bench times each run from the table as it was
before the question. The settings of configs/spec_bench_model_free_3.py: 10 questions per
category, 128 new tokens, greedy, batch 1, float32, one run each. Journaled: `specjax bench
--config configs/spec_bench_token_recycling_hot.py --time-limit MINUTES`, rerun the same
command to continue (the hot table is rebuilt from the journal's answers)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_default_3.py")),
        methods=("ar", "token_recycling", "token_recycling@hot"),
        method_args={"token_recycling@hot": {"memory": "keep"}},
        journal="docs/results/spec_bench_token_recycling_hot.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_hot.json",
        plot="docs/results/bench_spec_bench_token_recycling_hot.png",
    )
