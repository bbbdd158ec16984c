"""EAGLE-3 head for SmolLM2-135M-Instruct on a GPU (a lent H100/H200): the recipe of
configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192, prompt positions at half
weight) at batch 32 x 640 instead of 8 x 512 (640 tokens hold every record of the corpus
whole), starting from the shipped head, on the corpus grown to its 8,192 prompts. Size the run
to the time you have with `--set total_steps=N` (a
step's time: scripts/measure_train_step.py --batch 32) and bound it with `--time-limit`:

    specjax train eagle3 --config configs/train/eagle3_smollm2_gpu.py --set total_steps=1500 \\
        --time-limit 4

Rerun the same command to continue a stopped run (docs/training.md)."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_FIRST = Path(__file__).with_name("eagle3_smollm2.py")  # the recipe this run continues


def get_config() -> TrainConfig:
    return dataclasses.replace(
        load_train_config(_FIRST), out_dir="runs/eagle3_smollm2_gpu",
        init_from="specjax/heads/shipped/smollm2-135m-eagle3", batch_size=32, seq_len=640,
        lr=5e-4,
        warmup_steps=40, total_steps=1500, save_every=250, eval_every=250, eval_batches=4,
        log_every=25)
