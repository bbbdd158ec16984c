"""Issue 23's robustness bar (no category below 0.97x of plain decoding) for the Medusa-1 and
Hydra++ heads' batch-1 default since 2026-12-03: `adaptive` with this machine's measured step
costs and `idle_decay` 0.995, k up to 3 (specjax.methods.CHAIN_DEFAULTS). The same run as
configs/spec_bench_heads_mh.py (which measured the earlier default, fixed k = 3): 10 Spec-Bench
questions per category (130), 128 new tokens, greedy, batch 1, float32, against plain decoding,
interleaved. On a fresh machine each head's first use measures its step costs (a few minutes,
cached). Journaled: `specjax bench --config configs/spec_bench_heads_mh_default.py --time-limit
MINUTES`, rerun the same command to continue.
Since 2026-12-07 a bare `medusa` builds a 3-node tree greedy at batch 1: rerun with
`--method-arg medusa.k=3` for the chain recorded here (configs/README.md)."""

import dataclasses
from pathlib import Path

from specjax.experiment import load_config


def get_config():
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads_mh.py")),
        journal="docs/results/spec_bench_heads_mh_default.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_mh_default.json",
        plot="docs/results/bench_spec_bench_heads_mh_default.png",
    )
