"""Issue 23: why the EAGLE-3 head's dynamic default trails fixed k = 1 at batch 4
(configs/policies_eagle_b4_pool.py: 1.05x against 1.08x, decode 1.09x against 1.15x): the
policy weighs a draft against a price about 5% too high (the probe's 1.34 plain steps for a
one-token step where the run's steps cost about 1.29; the idle-step reading of one category,
1.05 plain steps, was not borne out by the probe, which times the idle step at 1.009). Here
`eagle@idle105` prices the drafting steps 5% lower (the measured 1.34 / 1.87 plain steps
divided by 1.05: `step_cost=1,1.276,1.781,1.781`), against the default and fixed k = 1, on
the same 52
Spec-Bench questions (each category's four as one batch of 4), 64 new tokens, greedy, float32,
a 1,024-position cache. Journaled: `specjax bench --config configs/policies_eagle_b4_idle.py
--time-limit MINUTES`, rerun the same command to continue. (Run at commit 6b8d2e6 from a copy
of this config under /tmp, its journal copied here.)"""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {}, "eagle@idle105": {"step_cost": "1,1.276,1.781,1.781"},
            "eagle@k1": {"k": 1, "policy": "fixed"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/policies_eagle_b4_idle.journal.jsonl",
        output="docs/results/bench_policies_eagle_b4_idle.json",
        plot="docs/results/bench_policies_eagle_b4_idle.png",
    )
