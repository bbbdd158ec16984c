"""Issue 21 / 23: the shipped Hydra++ heads when sampling (temperature 0.7) over the 130
Spec-Bench questions (10 per category, 128 new tokens, batch 1, float32, one sample each),
against plain sampling in the same run, interleaved: its batch-1 default (`adaptive` chains of
up to 3 tokens, `idle_decay` 0.995; given explicitly, so the record keeps its meaning if the
default moves), verified by the lossless chain-sampling rule. Besides the speedup it measures
Hydra++'s first-token acceptance when sampling, which the head file records for the sampled
runs' prior above batch 1 (`specjax head record-acceptance`; Medusa-1's came from
configs/spec_bench_medusa_tree3_sampling.py). Journaled: `specjax bench --config
configs/spec_bench_hydra_sampling.py --time-limit MINUTES`, rerun to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"hydra": {"policy": "adaptive", "idle_decay": 0.995}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        temperature=0.7,
        journal="docs/results/spec_bench_hydra_sampling.journal.jsonl",
        output="docs/results/bench_spec_bench_hydra_sampling.json",
        plot="docs/results/bench_spec_bench_hydra_sampling.png",
    )
