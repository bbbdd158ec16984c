"""EAGLE-3 head for SmolLM2-135M-Instruct: `specjax train eagle3 --config
configs/train/eagle3_smollm2.py` (after `specjax train data --out corpus/smollm2 ...`, see
docs/training.md). Rerun the same command to continue a stopped run."""

from specjax.train import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        task="eagle3",
        task_args={"ttt_steps": 3, "draft_vocab": 8192},
        model="smollm2-135m",
        data="data/corpus_smollm2",
        out_dir="runs/eagle3_smollm2",
        seq_len=512,
        batch_size=8,
        lr=3e-4,
        warmup_steps=100,
        total_steps=4000,
        b1=0.9,
        b2=0.95,
        clip_norm=0.5,
        save_every=100,
        eval_every=200,
        max_steps_this_run=None,
    )
