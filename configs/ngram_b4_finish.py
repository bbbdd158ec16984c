"""`ngram` and prompt lookup at batch 4 after 2026-12-05's change to `ngram`'s batch choice:
a verify block is worth how soon the batch would finish at the rows' expected tokens per
step (a static batch ends with its last row, so tokens won by a row that is ahead shorten
nothing; `specjax.drafters.ngram.batch_choice`, `batch_value=finish`), where it was the
expected tokens of all live rows, and the estimates it weighs are scaled by 0.8
(`batch_trust`; they promised 1.24 times the tokens accepted). The settings of
configs/ngram_b4_verify_in_place.py (52 Spec-Bench questions, each category's four as one
batch of 4, 64 new tokens, float32, a 1,024-position cache), whose record holds the earlier
rule under the same prices. Journaled: `specjax bench --config configs/ngram_b4_finish.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        journal="docs/results/ngram_b4_finish.journal.jsonl",
        output="docs/results/bench_ngram_b4_finish.json",
        plot="docs/results/bench_ngram_b4_finish.png",
    )
