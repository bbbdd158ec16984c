"""Hydra++'s batch-4 default over all 13 Spec-Bench categories with eight repeats, since its
prompt pass runs the prefix layer's queries, attention and MLP at each row's last position
only (`PrefixLayer.prompt`, 2026-12-07). configs/hydra_b4_prompt_pass.py reran the four
categories that had missed issue 23's 0.97x bar; this reruns every category, so the batch-4
record of Hydra++ is one run of one engine. The same questions (each category's four as one
batch of 4), options, budgets and eight repeats as configs/heads_b4_repeats8.py, Hydra++
alone against plain decoding of the same batch. Journaled: `specjax bench --config
configs/hydra_b4_all_repeats8.py --time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    cfg = load_config(Path(__file__).with_name("heads_b4_repeats8.py"))
    return dataclasses.replace(
        cfg,
        methods=("ar", "hydra@margin"),
        method_args={"hydra@margin": cfg.method_args["hydra@margin"]},
        journal="docs/results/hydra_b4_all_repeats8.journal.jsonl",
        output="docs/results/bench_hydra_b4_all_repeats8.json",
        plot="docs/results/bench_hydra_b4_all_repeats8.png",
    )
