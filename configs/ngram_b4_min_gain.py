"""`ngram` at batch 4 drafting only its confident chains: the run of configs/ngram_b4.py (52
Spec-Bench questions, each category's four as one batch of 4, 64 new tokens, float32, a
1,024-position cache) with `ngram` given `min_gain=0.6` (a chain is cut where the chance that
all its tokens so far are accepted falls below 0.6; the default is 0.3). Its default ran at
0.90x of plain decoding there, and at 1.00x in decode time when it never drafts
(configs/ngram_b4_floor.py): a diagnostic of whether the marginal drafts are what lose at
batch 4. Journaled: `specjax bench --config configs/ngram_b4_min_gain.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "ngram@min_gain_06"),
        method_args={"ngram@min_gain_06": {"min_gain": "0.6"}},
        journal="docs/results/ngram_b4_min_gain.journal.jsonl",
        output="docs/results/bench_ngram_b4_min_gain.json",
        plot="docs/results/bench_ngram_b4_min_gain.png",
    )
