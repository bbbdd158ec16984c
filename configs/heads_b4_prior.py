"""The shipped Medusa-1 and Hydra++ heads at batch 4 under their default since 2026-12-07
(fiftieth session): `adaptive` starting from each head's measured first-token acceptance
(Medusa-1 0.26, Hydra++ 0.335 over Spec-Bench at batch 1; `prior_accepted` and
`prior_rejected` at the even prior's weight of 2) instead of the even prior, with the
`idle_decay` 0.995 and `min_gain` 1.1 of configs/heads_b4_repeats8.py, given explicitly so
the record keeps its meaning if the default moves. On this CPU a one-token step costs
1.25-1.31 plain steps at batch 4 with a 1,024-position cache, so neither head's draft pays at
that acceptance under the margin and both decode plainly from the start
(`specjax.engine.drafting_off`), where the even prior probed each batch (Hydra++ 0.975x
pooled, configs/hydra_b4_all_repeats8.py). The same 52 questions (each category's four as one
batch of 4), 64 new tokens, greedy, float32, a 1,024-position cache and eight repeats, against
plain decoding of the same batch. Journaled: `specjax bench --config configs/heads_b4_prior.py
--time-limit MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    margin = {"policy": "adaptive", "idle_decay": 0.995, "min_gain": 1.1}
    args = {"medusa@prior": {**margin, "prior_accepted": 0.52, "prior_rejected": 1.48},
            "hydra@prior": {**margin, "prior_accepted": 0.67, "prior_rejected": 1.33}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("heads_b4_repeats8.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/heads_b4_prior.journal.jsonl",
        output="docs/results/bench_heads_b4_prior.json",
        plot="docs/results/bench_heads_b4_prior.png",
    )
