"""Issue 23's robustness bar (no default below 0.97x of plain decoding at any batch size) for
the default model-free method, `ngram`, above batch 1, where it had not been run: `ngram`
and prompt lookup with their defaults against plain decoding at batch 4, interleaved, 52
Spec-Bench prompts (four per category, the first two those of configs/policies_sweep_pl.py),
each category's four decoded once as one batch of 4 (not a `--batch-sizes` sweep, whose
batches cycle the prompts: `ngram` learns from every answer across calls and would draft a
prompt from its own earlier answer), 64 new tokens, greedy, float32, one static cache of
1,024 positions (the longest prompt has 926 tokens). Since 2026-12-05 `ngram`
chooses per batch: one block is verified for all rows, as long as the longest draft, so the
block length is the one with the most expected tokens of all rows per verify cost
(`specjax.drafters.ngram.batch_choice`); before, each row chose as if alone
(docs/benchmarks_notes.md). Journaled: `specjax bench --config configs/ngram_b4.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(  # the prompts and budgets of configs/policies_sweep_pl.py
        load_config(Path(__file__).with_name("policies_sweep_pl.py")),
        methods=("ar", "ngram", "prompt_lookup"),
        method_args={},
        limit=4,
        cache_len=1024,
        batch_size=4,
        batch_sizes=None,
        sweep_only=False,
        journal="docs/results/ngram_b4.journal.jsonl",
        output="docs/results/bench_ngram_b4.json",
        plot="docs/results/bench_ngram_b4.png",
    )
