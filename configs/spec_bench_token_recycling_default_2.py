"""Token Recycling's default since 2026-12-05 (thirty-first session: `adaptive`, each depth of
its tree priced by its nodes, and `prompt=text`, the prompt's entries from the prompt's text
so the prefill computes the LM head at its last position only) over the 130 Spec-Bench
questions against plain decoding, interleaved: issue 23's robustness bar and issue 24's
per-category figure. The run before it (configs/spec_bench_token_recycling_default.py, the
prompt's entries from the target's top ids) gave 0.97x overall with rag 0.90x and
summarization 0.94x from the prefill. The settings of configs/spec_bench_model_free_3.py: 10
questions per category, 128 new tokens, greedy, batch 1, float32, one run each. Journaled:
`specjax bench --config configs/spec_bench_token_recycling_default_2.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling"),
        journal="docs/results/spec_bench_token_recycling_default_2.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_default_2.json",
        plot="docs/results/bench_spec_bench_token_recycling_default_2.png",
    )
