"""EAGLE-3 head for SmolLM2-135M-Instruct: `specjax train eagle3 --config
configs/train/eagle3_smollm2.py` on the committed corpus data/corpus_smollm2 (docs/training.md).
Rerun the same command to continue a stopped run.

A session-sized recipe for this 2-core CPU: a train step over 8 x 512 positions takes ~16 s
(scripts/measure_train_step.py; the frozen target's pass is 55% of it), so 180 steps is about
50 minutes, ~2 epochs of the 768-prompt corpus. Prompt positions count at half weight (free
extra teacher signal on a small corpus). To go on in a later session, on a grown corpus,
start a new run from the shipped head: --init-from specjax/heads/shipped/smollm2-135m-eagle3
--out-dir runs/eagle3_smollm2_b."""

from specjax.train import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        task="eagle3",
        task_args={"ttt_steps": 3, "draft_vocab": 8192, "prompt_weight": 0.5},
        model="smollm2-135m",
        data="data/corpus_smollm2",
        out_dir="runs/eagle3_smollm2",
        seq_len=512,
        batch_size=8,
        lr=6e-4,
        warmup_steps=15,
        total_steps=180,
        b1=0.9,
        b2=0.95,
        clip_norm=0.5,
        save_every=30,
        eval_every=60,
        eval_batches=2,
        log_every=5,
        max_steps_this_run=None,
    )
