"""Hydra++'s batch-4 default in the four categories where it missed issue 23's 0.97x bar with
eight repeats (configs/heads_b4_repeats8.py: humanities 0.939x, rag 0.942x, summarization
0.948x, writing 0.962x), rerun since its prompt pass runs the prefix layer's queries,
attention and MLP at each row's last position only (`PrefixLayer.prompt`, 2026-12-07: 478 ->
33 ms at batch 4 and 1,024 positions). The same questions (each category's four as one batch
of 4), options, budgets and eight repeats, Hydra++ alone against plain decoding of the same
batch. Journaled: `specjax bench --config configs/hydra_b4_prompt_pass.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    # Hydra++ alone against plain decoding, as configs/hydra_b4_all_repeats8.py (which reruns
    # every category), in these four categories
    return dataclasses.replace(
        load_config(Path(__file__).with_name("hydra_b4_all_repeats8.py")),
        categories=("writing", "humanities", "summarization", "rag"),
        journal="docs/results/hydra_b4_prompt_pass.journal.jsonl",
        output="docs/results/bench_hydra_b4_prompt_pass.json",
        plot="docs/results/bench_hydra_b4_prompt_pass.png",
    )
