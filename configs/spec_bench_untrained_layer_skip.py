"""The third untrained drafter, the layer skip (`layer_skip`: the target with some of its blocks
skipped drafts for the whole target), over the 130-question Spec-Bench subset, to show issue 23's
robustness bar (no category below 0.97x of plain decoding) there as well: until this run it had
been looked at on 13 prompts only (configs/policies_untrained_idle_b1.py). Built with no options
(`adaptive` with this machine's measured step costs, k up to 3, `idle_decay = 0.995`;
`specjax.methods.CHAIN_DEFAULTS`), against plain decoding, interleaved; the settings of
configs/spec_bench_untrained_default.py (10 questions per category, 128 new tokens, greedy,
batch 1, float32, one run per question). Journaled: `specjax bench --config
configs/spec_bench_untrained_layer_skip.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_untrained_default.py")),
        methods=("ar", "layer_skip"),
        journal="docs/results/spec_bench_untrained_layer_skip.journal.jsonl",
        output="docs/results/bench_spec_bench_untrained_layer_skip.json",
        plot="docs/results/bench_spec_bench_untrained_layer_skip.png",
    )
