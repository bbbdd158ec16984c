"""Issue 23: the EAGLE policies at batch 4 once the verify step stopped copying the KV cache.

Until 2026-11-27 every verify step of the exact numerics copied each layer's keys and values
(a lax.switch over verify sizes whose branches wrote the cache into a copy: 165 MB per step at
batch 4 with this cache), which put fixed k = 3 at 0.84x of plain decoding at batch 4 and made
the measured drafting overhead so large (o = 0.33) that adaptive and smartspec drafted nothing
there (configs/policies_overhead.py). The four built-in prompts as one batch of 4 rows, 64 new
tokens, greedy, float32, one static cache of 896 positions, 2 repeats; fixed k = 1 and k = 3
beside the cost-aware policies (k <= 6, costs measured at batch 4), against plain decoding of
the same batch. Journaled: `specjax bench --config configs/policies_copyfree.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("policies_draft_cost.py")),
        prompts="builtin",
        limit=None,
        batch_size=4,
        batch_sizes=None,
        repeats=2,
        journal="docs/results/policies_copyfree.journal.jsonl",
        output="docs/results/bench_policies_copyfree.json",
        plot="docs/results/bench_policies_copyfree.png",
    )
