"""EAGLE-3 head for SmolLM2-135M-Instruct on a GPU with a larger draft vocabulary: the shipped
head (`gpu5`, 8,192 draft tokens chosen from the first 384-prompt corpus) moved onto 24,576
tokens re-chosen from both corpora (`revocab`: the trained LM-head rows carry over, new tokens
start from the target's output rows), then trained on both corpora at batch 32 x 640.

Why: the 8,192 tokens cover 94.8% of held-out corpus answers but only 86.4% of the target's
own answers to Spec-Bench (summarization 75%), and a token outside the draft vocabulary can
never be drafted; 24,576 re-chosen tokens cover 96.7% there (docs/training.md, "Draft
vocabulary"). Size the run with `--set total_steps=N` and `--time-limit`:

    specjax train eagle3 --config configs/train/eagle3_smollm2_gpu6.py \\
        --data data/corpus_smollm2,data/corpus_magpie --set total_steps=1800 --time-limit 5

Rerun the same command to continue a stopped run (docs/training.md)."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_GPU = Path(__file__).with_name("eagle3_smollm2_gpu.py")  # the recipe this run continues


def get_config() -> TrainConfig:
    base = load_train_config(_GPU)
    return dataclasses.replace(
        base, out_dir="runs/eagle3_smollm2_gpu6", data="data/corpus_smollm2,data/corpus_magpie",
        task_args={**base.task_args, "draft_vocab": 24576, "revocab": True}, lr=4e-4)
