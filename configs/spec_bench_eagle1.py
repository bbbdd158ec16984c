"""The EAGLE-1 head (`configs/train/eagle1_smollm2.py`, trained on this 2-core CPU: run it
first, it writes runs/eagle1_smollm2/head) against plain decoding on Spec-Bench: issue 21's
benchmark (10 questions per category, 128 new tokens, greedy, batch 1, float32), the chain
of k = 3 with the head's products in int8 (`quantize=auto`, the CPU default), as the shipped
EAGLE-3 head's run (configs/spec_bench_heads_w8a8.py: 1.41x, tau 1.91) is the comparison.
Journaled: rerun the same command to continue (`--time-limit MINUTES`)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", "eagle"),
        method_args={"eagle": {"k": 3, "head": "runs/eagle1_smollm2/head"}},
        journal="docs/results/spec_bench_eagle1.journal.jsonl",
        output="docs/results/bench_spec_bench_eagle1.json",
        plot="docs/results/bench_spec_bench_eagle1.png",
    )
