"""w8a8 quantization: int8 rows, the integer product, quantized models and the engine on them."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import drafters
from specjax.config import tiny_config
from specjax.engine import generate
from specjax.models.llama import quantize_rows, w8a8_matmul
from specjax.models.loaders import random_model
from specjax.models.quant import quantization_of, quantize
from specjax.models.weights import model_to_tensors
from spec_helpers import mixed_prompts


def _rows(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0] = 0.0  # an all-zero row
    x[1, 3] = 40.0  # an outlier
    return x


def test_quantize_rows_bounds_and_zero_rows():
    x = _rows((5, 64))
    q, s = quantize_rows(jnp.asarray(x))
    q, s = np.asarray(q), np.asarray(s)
    assert q.dtype == np.int8 and s.shape == (5, 1) and s[0, 0] == 1.0 and not q[0].any()
    assert np.abs(q).max() <= 127 and (np.abs(q).max(axis=1)[1:] == 127).all()
    # round to nearest: each value within half a step of its row's grid
    assert (np.abs(q * s - x) <= s / 2 + 1e-6).all()


@pytest.mark.parametrize("t", [1, 2, 5])
def test_w8a8_matmul_matches_integer_reference(t):
    """Exactly the integer dot of the quantized operands, rescaled (a one-row input is padded
    internally: its result must be the same as when it is part of a larger input)."""
    x = jnp.asarray(_rows((max(t, 2), 48), seed=1)[:t] + 0.5)
    w = jnp.asarray(_rows((24, 48), seed=2))
    wq, ws = quantize_rows(w)
    got = np.asarray(w8a8_matmul(x, wq, ws[:, 0]))
    xq, xs = (np.asarray(a) for a in quantize_rows(x))
    want = (xq.astype(np.int64) @ np.asarray(wq).astype(np.int64).T) * xs * np.asarray(ws)[:, 0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # and close to the float product (relative to its scale)
    ref = np.asarray(x) @ np.asarray(w).T
    assert np.abs(got - ref).max() < 0.02 * np.abs(ref).max()
    if t > 1:
        one = np.asarray(w8a8_matmul(x[:1], wq, ws[:, 0]))
        np.testing.assert_array_equal(one, got[:1])


@pytest.mark.parametrize("tie, bias, dtype", [(True, False, jnp.float32),
                                              (False, True, jnp.float32),
                                              (True, False, jnp.bfloat16)])
def test_quantized_model_is_close_and_leaves_the_original(tie, bias, dtype):
    cfg = tiny_config(tie_embeddings=tie, attention_bias=bias)
    m = random_model(cfg, seed=4, dtype=dtype)
    before = model_to_tensors(m)
    q = quantize(m, "w8a8")
    assert quantization_of(q) == "w8a8" and quantization_of(m) == "none"
    assert q.layers[0].mlp.w_down[...].dtype == jnp.int8 and q.head_q[...].dtype == jnp.int8
    for k, v in model_to_tensors(m).items():  # the input model is untouched
        np.testing.assert_array_equal(v, before[k])
    # model_to_tensors of the quantized model: dequantized weights, within half a step
    for k, v in model_to_tensors(q).items():
        step = np.abs(before[k]).max(axis=-1, keepdims=True) / 127 if v.ndim == 2 else 0
        assert (np.abs(v - before[k]) <= step / 2 + 1e-7).all(), k
    toks = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 9)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(9)[None], (2, 9))
    a = np.asarray(m(toks, pos, m.init_cache(2, 16)).logits)
    b = np.asarray(q(toks, pos, q.init_cache(2, 16)).logits)
    assert b.dtype == np.float32
    assert np.abs(b - a).max() < 0.05 * np.abs(a).max()
    assert not np.array_equal(a, b)  # it did change something


def test_quantize_errors():
    m = random_model(tiny_config(), seed=0)
    assert quantize(m, "none") is m and quantize(m, None) is m
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        quantize(m, "int4")
    with pytest.raises(ValueError, match="already quantized"):
        quantize(quantize(m), "w8a8")


def test_plain_w8a8_decoding_is_batch_invariant():
    """Plain decoding of a w8a8 model gives each prompt the same tokens alone and batched
    (what the benchmark's plain-decoding baseline relies on)."""
    q = quantize(random_model(tiny_config(vocab_size=64, num_layers=4), seed=21), "w8a8")
    ps = mixed_prompts(5, seed=4)
    alone = generate(q, ps, max_new_tokens=12, batch_size=1).tokens
    assert generate(q, ps, max_new_tokens=12, batch_size=3).tokens == alone


# suite time: a chain (prompt lookup) and a tree (draft model) by default, the other two under
# -m long
@pytest.mark.parametrize("name, kw", [("prompt_lookup", dict(k=6)),
                                      pytest.param("draft_model", dict(k=3, layers=1),
                                                   marks=pytest.mark.long),
                                      pytest.param("early_exit", dict(k=2, exit_layer=2),
                                                   marks=pytest.mark.long),
                                      ("draft_model", dict(k=2, layers=1, tree="topk"))])
def test_speculative_decoding_runs_on_a_quantized_target(name, kw):
    """Every drafter runs on a w8a8 target, batched, with consistent counters. Token identity
    with plain w8a8 decoding is NOT asserted: it is not guaranteed (int8 rounding amplifies
    last-bit differences between verify and decode forwards; specjax.models.quant)."""
    q = quantize(random_model(tiny_config(vocab_size=64, num_layers=4), seed=21), "w8a8")
    ps = mixed_prompts(5, seed=4)
    ref = generate(q, ps, max_new_tokens=12)
    d = drafters.make(name, q, **kw)
    if name == "draft_model":  # the default draft model is as precise as its target
        assert quantization_of(d._model(d.params())) == "w8a8"
    res = generate(q, ps, max_new_tokens=12, drafter=d, batch_size=3)
    assert [len(t) for t in res.tokens] == [len(t) for t in ref.tokens] == [12] * 5
    assert [t[0] for t in res.tokens] == [t[0] for t in ref.tokens]  # both from the prefill
    for toks, fw, acc in zip(res.tokens, res.target_forwards, res.extra["accepted"]):
        assert fw + acc == len(toks)


def test_load_with_quantize(tmp_path):
    from gguf_fixtures import write_gguf

    from specjax.models.loaders import load

    cfg = tiny_config(vocab_size=300, num_layers=2)  # room for the fixture's tokenizer
    path = tmp_path / "tiny.gguf"
    write_gguf(path, cfg, model_to_tensors(random_model(cfg, seed=3)))
    lm = load(path, quantize="w8a8")
    assert quantization_of(lm.model) == "w8a8" and lm.details["quantization"] == "w8a8"
    assert quantization_of(load(path).model) == "none"
    with pytest.raises(ValueError, match="unknown quantization 'q4'"):
        load(path, quantize="q4")
