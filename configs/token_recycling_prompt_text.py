"""Token Recycling's two ways of filling the prompt's entries, side by side on the two
Spec-Bench categories with the longest prompts (summarization, rag): its default
(`prompt=top_ids`: the target's top ids at every prompt position, so the prefill computes the
LM head over the whole prompt) and `prompt=text` (each prompt token's successor in the prompt,
so the prefill computes it at the last position alone). Over the 130 questions
(configs/spec_bench_token_recycling_default.py) the default ran at 0.90x (rag) and 0.94x
(summarization) in total time against 0.99x and 0.98x in decode time: rag's ten prefills took
25.3 s against plain decoding's 20.2 s. The settings of that run: 10 questions per category,
128 new tokens, greedy, batch 1, float32, one run each, interleaved with plain decoding.
Journaled: `specjax bench --config configs/token_recycling_prompt_text.py --time-limit
MINUTES`, rerun the same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("spec_bench_model_free_3.py")),
        methods=("ar", "token_recycling", "token_recycling@prompt_text"),
        method_args={"token_recycling@prompt_text": {"prompt": "text"}},
        categories=("summarization", "rag"),
        journal="docs/results/token_recycling_prompt_text.journal.jsonl",
        output="docs/results/bench_token_recycling_prompt_text.json",
        plot="docs/results/bench_token_recycling_prompt_text.png",
    )
