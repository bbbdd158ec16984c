"""EAGLE-3 head for SmolLM2-135M-Instruct, second run: continues the shipped head
(`init_from`) on the grown corpus. `specjax train eagle3 --config
configs/train/eagle3_smollm2_b.py`; rerun the same command to continue a stopped run.

Same recipe as configs/train/eagle3_smollm2.py (3 TTT steps, draft vocabulary 8192 kept from
the shipped head, prompt positions at half weight), with a lower peak learning rate for a
warm start and 180 more steps (~50 minutes on the 2-core CPU; docs/training.md)."""

from specjax.train import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        task="eagle3",
        task_args={"ttt_steps": 3, "draft_vocab": 8192, "prompt_weight": 0.5},
        model="smollm2-135m",
        data="data/corpus_smollm2",
        out_dir="runs/eagle3_smollm2_b",
        init_from="specjax/heads/shipped/smollm2-135m-eagle3",
        seq_len=512,
        batch_size=8,
        lr=4e-4,
        warmup_steps=10,
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
