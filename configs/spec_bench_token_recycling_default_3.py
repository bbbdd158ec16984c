"""Token Recycling's default (`adaptive`, each depth of its tree priced by its nodes,
`prompt=text`) over the 130 Spec-Bench questions against plain decoding, interleaved, run
again since the speculative loop's verify forward writes the target's cache in place
(2026-12-05, thirty-second session: the 4- and 9-token verify blocks about 7% cheaper at
batch 1): issue 24's per-category figure and issue 23's robustness bar under the current loop.
The run before it: configs/spec_bench_token_recycling_default_2.py (1.01x, no category below
0.98x). The settings of configs/spec_bench_model_free_3.py: 10 questions per category, 128
new tokens, greedy, batch 1, float32, one run each. Journaled: `specjax bench --config
configs/spec_bench_token_recycling_default_3.py --time-limit MINUTES`, rerun the same command
to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_token_recycling_default_2.py")),
        journal="docs/results/spec_bench_token_recycling_default_3.journal.jsonl",
        output="docs/results/bench_spec_bench_token_recycling_default_3.json",
        plot="docs/results/bench_spec_bench_token_recycling_default_3.png",
    )
