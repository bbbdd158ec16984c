"""The shipped Hydra++ head stored as int8 rows (since 2026-11-28: 20 MB instead of 40 MB, so
that the shipped heads stay under 60 MB together) against the same head in bfloat16 as it
shipped before, and plain decoding: Spec-Bench, one question per category (13), 128 new
tokens, greedy, batch 1, float32, chains of k = 3 (Hydra's default). The bfloat16 head is the
file at commit a9771f3; put it back with

    mkdir -p runs/hydra_bf16_shipped && for f in config.json model.safetensors; do
      git show a9771f3:specjax/heads/shipped/smollm2-135m-hydra/$f > runs/hydra_bf16_shipped/$f
    done

Journaled: rerun the same command to continue."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "hydra", "hydra@bf16"),
        method_args={"hydra@bf16": {"head": "runs/hydra_bf16_shipped"}},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=1,
        max_new_tokens=128,
        repeats=1,
        journal="docs/results/hydra_int8.journal.jsonl",
        output="docs/results/bench_hydra_int8.json",
        plot="docs/results/bench_hydra_int8.png",
    )
