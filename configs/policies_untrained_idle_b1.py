"""Issue 23's robustness bar for the drafters that are not trained for the target, after their
default `idle_decay` went from 0.98 to 0.995 (2026-12-01, fourteenth session): the draft model
(`draft_model`, by default the target's first 5 of 30 layers) and the early exit
(`early_exit`) built with no options (`adaptive` with this machine's measured step costs, k up
to 3, `idle_decay = 0.995`; `specjax.methods.CHAIN_DEFAULTS`), and the same two with
`idle_decay = 0.98` (labelled `@idle098`; the default of
configs/policies_untrained_default_b1.py), against plain
decoding, interleaved. `layer_skip` is not here: no draft pays at its prior on this machine, so
it decodes plainly whatever the decay (configs/policies_untrained_default_b1.py: 1.00x).

The same 13 prompts (one Spec-Bench question per category), 64 new tokens, greedy, float32
and static cache of 896 positions as configs/policies_untrained_default_b1.py; 3 repeats (the
median per category). Journaled: `specjax bench --config configs/policies_untrained_idle_b1.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    old = {f"{m}@idle098": {"idle_decay": 0.98} for m in ("draft_model", "early_exit")}
    return dataclasses.replace(  # the prompts and budgets of configs/policies_draft_cost.py
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        methods=("ar", "draft_model", "early_exit", *old),
        method_args=old,
        batch_sizes=None,
        repeats=3,
        journal="docs/results/policies_untrained_idle_b1.journal.jsonl",
        output="docs/results/bench_policies_untrained_idle_b1.json",
        plot="docs/results/bench_policies_untrained_idle_b1.png",
    )
