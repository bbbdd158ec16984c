"""The model-free drafters against plain decoding on Spec-Bench (issue 24's benchmark), third
run: ``ngram`` as of 2026-11-28 evening, with the SSSD datastore as its fourth default source
(besides the suffix cache, prompt lookup and token recycling from the row's own text; per row
and step the source and length with the most expected tokens per verify cost on this
machine's curve), and SSSD's datastore lookup vectorised over context orders (same drafts,
less work per step). 10 questions per category (130), 128 new tokens, greedy, batch 1,
float32. Each method at its defaults: prompt lookup (the baseline), ``ngram``, Token
Recycling's own figure, and SSSD (the request's text + the datastore shipped for SmolLM2,
with the machine's flat-latency budget). The suffix cache and the SSSD datastores learn from
every answer, in question order, as they would serving these requests. Journaled: rerun the
same command to continue (`--time-limit MINUTES` per session). The second run
(configs/spec_bench_model_free_2.py) stopped at 18 questions when ``ngram``'s sources
changed."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "ngram", "token_recycling", "sssd"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/spec_bench_model_free_3.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free_3.json",
        plot="docs/results/bench_spec_bench_model_free_3.png",
    )
