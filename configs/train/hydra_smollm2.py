"""Hydra++ heads for SmolLM2-135M-Instruct: `specjax train hydra --config
configs/train/hydra_smollm2.py` (after building the corpus, see docs/training.md). Rerun the
same command to continue a stopped run. Hydra++'s recipe: 4 heads of 4 residual blocks, the
prefix attention layer, teacher distillation, lr 5e-4 cosine to a third, weight decay 0.1."""

from specjax.train import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        task="hydra",
        task_args={"num_heads": 4, "mlp_layers": 4, "prefix_attention": True,
                   "draft_vocab": 8192},
        model="smollm2-135m",
        data="data/corpus_smollm2",
        out_dir="runs/hydra_smollm2",
        seq_len=512,
        batch_size=8,
        lr=5e-4,
        warmup_steps=50,
        total_steps=1000,
        end_lr_ratio=0.33,
        weight_decay=0.1,
        b1=0.9,
        b2=0.95,
        clip_norm=0.5,
        save_every=50,
        eval_every=100,
    )
