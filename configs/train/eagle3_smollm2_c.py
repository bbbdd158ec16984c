"""EAGLE-3 head for SmolLM2-135M-Instruct, third run: continues the second run's head
(`init_from`, float32) on the 13-shard corpus for a second pass over it. `specjax train eagle3
--config configs/train/eagle3_smollm2_c.py`; rerun the same command to continue a stopped run.

The recipe of configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192 kept from the
shipped head, prompt positions at half weight) with a peak learning rate of 3e-4 and 300 steps
(about 1.5 epochs of 1,624 training records). Without runs/eagle3_smollm2_b (another machine),
start from the shipped head instead: --init-from specjax/heads/shipped/smollm2-135m-eagle3."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_FIRST = Path(__file__).with_name("eagle3_smollm2.py")  # the recipe this run continues


def get_config() -> TrainConfig:
    return dataclasses.replace(
        load_train_config(_FIRST), out_dir="runs/eagle3_smollm2_c",
        init_from="runs/eagle3_smollm2_b/head", lr=3e-4, warmup_steps=10, total_steps=300,
        eval_every=50)
