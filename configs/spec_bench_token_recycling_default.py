"""Token Recycling's default since 2026-12-05 over the 130 Spec-Bench questions, against
plain decoding, interleaved: issue 23's robustness bar (no default below 0.97x of plain
decoding in any category) and issue 24's per-category figure. Its fixed 10-node tree
(`levels:4.3.2.1`) ran at 0.69x here (configs/spec_bench_model_free_3.py, tau 1.53: the
tree's 11-token verify block costs about 1.8 plain steps on the project's 2-core CPU); the
default is now `adaptive` with each depth of the tree priced by the nodes it verifies on this
machine's measured verify curve (`specjax.policies.adaptive.tree_step_cost`) and `idle_decay
= 0.995`. The settings of configs/spec_bench_model_free_3.py: 10 questions per category, 128
new tokens, greedy, batch 1, float32, one run each. Journaled: `specjax bench --config
configs/spec_bench_token_recycling_default.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling"),
        journal="docs/results/spec_bench_token_recycling_default.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_default.json",
        plot="docs/results/bench_spec_bench_token_recycling_default.png",
    )
