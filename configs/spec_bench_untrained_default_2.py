"""The draft model of configs/spec_bench_untrained_default.py again, after its default stand-in
(the target's first 5 of 30 blocks) stopped running a prefill of its own (2026-12-04: its
first proposal takes those layers of the target cache). The first run had it at 0.94x on rag
and 0.97x on summarization, 0.99x / 1.01x in decode time alone: its prefill of the long
prompts. The same 130 questions and settings, against plain decoding, interleaved; the early
exit is unchanged and not rerun. Journaled: `specjax bench --config
configs/spec_bench_untrained_default_2.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_untrained_default.py")),
        methods=("ar", "draft_model"),
        journal="docs/results/spec_bench_untrained_default_2.journal.jsonl",
        output="docs/results/bench_spec_bench_untrained_default_2.json",
        plot="docs/results/bench_spec_bench_untrained_default_2.png",
    )
