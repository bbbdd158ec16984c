"""Issue 23: the EAGLE-3 head at batch 4 after the speculative loop's verify forward began
writing the target's cache in place (2026-12-05): its drafting steps, measured in the decode
loop at batch 4, cost 1.34 plain steps for a one-token draft and 1.87 for three (1.73 and more
before), so drafting can pay above batch 1 on this CPU where it could not. The `adaptive`
default (since 2026-12-05 choosing one block length for the batch by how soon the batch would
finish, `batch_value=finish`, with each row's extra tokens scaled by `batch_trust=0.8`) against
the same rule trusting its estimates (`batch_trust=1`), the earlier batch rule
(`batch_value=rows`), the fixed lengths k = 1 and 2, and plain decoding of the same batch: the
52 Spec-Bench questions of configs/ngram_b4.py (each category's four as one batch of 4), 64 new
tokens, greedy, float32, a 1,024-position cache. Journaled: `specjax bench --config
configs/policies_eagle_b4_finish.py --time-limit MINUTES`, rerun the same command to
continue.

As run (2026-12-05), `eagle` was the default of that hour (`batch_trust=0.8`) and
`eagle@trust1` `batch_trust=1`, both without pooling (`batch_pool` came after this run and
now defaults to 8, with `batch_trust=1`: configs/policies_eagle_b4_pool.py); a rerun decodes
with today's defaults."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"eagle": {}, "eagle@trust1": {"batch_trust": 1.0},
            "eagle@rows": {"batch_value": "rows"},
            "eagle@k1": {"k": 1, "policy": "fixed"}, "eagle@k2": {"k": 2, "policy": "fixed"}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/policies_eagle_b4_finish.journal.jsonl",
        output="docs/results/bench_policies_eagle_b4_finish.json",
        plot="docs/results/bench_policies_eagle_b4_finish.png",
    )
