"""Hydra++ heads for SmolLM2-135M-Instruct on a GPU (a lent H100/H200): the recipe of
configs/train/hydra_smollm2.py at batch 32 x 640 instead of 8 x 512 (640 tokens hold every
record of the finished corpus whole). Size the run to the time you have with `--set
total_steps=N` and bound it with `--time-limit`; `bash scripts/gpu_train_eagle3.sh heads OUT`
does both (docs/training.md). Rerun the same command to continue a stopped run."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_CPU = Path(__file__).with_name("hydra_smollm2.py")  # the recipe this one scales up


def get_config() -> TrainConfig:
    return dataclasses.replace(
        load_train_config(_CPU), out_dir="runs/hydra_smollm2_gpu", batch_size=32, seq_len=640,
        save_every=250, eval_every=250, eval_batches=4, log_every=25)
