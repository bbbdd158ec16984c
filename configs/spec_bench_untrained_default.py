"""Issue 23's robustness bar (no category below 0.97x of plain decoding) for the drafters that
are not trained for the target, over the whole 130-question Spec-Bench subset: the draft model
(`draft_model`, by default the target's first 5 of 30 layers) and the early exit
(`early_exit`), each built with no options (`adaptive` with this machine's measured step costs,
k up to 3, `idle_decay = 0.995`; `specjax.methods.CHAIN_DEFAULTS`), against plain decoding,
interleaved. Until this run the bar had been looked at on 13 prompts only
(configs/policies_untrained_idle_b1.py). The settings of configs/spec_bench_heads_mh.py: 10
questions per category, 128 new tokens, greedy, batch 1, float32, one run per question.
Journaled: `specjax bench --config configs/spec_bench_untrained_default.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads_mh.py")),
        methods=("ar", "draft_model", "early_exit"),
        journal="docs/results/spec_bench_untrained_default.journal.jsonl",
        output="docs/results/bench_spec_bench_untrained_default.json",
        plot="docs/results/bench_spec_bench_untrained_default.png",
    )
