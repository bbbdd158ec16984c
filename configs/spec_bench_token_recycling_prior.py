"""Token Recycling starting from the table shipped for SmolLM2 (`prior=shipped`, the default
since 2026-12-06: each token's 16 most frequent successors in the target's own answers to the
8,192 prompts of data/corpus_smollm2, no Spec-Bench prompt among them) against the same
method starting from junk (`@cold`, `prior=none`, its default before) and plain decoding, over
the 130 Spec-Bench questions, interleaved. A replay of the default tree over the tree run's
answers (scripts/replay_token_recycling.py --start) gave 1.78 accepted-plus-one tokens per
step from the prior against 1.52 cold and 1.62 with the table carried from question to
question. Both methods otherwise at the method's defaults (`memory=auto`: none with the
prior, call without; at batch 1 each question starts from the prior or from junk). The
settings of configs/spec_bench_model_free_3.py: 10 questions per category, 128 new tokens,
greedy, batch 1, float32, one run each.
Journaled: `specjax bench --config configs/spec_bench_token_recycling_prior.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_default_3.py")),
        methods=("ar", "token_recycling", "token_recycling@cold"),
        method_args={"token_recycling@cold": {"prior": "none"}},
        journal="docs/results/spec_bench_token_recycling_prior.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_prior.json",
        plot="docs/results/bench_spec_bench_token_recycling_prior.png",
    )
