"""The model-free drafters against plain decoding on Spec-Bench (issue 24's benchmark), fourth
run: prompt lookup (the baseline) and ``ngram`` at their defaults, two repeats, after the
drafter ``plan`` hook (2026-12-03: a step where the lookups find nothing is an idle step, a
plain forward, for both) and the heads-first KV cache. The third run
(configs/spec_bench_model_free_3.py) timed each method once per question, and its gaps
between the two methods on four long questions did not hold up under repeated A/Bs; here
the bench runs a learning drafter's repeats of a question back to back, each from the suffix
cache and datastore as they were before the question (they learn every answer, in question
order, as they would serving these requests). 10 questions per category (130), 128 new
tokens, greedy, batch 1, float32 exact numerics. Journaled: rerun the same command to
continue (`--time-limit MINUTES` per session)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "ngram"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=2,
        journal="docs/results/spec_bench_model_free_4.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free_4.json",
        plot="docs/results/bench_spec_bench_model_free_4.png",
    )
