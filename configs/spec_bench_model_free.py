"""The model-free drafters against plain decoding on Spec-Bench (issue 24's benchmark): 10
questions per category (130), 128 new tokens, greedy, batch 1, float32. Each method at its
defaults: prompt lookup (the baseline), ``ngram`` (suffix cache + prompt lookup + token
recycling, the best source per row and step), Token Recycling's own figure, and SSSD (the
request's text + the datastore shipped for SmolLM2, with the machine's flat-latency budget).
The suffix cache and the SSSD datastore learn from every answer, in question order, as they
would serving these requests. Journaled; stopped at 33 of 130 questions (2026-11-28): its
``ngram`` (a flat cut of each source's chain, token recycling from the target's top ids) is
no longer the method's default, so the journal no longer continues (the header check refuses
the changed configuration). Superseded by configs/spec_bench_model_free_2.py."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "prompt_lookup", "ngram", "token_recycling", "sssd"),
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=10,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/spec_bench_model_free.journal.jsonl",
        output="docs/results/bench_spec_bench_model_free.json",
        plot="docs/results/bench_spec_bench_model_free.png",
    )
