"""Token Recycling recording every verified node's top ids (`record=tree`, the paper's rule:
the rejected nodes' candidates too, whose contexts did not happen) against recording the
committed path alone (the default), both with the table carried from question to question
(`memory=keep`), and plain decoding, over the 130 Spec-Bench questions, interleaved. The
settings of configs/spec_bench_token_recycling_hot.py (10 questions per category, 128 new
tokens, greedy, batch 1, float32, one run each). Journaled: `specjax bench --config
configs/spec_bench_token_recycling_record_tree.py --time-limit MINUTES`, rerun the same
command to continue (the carried tables are rebuilt from the journal's answers; for
`record=tree` that rebuild sees the committed path only, so the table a resumed run starts
from lacks the rejected nodes' entries of the earlier questions)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_hot.py")),
        methods=("ar", "token_recycling@hot", "token_recycling@hottree"),
        method_args={"token_recycling@hot": {"memory": "keep"},
                     "token_recycling@hottree": {"memory": "keep", "record": "tree"}},
        journal="docs/results/spec_bench_token_recycling_record_tree.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_record_tree.json",
        plot="docs/results/bench_spec_bench_token_recycling_record_tree.png",
    )
