"""Medusa-1 heads for SmolLM2-135M-Instruct: `specjax train medusa --config
configs/train/medusa_smollm2.py` (after building the corpus, see docs/training.md). Rerun the
same command to continue a stopped run."""

from specjax.train import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        task="medusa",
        task_args={"num_heads": 3, "draft_vocab": 8192, "shared_out": True},
        model="smollm2-135m",
        data="data/corpus_smollm2",
        out_dir="runs/medusa_smollm2",
        seq_len=512,
        batch_size=8,
        lr=1e-3,
        warmup_steps=50,
        total_steps=1000,
        b1=0.9,
        b2=0.95,
        clip_norm=0.5,
        save_every=50,
        eval_every=100,
    )
