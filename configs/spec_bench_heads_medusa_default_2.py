"""Medusa-1's batch-1 default (`adaptive` with this machine's measured step costs, `idle_decay`
0.995, k up to 3) over the 130 Spec-Bench questions again: in configs/spec_bench_heads_mh_default.py
(2026-12-03) it was the one trained-head default under issue 23's 0.97x bar (summarization
0.96x), with step costs priced hours before the run on a VM whose speed drifts; with fresh
costs the ten summarization questions alone gave 0.988-0.995x. The same questions and
settings (10 per category, 128 new tokens, greedy, float32, one run each), Medusa-1 and plain
decoding only, interleaved. Journaled: `specjax bench --config
configs/spec_bench_heads_medusa_default_2.py --time-limit MINUTES`, rerun the same command to
continue.
Since 2026-12-07 a bare `medusa` builds a 3-node tree greedy at batch 1: rerun with
`--method-arg medusa.k=3` for the chain recorded here (configs/README.md)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads_mh_default.py")),
        methods=("ar", "medusa"),
        journal="docs/results/spec_bench_heads_medusa_default_2.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_medusa_default_2.json",
        plot="docs/results/bench_spec_bench_heads_medusa_default_2.png",
    )
