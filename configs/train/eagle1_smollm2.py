"""EAGLE-1 head for SmolLM2-135M-Instruct on this project's 2-core CPU: `specjax train eagle1
--config configs/train/eagle1_smollm2.py`; rerun the same command to continue a stopped run.

EAGLE-1 (card C21): the target's normed last hidden state and the next token's embedding,
fused by fc (2h -> h), one decoder layer; its output regresses the next position's feature
(smooth-L1, weight 1.0) and feeds a draft LM head (weight 0.1 on the token loss, as in the
paper) whose rows start from the target's output rows, so a head that predicts the next
feature well predicts the target's token. The recipe of the first CPU EAGLE-3 run
(configs/train/eagle3_smollm2.py: 3 training-time-test steps, draft vocabulary 8,192,
prompt positions at half weight, AdamW (0.9, 0.95), clip 0.5, batch 8 x 512, 180 steps) on
the whole 8,192-prompt corpus, so the two variants are compared at the same CPU cost
(18.5 s a step with evaluations, 55.6 minutes on 2026-12-02). It was trained on a CPU because
no GPU was lent in the
sessions after the EAGLE-3 GPU runs; a GPU session can go on from its head with
`--init-from runs/eagle1_smollm2/head` and a config of its own (see eagle3_smollm2_gpu.py)."""

import dataclasses
from pathlib import Path

from specjax.train import TrainConfig, load_train_config

_EAGLE3 = Path(__file__).with_name("eagle3_smollm2.py")  # the CPU recipe this one mirrors


def get_config() -> TrainConfig:
    return dataclasses.replace(load_train_config(_EAGLE3), task="eagle1",
                               out_dir="runs/eagle1_smollm2")
