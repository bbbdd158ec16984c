"""The three Spec-Bench categories where ``ngram`` stayed behind prompt lookup
(configs/spec_bench_model_free_5_behind.py: translation 1.78x against 1.80x, summarization
1.18x against 1.19x, rag 1.15x against 1.17x), timed with ``ngram``'s new default sources
(``suffix``, ``prompt_lookup``, ``sssd`` since 2026-12-04: token recycling dropped after an
offline replay of its choices, docs/benchmarks_notes.md, "``ngram``'s choices replayed
offline"). Otherwise the fifth run's settings: prompt lookup and ``ngram`` at their defaults,
the first 10 questions of each category (30), two repeats, 128 new tokens, greedy, batch 1,
float32 exact numerics. Journaled: rerun the same command to continue."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "ngram"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        categories=("translation", "summarization", "rag"),
        limit=10,
        max_new_tokens=128,
        repeats=2,
        journal="docs/results/spec_bench_model_free_6_behind.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free_6_behind.json",
        plot="docs/results/bench_spec_bench_model_free_6_behind.png",
    )
