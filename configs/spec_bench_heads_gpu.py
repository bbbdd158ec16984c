"""The second GPU-trained EAGLE-3 head (`gpu2`, shipped 2026-11-26 until `gpu3` replaced it)
against plain decoding on Spec-Bench: configs/spec_bench_heads.py (10 questions per category,
128 new tokens, greedy, batch 1, float32; a chain of k = 3 and an EAGLE-2 dynamic tree of 7
nodes; issue 21's benchmark, first run on the CPU-trained head) with a journal and results of
its own. Its recorded results are `gpu2`'s; the config measures the shipped head, so it
reproduces them only with `--method-arg eagle.head=DIR` naming that head (in git: the shipped
head of commit e7ebc4e). Journaled: rerun the same command to continue (`--time-limit MINUTES`)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        journal="docs/results/spec_bench_heads_gpu.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_gpu.json",
        plot="docs/results/bench_spec_bench_heads_gpu.png",
    )
