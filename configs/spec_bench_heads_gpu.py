"""The GPU-trained EAGLE-3 head (shipped 2026-11-26) against plain decoding on Spec-Bench: 10
questions per category (130), 128 new tokens, greedy, batch 1, float32 (issue 21's benchmark),
as a chain of k = 3 and as an EAGLE-2 dynamic tree of 7 nodes. The same design as
configs/spec_bench_heads.py (the first CPU-trained head), in a journal of its own. Journaled:
rerun the same command to continue (`--time-limit MINUTES` per session)."""

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
        journal="docs/results/spec_bench_heads_gpu.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_gpu.json",
        plot="docs/results/bench_spec_bench_heads_gpu.png",
    )
