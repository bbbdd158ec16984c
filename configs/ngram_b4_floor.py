"""What `ngram` costs at batch 4 when it never drafts: the run of configs/ngram_b4.py (52
Spec-Bench questions, each category's four as one batch of 4, 64 new tokens, float32, a
1,024-position cache) with `ngram` given `min_gain=0.9999`, so no chain is ever trusted and
every step is an idle step: a plain forward, plus the three sources' lookups that `ngram`
runs before each step to decide. Its gap to plain decoding is the floor its drafts must
first pay for at batch 4 (`ngram` at its default ran at 0.90x there, below issue 23's 0.97x
bar). Journaled: `specjax bench --config configs/ngram_b4_floor.py --time-limit MINUTES`,
rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "ngram@floor"),
        method_args={"ngram@floor": {"min_gain": "0.9999"}},
        journal="docs/results/ngram_b4_floor.journal.jsonl",
        output="docs/results/bench_ngram_b4_floor.json",
        plot="docs/results/bench_ngram_b4_floor.png",
    )
