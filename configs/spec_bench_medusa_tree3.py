"""Issue 21 / 23's benchmark (configs/spec_bench_heads.py: 10 questions per Spec-Bench
category, 130 in all, 128 new tokens, greedy, batch 1, float32) for the shipped Medusa-1 heads
under their batch-1 default (`adaptive` chains of up to 3 tokens, `idle_decay` 0.995) against
a static 3-node tree in the same 4-token verify block (the two best first tokens and the best
second after the first, `fixed:0,1,0.0`) under the same policy: `adaptive` cuts the tree at
the depth that pays, each depth priced by the step timed in the decode loop, and stops
drafting where no depth does. The tree at a fixed depth led the default by 6% (1.060x) on
26 prompts (configs/heads_trees_b1.py). Journaled: rerun the same command to continue
(`--time-limit MINUTES`). Since this run the tree is `medusa`'s greedy batch-1 default, so a
fresh rerun builds `medusa` as the tree too: add `--method-arg medusa.k=3` for the chain as
recorded here (the config stays the record of its command: tests/test_bench.py)."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    args = {"medusa": {},
            "medusa@tree3": {"tree": "fixed:0,1,0.0", "policy": "adaptive",
                             "idle_decay": 0.995}}
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_heads.py")),
        methods=("ar", *args),
        method_args=args,
        journal="docs/results/spec_bench_medusa_tree3.journal.jsonl",
        output="docs/results/bench_spec_bench_medusa_tree3.json",
        plot="docs/results/bench_spec_bench_medusa_tree3.png",
    )
