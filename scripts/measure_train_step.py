"""Where a head-training step's time goes: the frozen target's pass alone (what storing
features would save) against the whole jitted train step (forward + backward + AdamW), on the
real corpus's shapes. Prints JSON; used for the features decision in docs/training.md.

    python scripts/measure_train_step.py --task eagle3 --batch 8 --seq 512 --repeats 3
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.bench.timing import median_seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="eagle3")
    ap.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    from specjax.models.loaders import load
    from specjax.train.task import TASKS
    from specjax.train.tasks._target import target_pass

    lm = load(a.model)
    args = dict(kv.split("=", 1) for kv in a.task_arg)
    task = TASKS.build(a.task, args, lm)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    rng = np.random.default_rng(0)
    V = lm.model.cfg.vocab_size
    batch = {"tokens": jnp.asarray(rng.integers(0, V, (a.batch, a.seq)), jnp.int32),
             "loss_mask": jnp.ones((a.batch, a.seq), jnp.int32),
             "lengths": jnp.full((a.batch,), a.seq, jnp.int32)}
    layers = getattr(getattr(task, "head_cfg", None), "feature_layers", ())
    opt = optax.adamw(1e-4)
    opt_state = opt.init(params)

    @jax.jit
    def target_only(frozen, tokens):
        tp = target_pass(task.target_graphdef, frozen, tokens, layers)
        return tp.logits.sum() + tp.final_hidden.sum() + sum(h.sum() for h in tp.hidden)

    @jax.jit
    def step(params, opt_state, frozen, batch):
        (loss, _), g = jax.value_and_grad(task.loss, has_aux=True)(
            params, frozen, batch, jax.random.key(0))
        upd, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, upd), opt_state, loss

    def timed(fn):
        return median_seconds(fn, repeats=a.repeats)

    t_target = timed(lambda: target_only(frozen, batch["tokens"]))
    t_step = timed(lambda: step(params, opt_state, frozen, batch))
    tokens = a.batch * a.seq
    print(json.dumps({
        "task": a.task, "task_args": args, "batch": a.batch, "seq": a.seq,
        "target_pass_s": round(t_target, 3), "train_step_s": round(t_step, 3),
        "target_share": round(t_target / t_step, 3),
        "tokens_per_s": round(tokens / t_step, 1),
        "feature_bytes_per_token_bf16": 2 * lm.model.cfg.hidden_size * (len(layers) + 1),
        "machine": f"{jax.devices()[0].platform}, {jax.device_count()} device(s)",
    }, indent=2))


if __name__ == "__main__":
    main()
