"""The shipped Medusa-1 and Hydra++ heads (trained on an H200, 2026-11-26, third GPU session)
against plain decoding on Spec-Bench: 10 questions per category (130), 128 new tokens, greedy,
batch 1, float32, chains of k = 3 (each drafter's default; issue 21's 1.1x bar). Journaled:
rerun the same command to continue (`--time-limit MINUTES` per session).
Since 2026-12-07 a bare `medusa` builds a 3-node tree greedy at batch 1: rerun with
`--method-arg medusa.k=3` for the chain recorded here (configs/README.md)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "medusa", "hydra"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/spec_bench_heads_mh.journal.jsonl",
        output="docs/results/bench_spec_bench_heads_mh.json",
        plot="docs/results/bench_spec_bench_heads_mh.png",
    )
