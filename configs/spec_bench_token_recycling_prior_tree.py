"""Token Recycling from the shipped table (`prior=shipped`, its default since 2026-12-06)
recording every verified node's top ids (`@tree`, `record=tree`, the paper's rule) against
the default that records the committed path only, and plain decoding, over the 130 Spec-Bench
questions, interleaved. Carried from question to question from junk, `record=tree` gave 1.27x
against 1.25x (configs/spec_bench_token_recycling_record_tree.py, paired 1.019); this asks
whether that holds from the prior, before making it the default. The settings of
configs/spec_bench_model_free_3.py: 10 questions per category, 128 new tokens, greedy, batch
1, float32, one run each. Journaled: `specjax bench --config
configs/spec_bench_token_recycling_prior_tree.py --time-limit MINUTES`, rerun the same
command to continue (nothing is carried between questions, so a resumed chunk decodes as
an uninterrupted run would)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_default_3.py")),
        methods=("ar", "token_recycling", "token_recycling@tree"),
        method_args={"token_recycling@tree": {"record": "tree"}},
        journal="docs/results/spec_bench_token_recycling_prior_tree.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_prior_tree.json",
        plot="docs/results/bench_spec_bench_token_recycling_prior_tree.png",
    )
