"""EAGLE-3 head for SmolLM2-135M-Instruct, third run: continues the second run's head
(`init_from`, float32) on the 13-shard corpus for a second pass over it. `specjax train eagle3
--config configs/train/eagle3_smollm2_c.py`; rerun the same command to continue a stopped run.

The recipe of configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192 kept from the
shipped head, prompt positions at half weight) with a peak learning rate of 3e-4 and 300 steps
(about 1.5 epochs of 1,624 training records). Without runs/eagle3_smollm2_b (another machine),
start from the shipped head instead: --init-from specjax/heads/shipped/smollm2-135m-eagle3."""

import dataclasses
import importlib.util
from pathlib import Path

from specjax.train import TrainConfig

_first = Path(__file__).with_name("eagle3_smollm2.py")
_spec = importlib.util.spec_from_file_location("eagle3_smollm2", _first)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


def get_config() -> TrainConfig:
    return dataclasses.replace(
        _mod.get_config(), out_dir="runs/eagle3_smollm2_c",
        init_from="runs/eagle3_smollm2_b/head", lr=3e-4, warmup_steps=10, total_steps=300,
        eval_every=50)
