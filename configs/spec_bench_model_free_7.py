"""The model-free drafters against plain decoding on all 13 Spec-Bench categories (issue 24's
benchmark), seventh run: the fourth run's settings (configs/spec_bench_model_free_4.py) with
``ngram``'s default sources since 2026-12-04 (``suffix``, ``prompt_lookup``, ``sssd``: token
recycling dropped after the offline replay of its choices, docs/benchmarks_notes.md,
"``ngram``'s choices replayed offline"). Prompt lookup and ``ngram`` at their defaults, the
first 10 questions of each category (130), two repeats (a learning drafter's repeats of a
question run back to back, each from the suffix cache and datastore as they were before the
question), 128 new tokens, greedy, batch 1, float32 exact numerics. Journaled: rerun the
same command to continue (`--time-limit MINUTES` per session)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "ngram"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=2,
        journal="docs/results/spec_bench_model_free_7.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free_7.json",
        plot="docs/results/bench_spec_bench_model_free_7.png",
    )
