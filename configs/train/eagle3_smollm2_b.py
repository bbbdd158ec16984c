"""EAGLE-3 head for SmolLM2-135M-Instruct, second run: continues the shipped head
(`init_from`) on the grown corpus. `specjax train eagle3 --config
configs/train/eagle3_smollm2_b.py`; rerun the same command to continue a stopped run.

The recipe of configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192 kept from
the shipped head, prompt positions at half weight), with a lower peak learning rate for a
warm start and 180 more steps (docs/training.md)."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_FIRST = Path(__file__).with_name("eagle3_smollm2.py")  # the recipe this run continues


def get_config() -> TrainConfig:
    return dataclasses.replace(
        load_train_config(_FIRST), out_dir="runs/eagle3_smollm2_b",
        init_from="specjax/heads/shipped/smollm2-135m-eagle3", lr=4e-4, warmup_steps=10)
