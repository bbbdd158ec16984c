"""EAGLE-3 head for SmolLM2-135M-Instruct, second run: continues the shipped head
(`init_from`) on the grown corpus. `specjax train eagle3 --config
configs/train/eagle3_smollm2_b.py`; rerun the same command to continue a stopped run.

The recipe of configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192 kept from
the shipped head, prompt positions at half weight), with a lower peak learning rate for a
warm start and 180 more steps (docs/training.md)."""

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
        _mod.get_config(), out_dir="runs/eagle3_smollm2_b",
        init_from="specjax/heads/shipped/smollm2-135m-eagle3", lr=4e-4, warmup_steps=10)
