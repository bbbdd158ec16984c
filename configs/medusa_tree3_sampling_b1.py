"""Issue 21 / 23 (a scouting run): the shipped Medusa-1 heads when sampling (temperature 0.7)
at batch 1, where `medusa` kept its chain default (`adaptive` chains of up to 3 tokens,
`idle_decay` 0.995), against the 3-node static tree it drafts by default when greedy
(`fixed:0,1,0.0` under the same policy, verified by the lossless tree-sampling rule). Two
questions per Spec-Bench category (26 prompts), 128 new tokens, float32, one sample each,
against plain sampling in the same run. Since the 130-question run
(configs/spec_bench_medusa_tree3_sampling.py) the tree is `medusa`'s batch-1 default when
sampling too, so a rerun builds `medusa` as the tree: add `--method-arg medusa.k=3` for the
chain as recorded here (this file stays the record of its command). Journaled: `specjax
bench --config configs/medusa_tree3_sampling_b1.py --time-limit MINUTES`, rerun to
continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    # the methods of the greedy 130-question run, sampled on 2 questions per category
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_medusa_tree3.py")),
        limit=2,
        temperature=0.7,
        journal="docs/results/medusa_tree3_sampling_b1.journal.jsonl",
        output="docs/results/bench_medusa_tree3_sampling_b1.json",
        plot="docs/results/bench_medusa_tree3_sampling_b1.png",
    )
