"""The EAGLE training tasks: training-time test equals drafting, the loss against a
hand-computed value, draft-vocabulary choice, and a few steps reduce the loss."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from specjax.config import tiny_config
from specjax.errors import ConfigError
from specjax.heads.eagle import EagleHeadConfig, init_head
from specjax.models.loaders import random_model
from specjax.train.task import TASKS
from specjax.train.tasks._target import draft_vocab_from_counts, draft_vocabulary
from specjax.train.tasks.eagle import ttt_forward


@pytest.fixture(scope="module")
def target():
    return random_model(tiny_config(vocab_size=64, num_layers=4), seed=3)


@pytest.mark.parametrize("variant", ["eagle3", "eagle1"])
def test_training_time_test_is_what_drafting_sees(target, variant):
    """Step i's logits at position t equal drafting i tokens past the committed prefix
    ``0..t-i`` with the head's cache (teacher-forced tokens, own hidden states fed back)."""
    cfg = EagleHeadConfig.for_target(target.cfg, variant, draft_vocab=48)
    graphdef, state, _ = init_head(cfg, target, np.arange(48) + 8, seed=1)
    head = nnx.merge(graphdef, state)
    T = 12
    toks = jnp.asarray(np.random.default_rng(0).integers(0, 64, (1, T)), jnp.int32)
    o = target(toks, jnp.arange(T)[None], target.init_cache(1, T),
               hidden_layers=cfg.feature_layers)
    raw = jnp.concatenate(o.hidden, -1) if variant == "eagle3" else o.final_hidden
    g0 = head.fuse(raw)
    nxt = jnp.concatenate([toks[:, 1:], jnp.zeros((1, 1), jnp.int32)], 1)
    emb = jnp.take(target.embed[...], nxt, axis=0)
    outs = ttt_forward(head, emb, g0, steps=3)
    for i in range(3):
        for t in (i, T - 2):  # the first committed pair and a late one (suite time)
            base = t - i  # the last committed pair
            cache = head.init_cache(1, T + 4)
            lg, hid, cache = head(emb[:, :base + 1], g0[:, :base + 1],
                                  jnp.arange(base + 1)[None], cache, prefix_empty=True)
            h_prev, out = hid[:, base], lg[:, base]
            for j in range(1, i + 1):
                p = base + j
                lg, hid, cache = head(emb[:, p:p + 1], h_prev[:, None],
                                      jnp.asarray([[p]]), cache.with_lengths(jnp.asarray([p])))
                h_prev, out = hid[:, 0], lg[:, 0]
            np.testing.assert_allclose(np.asarray(outs[i][0][0, t]), np.asarray(out[0]),
                                       atol=2e-5, rtol=2e-5, err_msg=f"step {i}, t {t}")


def test_draft_vocab_from_counts():
    counts = np.array([5, 0, 9, 9, 1, 7])
    ids, cov = draft_vocab_from_counts(counts, 3)
    assert ids.tolist() == [2, 3, 5] and cov == pytest.approx(25 / 31)
    ids, _ = draft_vocab_from_counts(counts, 10)
    assert ids.tolist() == [0, 1, 2, 3, 4, 5]
    # answers hold 5 distinct tokens: the 6th slot goes to the uncounted token most frequent
    # in the prompts (id 7 over ids 1 and 6)
    counts = np.array([5, 0, 9, 9, 1, 7, 0, 0])
    fill = np.array([0, 1, 0, 0, 0, 0, 0, 50])
    ids, cov = draft_vocab_from_counts(counts, 6, fill=fill)
    assert ids.tolist() == [0, 2, 3, 4, 5, 7] and cov == 1.0
    assert draft_vocabulary(None, 100, 8).tolist() == list(range(8))


def _batch(B=2, T=16, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 64, (B, T)).astype(np.int32)
    mask = np.zeros((B, T), np.int32)
    mask[:, 5:] = 1
    return {"tokens": jnp.asarray(tokens), "loss_mask": jnp.asarray(mask),
            "lengths": jnp.full((B,), T, jnp.int32)}


