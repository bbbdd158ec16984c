"""The Medusa training task and head files: the loss against a hand computation, training
reduces it, trained heads load into the drafter (greedy identity, chains and trees), and bad
files get clear errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from spec_helpers import make_target, mixed_prompts

from specjax import drafters
from specjax.config import tiny_config
from specjax.engine import generate
from specjax.errors import CheckpointError, ConfigError, DrafterError
from specjax.heads.medusa import MedusaHeadConfig, init_medusa_heads, load_medusa_heads, \
    save_medusa_heads
from specjax.models.loaders import random_model
from specjax.train.task import TASKS


def _batch(B=2, T=16, seed=0, V=64):
    rng = np.random.default_rng(seed)
    mask = np.zeros((B, T), np.int32)
    mask[:, 5:] = 1
    return {"tokens": jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32),
            "loss_mask": jnp.asarray(mask), "lengths": jnp.full((B,), T, jnp.int32)}


@pytest.fixture(scope="module")
def sharp():
    """A tiny target with a peaked next-token law (room for the soft CE to fall)."""
    from specjax.models.weights import model_from_tensors, model_to_tensors

    t = random_model(tiny_config(vocab_size=64, num_layers=4), seed=3)
    w = {k: v * (8.0 if "embed" in k or "lm_head" in k else 1.0)
         for k, v in model_to_tensors(t).items()}
    return model_from_tensors(t.cfg, w, source="test")


@pytest.mark.parametrize("shared", [True, False])
def test_medusa_loss_against_a_hand_computation(sharp, shared):
    task = TASKS.build("medusa", {"num_heads": "2", "draft_vocab": "64",
                                  "shared_out": str(shared)}, sharp)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    # perturb the residual weights so the heads differ from one another
    flat = nnx.to_flat_state(params["heads"])
    rng = np.random.default_rng(0)
    for _, leaf in flat:
        v = np.asarray(leaf.get_value())
        leaf.set_value(v + 0.05 * rng.standard_normal(v.shape).astype(np.float32))
    params = {"heads": nnx.from_flat_state(flat)}
    batch = _batch()
    loss, metrics = task.loss(params, frozen, batch, jax.random.key(1))
    heads = nnx.merge(task.head_graphdef, params["heads"])
    tok = batch["tokens"]
    B, T = tok.shape
    o = sharp(tok, jnp.broadcast_to(jnp.arange(T)[None], (B, T)), sharp.init_cache(B, T))
    p = np.asarray(jax.nn.softmax(o.logits, -1), np.float64)
    lsm = np.asarray(jax.nn.log_softmax(heads(o.final_hidden), -1), np.float64)
    want = 0.0
    for i in range(2):  # head i at t: the target's law at t + i + 1, answer token t + i + 2
        terms = [-(p[b, t + i + 1] * lsm[b, t, i]).sum() for b in range(B)
                 for t in range(T - i - 2) if batch["loss_mask"][b, t + i + 2]]
        want += 0.8 ** i * np.mean(terms)
    assert float(loss) == pytest.approx(want, rel=1e-4)
    assert set(metrics) >= {"acc_0", "acc_1", "loss_0", "loss_1"}


def test_medusa_training_reduces_the_loss_and_bad_options(sharp):
    with pytest.raises(ConfigError, match="num_heads must be an integer >= 1"):
        TASKS.build("medusa", {"num_heads": "0"}, sharp)
    task = TASKS.build("medusa", {"num_heads": "3", "draft_vocab": "48"}, sharp)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    opt = optax.adam(3e-3)
    state = opt.init(params)
    batch = _batch(seed=1)

    @jax.jit
    def step(params, state):
        (loss, _), g = jax.value_and_grad(task.loss, has_aux=True)(
            params, frozen, batch, jax.random.key(0))
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    losses = []
    for _ in range(10):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    assert losses[-1] < 0.9 * losses[0] and losses[-1] == min(losses), losses


@pytest.mark.parametrize("shared", [True, False])
def test_trained_heads_load_and_decode_exactly(tmp_path, shared):
    target = make_target()
    V = target.cfg.vocab_size
    ids = np.random.default_rng(2).permutation(V)[:40]
    cfg = MedusaHeadConfig(num_heads=3, hidden_size=target.cfg.hidden_size, vocab_size=V,
                           draft_vocab=40, target_layers=target.cfg.num_layers,
                           shared_out=shared)
    _, state = init_medusa_heads(cfg, target, ids)
    flat = nnx.to_flat_state(state)
    rng = np.random.default_rng(1)
    for _, leaf in flat:
        v = np.asarray(leaf.get_value())
        leaf.set_value(v + 0.1 * rng.standard_normal(v.shape).astype(np.float32))
    state = nnx.from_flat_state(flat)
    path = save_medusa_heads(tmp_path / "m", cfg, state, ids, meta={"step": 5})
    d = drafters.make("medusa", target, k=3, head=str(path))
    assert d.description.endswith("(step 5)")
    for (k1, a), (k2, b) in zip(nnx.to_flat_state(state), nnx.to_flat_state(d.params()["heads"])):
        assert k1 == k2 and np.array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()))
    ps = mixed_prompts(3, seed=9)
    ref = generate(target, ps, max_new_tokens=9, batch_size=3).tokens
    for kw in ({}, {"tree": "fixed:0,1,0.0,1.0,0.0.0"}):
        dd = drafters.make("medusa", target, k=3, head=str(path), **kw)
        assert generate(target, ps, max_new_tokens=9, batch_size=3, drafter=dd).tokens == ref
    with pytest.raises(DrafterError, match="3 trained heads cannot draft depth 4 .*give k=3"):
        drafters.make("medusa", target, k=4, head=str(path))
    b16 = save_medusa_heads(tmp_path / "b", cfg, state, ids, dtype="bfloat16")
    assert (b16 / "model.safetensors").stat().st_size < \
        0.6 * (path / "model.safetensors").stat().st_size
    load_medusa_heads(b16, target)


def test_medusa_head_file_errors(tmp_path):
    target = make_target()
    V = target.cfg.vocab_size
    cfg = MedusaHeadConfig(num_heads=2, hidden_size=target.cfg.hidden_size, vocab_size=V,
                           draft_vocab=V, target_layers=target.cfg.num_layers)
    _, state = init_medusa_heads(cfg, target, np.arange(V))
    path = save_medusa_heads(tmp_path / "m", cfg, state, np.arange(V))
    other = random_model(tiny_config(vocab_size=V, num_layers=6), seed=1)
    with pytest.raises(CheckpointError, match="num_layers = 4; the loaded target has 6"):
        load_medusa_heads(path, other)
    from safetensors.numpy import load_file, save_file

    t = load_file(str(path / "model.safetensors"))
    t["draft_ids"] = np.full((V,), V + 5, np.int32)
    save_file(t, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="draft_ids must hold"):
        load_medusa_heads(path, target)
    (path / "model.safetensors").write_bytes(b"\0" * 10)
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        load_medusa_heads(path, target)
    (path / "config.json").write_text(json.dumps({"format": "specjax-eagle-1"}))
    with pytest.raises(CheckpointError, match="not specjax Medusa heads"):
        load_medusa_heads(path, target)
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_medusa_heads(tmp_path / "none", target)
