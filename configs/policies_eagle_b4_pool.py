"""Issue 23: the `adaptive` policy's batch rule with pooled estimates, its default since
2026-12-05 (`batch_value=finish batch_trust=1 batch_pool=8`: each row's acceptance estimate
pulled toward the live rows' pooled one with a weight of 8 drafted tokens, since the batch
waits for its lowest, noisiest estimate), for the EAGLE-3 head and prompt lookup at batch 4,
against the EAGLE-3 head's fixed k = 1 (the best fixed length of
configs/policies_eagle_b4_finish.py) and plain decoding of the same batch: the 52 Spec-Bench
questions of configs/ngram_b4.py (each category's four as one batch of 4), 64 new tokens,
greedy, float32, a 1,024-position cache. Journaled: `specjax bench --config
configs/policies_eagle_b4_pool.py --time-limit MINUTES`, rerun the same command to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {}, "eagle@k1": {"k": 1, "policy": "fixed"}, "prompt_lookup": {}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/policies_eagle_b4_pool.journal.jsonl",
        output="docs/results/bench_policies_eagle_b4_pool.json",
        plot="docs/results/bench_policies_eagle_b4_pool.png",
    )
