"""Issue 23: the EAGLE-3 head's default policy (`adaptive`, the pooled finish rule, step
costs timed at the run's 1,024-position cache) at batch 16 against its fixed k = 1 and plain
decoding of the same batch size: the 52 Spec-Bench questions of configs/ngram_b4.py as a
batch-16 sweep (`sweep_only`: the prompts cycled to fill each batch of 16), 64 new tokens,
greedy, float32, one run. Journaled: `specjax bench --config
configs/policies_eagle_b16_cachelen.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(  # the methods of configs/policies_eagle_b4_cachelen.py
        load_config(Path(__file__).with_name("policies_eagle_b4_cachelen.py")),
        repeats=1,
        batch_sizes=(16,),
        sweep_only=True,
        journal="docs/results/policies_eagle_b16_cachelen.journal.jsonl",
        output="docs/results/bench_policies_eagle_b16_cachelen.json",
        plot="docs/results/bench_policies_eagle_b16_cachelen.png",
    )
