"""STAND for N samples of one question (issue 24): 8 samples per question at temperature 0.7
on 20 Spec-Bench math_reasoning questions, the samples of a question decoded one after another
(batch 1) in one call, so later samples draft from the tables the earlier ones filled
(``memory=call``, the default), against plain sampling of the same samples. Journaled:
`specjax bench --config configs/stand_math.py` continues where it stopped."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "stand"),
        method_args={"stand": {"k": 3}},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        categories=("math_reasoning",),
        limit=20,
        max_new_tokens=128,
        batch_size=1,
        samples=8,
        temperature=0.7,
        repeats=1,
        output="docs/results/bench_stand_math.json",
        plot="docs/results/bench_stand_math.png",
        journal="docs/results/stand_math.journal.jsonl",
        time_limit=40,
    )
