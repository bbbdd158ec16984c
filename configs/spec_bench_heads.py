"""The trained head drafters against plain decoding on Spec-Bench: 10 questions per category
(130), 128 new tokens, greedy, batch 1, float32 (issue 21's benchmark). EAGLE as a chain
(k = 3: a 4-token verify block, 1.5x a plain step on this CPU) and as an EAGLE-2 dynamic tree
of 7 nodes (an 8-token block, 1.8x). Journaled: rerun the same command to continue."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "eagle", "eagle@tree"),
        method_args={"eagle": {"k": 3},
                     "eagle@tree": {"tree": "dynamic:width=3,nodes=7,depth=4"}},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/spec_bench_heads.journal.jsonl",
        output="docs/results/bench_spec_bench_heads.json",
        plot="docs/results/bench_spec_bench_heads.png",
    )