def test_eagle3_loss_against_a_hand_computation(target):
    task = TASKS.build("eagle3", {"ttt_steps": "2", "draft_vocab": "64"}, target)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    batch = _batch()
    loss, metrics = task.loss(params, frozen, batch, jax.random.key(1))
    # by hand: the target's next-next-token law, the two steps' logits, weights 1 and 0.8
    head = nnx.merge(task.head_graphdef, params["head"])
    tok = batch["tokens"]
    B, T = tok.shape
    o = target(tok, jnp.broadcast_to(jnp.arange(T)[None], (B, T)), target.init_cache(B, T),
               hidden_layers=task.head_cfg.feature_layers)
    g0 = head.fuse(jnp.concatenate(o.hidden, -1))
    nxt = jnp.concatenate([tok[:, 1:], jnp.zeros((B, 1), jnp.int32)], 1)
    outs = ttt_forward(head, jnp.take(target.embed[...], nxt, axis=0), g0, 2)
    p = np.asarray(jax.nn.softmax(o.logits, -1), np.float64)
    want = 0.0
    for i, (lg, _) in enumerate(outs):
        lsm = np.asarray(jax.nn.log_softmax(lg, -1), np.float64)
        terms = [-(p[b, t + 1] * lsm[b, t]).sum() for b in range(B) for t in range(T - 2)
                 if batch["loss_mask"][b, t + 2] and t >= i]
        want += 0.8 ** i * np.mean(terms)
    assert float(loss) == pytest.approx(want, rel=1e-4)
    assert set(metrics) >= {"loss", "acc_0", "acc_1", "loss_0", "loss_1"}

    # prompt positions weighted 0.5 (the last row's last 3 tokens are padding: never counted)
    pw = TASKS.build("eagle3", {"ttt_steps": "2", "draft_vocab": "64", "prompt_weight": "0.5"},
                     target)
    batch = dict(batch, lengths=jnp.asarray([T, T - 3], jnp.int32))
    loss_pw, metrics_pw = pw.loss(params, frozen, batch, jax.random.key(1))
    want = 0.0
    for i, (lg, _) in enumerate(outs):
        lsm = np.asarray(jax.nn.log_softmax(lg, -1), np.float64)
        num = den = 0.0
        for b in range(B):
            for t in range(i, T - 2):
                if t + 2 >= int(batch["lengths"][b]):
                    continue
                w = 1.0 if batch["loss_mask"][b, t + 2] else 0.5
                num += w * -(p[b, t + 1] * lsm[b, t]).sum()
                den += w
        want += 0.8 ** i * num / den
    assert float(loss_pw) == pytest.approx(want, rel=1e-4)
    with pytest.raises(ConfigError, match="prompt_weight must be in"):
        TASKS.build("eagle3", {"prompt_weight": "2"}, target)


def test_eagle1_loss_against_a_hand_computation(target):
    """EAGLE-1: 0.1 x the token term + 1.0 x the smooth-L1 distance of the head's output to
    the next position's (normed) feature, averaged over the feature's width (as the authors'
    loss), both over answer positions, step i weighted 0.8 ** i."""
    task = TASKS.build("eagle1", {"ttt_steps": "2", "draft_vocab": "64"}, target)
    assert (task.cfg.token_weight, task.cfg.feature_weight) == (0.1, 1.0)
    params, frozen = task.init_params(jax.random.key(0)), task.frozen()
    batch = _batch(seed=4)
    loss, _ = task.loss(params, frozen, batch, jax.random.key(1))
    head = nnx.merge(task.head_graphdef, params["head"])
    tok = batch["tokens"]
    B, T = tok.shape
    o = target(tok, jnp.broadcast_to(jnp.arange(T)[None], (B, T)), target.init_cache(B, T))
    feat = np.asarray(o.final_hidden, np.float64)
    nxt = jnp.concatenate([tok[:, 1:], jnp.zeros((B, 1), jnp.int32)], 1)
    outs = ttt_forward(head, jnp.take(target.embed[...], nxt, axis=0),
                       head.fuse(o.final_hidden), 2)
    p = np.asarray(jax.nn.softmax(o.logits, -1), np.float64)

    def smooth_l1(x):
        a = np.abs(x)
        return np.where(a < 1.0, 0.5 * x * x, a - 0.5)

    want = 0.0
    for i, (lg, hid) in enumerate(outs):
        lsm = np.asarray(jax.nn.log_softmax(lg, -1), np.float64)
        hid = np.asarray(hid, np.float64)
        pos = [(b, t) for b in range(B) for t in range(T - 2)
               if batch["loss_mask"][b, t + 2] and t >= i]
        ce = np.mean([-(p[b, t + 1] * lsm[b, t]).sum() for b, t in pos])
        reg = np.mean([smooth_l1(hid[b, t] - feat[b, t + 1]).mean() for b, t in pos])
        want += 0.8 ** i * (0.1 * ce + 1.0 * reg)
    assert float(loss) == pytest.approx(want, rel=1e-4)


def test_eagle_task_options_and_training_reduces_the_loss(target):
    with pytest.raises(ConfigError, match="ttt_steps .* must be an integer >= 1"):
        TASKS.build("eagle3", {"ttt_steps": "0"}, target)
    with pytest.raises(ConfigError, match="has no option 'depth'"):
        TASKS.build("eagle3", {"depth": "3"}, target)
    # a target with a peaked next-token law (scaled embedding and head), so that the soft
    # cross-entropy has room to fall (against a near-uniform law it starts at its floor)
    from specjax.models.weights import model_from_tensors, model_to_tensors

    t = {k: v * (8.0 if "embed" in k or "lm_head" in k else 1.0)
         for k, v in model_to_tensors(target).items()}
    sharp = model_from_tensors(target.cfg, t, source="test")
    for name in ("eagle3", "eagle1"):
        task = TASKS.build(name, {"ttt_steps": "2", "draft_vocab": "48"}, sharp)
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
        assert losses[-1] < 0.9 * losses[0] and losses[-1] == min(losses), (name, losses)
