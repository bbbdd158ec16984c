"""Model invariants on tiny random models, and parity with Hugging Face transformers."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.config import ConfigError, RopeScaling, tiny_config
from specjax.models.loaders import load_hf_dir, random_model
from specjax.models.weights import model_to_tensors


def full_forward(model, tokens):
    B, T = tokens.shape
    cache = model.init_cache(B, T)
    pos = jnp.broadcast_to(jnp.arange(T)[None], (B, T))
    return model(tokens, pos, cache)


@pytest.mark.parametrize("tie", [False, True])
def test_prefill_plus_decode_equals_full_forward(tie):
    cfg = tiny_config(tie_embeddings=tie)
    model = random_model(cfg, seed=1)
    rng = np.random.default_rng(0)
    B, T, P = 2, 12, 5
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, T)), jnp.int32)
    ref = np.asarray(full_forward(model, toks).logits)

    cache = model.init_cache(B, 32)
    pos = jnp.broadcast_to(jnp.arange(P)[None], (B, P))
    out = model(toks[:, :P], pos, cache)
    got = [np.asarray(out.logits)]
    cache = out.cache.advance(jnp.full((B,), P))
    for t in range(P, T):
        o = model(toks[:, t:t + 1], cache.lengths[:, None], cache)
        got.append(np.asarray(o.logits))
        cache = o.cache.advance(jnp.ones((B,), jnp.int32))
    got = np.concatenate(got, axis=1)
    np.testing.assert_allclose(got, ref, atol=2e-5, rtol=1e-5)


def test_multi_token_block_after_prefix_equals_full_forward():
    """A verify-style block of k tokens on top of a committed prefix (ragged per row)."""
    cfg = tiny_config()
    model = random_model(cfg, seed=2)
    rng = np.random.default_rng(1)
    B, T = 3, 14
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, T)), jnp.int32)
    ref = np.asarray(full_forward(model, toks).logits)
    prefix = np.array([3, 6, 9])
    k = 4
    cache = model.init_cache(B, 32)
    # prefill each row with its own prefix length (right-padded block)
    pos = jnp.broadcast_to(jnp.arange(T)[None], (B, T))
    cache = model(toks, pos, cache).cache.with_lengths(jnp.asarray(prefix))
    idx = prefix[:, None] + np.arange(k)[None]
    block = jnp.take_along_axis(toks, jnp.asarray(idx), axis=1)
    out = model(block, jnp.asarray(idx, jnp.int32), cache)
    want = np.take_along_axis(ref, idx[..., None], axis=1)
    np.testing.assert_allclose(np.asarray(out.logits), want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("numerics", ["fast", "exact"])
def test_scratch_past_length_is_never_visible(numerics):
    """Garbage in cache slots past each row's length must not change anything: any finite
    value (the largest bfloat16 here, whose key products overflow to inf and NaN), and NaN or
    inf written through the cache's own writes (stored as 0)."""
    cfg = tiny_config()
    model = random_model(cfg, seed=3)
    model.set_numerics(numerics)
    B, P = 2, 6
    rng = np.random.default_rng(2)
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (B, P)), jnp.int32)
    cache = model.init_cache(B, 16)
    cache = model(toks, jnp.broadcast_to(jnp.arange(P)[None], (B, P)), cache).cache
    cache = cache.with_lengths(jnp.array([4, 6]))
    big = float(jnp.finfo(jnp.bfloat16).max)  # exact in float32, TF32 and bf16
    poisoned = cache.__class__(
        k=tuple(a.at[0, :, 4:].set(big).at[1, :, 6:].set(-big) for a in cache.k),
        v=tuple(a.at[0, :, 4:].set(-big).at[1, :, 6:].set(big) for a in cache.v),
        lengths=cache.lengths,
    )
    bad = jnp.full((B, 10) + cache.k[0].shape[1:2] + cache.k[0].shape[3:], jnp.nan)
    bad = bad.at[1].set(jnp.inf)
    written = cache.write((bad,) * len(cache.k), (bad,) * len(cache.v), cache.lengths)
    for a in written.k + written.v:
        assert np.isfinite(np.asarray(a)).all()
        assert not np.asarray(a)[0, :, 4:14].any() and not np.asarray(a)[1, :, 6:16].any()
    nxt = jnp.array([[5, 7], [9, 11]], jnp.int32)
    pos = cache.lengths[:, None] + jnp.arange(2)[None]
    a = model(nxt, pos, cache).logits
    for other in (poisoned, written):
        b = model(nxt, pos, other).logits
        assert np.isfinite(np.asarray(b)).all()
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_tree_mask_equals_path_forward():
    """A block with a branching mask: each node sees only its ancestors."""
    cfg = tiny_config()
    model = random_model(cfg, seed=4)
    prefix = jnp.array([[1, 2, 3, 4]], jnp.int32)
    # tree: 0 -> 1, 0 -> 2, 2 -> 3 (node tokens below), depths 0,1,1,2
    nodes = jnp.array([[10, 11, 12, 13]], jnp.int32)
    depth = jnp.array([[0, 1, 1, 2]])
    anc = jnp.array([[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]], bool)
    cache = model.init_cache(1, 16)
    cache = model(prefix, jnp.arange(4)[None], cache).cache.advance(jnp.array([4]))
    out = model(nodes, 4 + depth, cache, attn_mask=anc)
    for node, path in ((1, [10, 11]), (3, [10, 12, 13]), (2, [10, 12])):
        seq = jnp.concatenate([prefix, jnp.array([path], jnp.int32)], axis=1)
        ref = full_forward(model, seq).logits[0, -1]
        np.testing.assert_allclose(np.asarray(out.logits[0, node]), np.asarray(ref), atol=2e-5)


def test_exit_layer_and_skips_match_truncated_model():
    cfg = tiny_config(num_layers=4)
    model = random_model(cfg, seed=5)
    toks = jnp.array([[3, 4, 5, 6]], jnp.int32)
    pos = jnp.arange(4)[None]
    early = model(toks, pos, model.init_cache(1, 8), exit_layer=2, hidden_layers=(1,))
    # the same as a 2-layer model with the first two blocks
    t = model_to_tensors(model)
    cfg2 = tiny_config(num_layers=2)
    from specjax.models.weights import model_from_tensors

    t2 = {k: v for k, v in t.items() if not k.startswith(("model.layers.2.", "model.layers.3."))}
    small = model_from_tensors(cfg2, t2, source="test")
    ref = small(toks, pos, small.init_cache(1, 8))
    np.testing.assert_allclose(np.asarray(early.logits), np.asarray(ref.logits), atol=1e-5)
    # skipping every sublayer of layers 2 and 3 is the same as exiting at 2
    skipped = model(toks, pos, model.init_cache(1, 8), skip_attn=(2, 3), skip_mlp=(2, 3))
    np.testing.assert_allclose(np.asarray(skipped.logits), np.asarray(ref.logits), atol=1e-5)
    assert len(early.hidden) == 1 and early.hidden[0].shape == (1, 4, cfg.hidden_size)
    with pytest.raises(ValueError, match="exit_layer must be in"):
        model(toks, pos, model.init_cache(1, 8), exit_layer=5)
    with pytest.raises(ValueError, match="outside"):
        model(toks, pos, model.init_cache(1, 8), skip_attn=(7,))


def test_bfloat16_compute_is_close_to_float32():
    cfg = tiny_config()
    m32 = random_model(cfg, seed=6)
    m16 = random_model(cfg, seed=6, dtype=jnp.bfloat16)
    toks = jnp.array([[1, 2, 3, 4, 5]], jnp.int32)
    a = np.asarray(full_forward(m32, toks).logits)
    b = np.asarray(full_forward(m16, toks).logits)
    assert b.dtype == np.float32
    # bf16 has an 8-bit mantissa: relative error ~ 2^-8 per op over a few layers
    np.testing.assert_allclose(b, a, atol=0.05 * np.abs(a).max())


def test_config_errors():
    with pytest.raises(ConfigError, match="multiple of num_kv_heads"):
        tiny_config(num_heads=4, num_kv_heads=3)
    with pytest.raises(ConfigError, match="head_dim must be even"):
        tiny_config(head_dim=15)
    with pytest.raises(ConfigError, match="unsupported rope scaling"):
        RopeScaling("yarn", 2.0)
    with pytest.raises(ConfigError, match="freq_factors has 3 entries; head_dim 16 needs 8"):
        tiny_config(rope_scaling=RopeScaling("factors", 1.0, freq_factors=(1.0, 2.0, 4.0)))
    with pytest.raises(ConfigError, match="'factors' needs freq_factors"):
        RopeScaling("factors", 1.0)


# ----------------------------------------------------------------------------- HF parity

HF_CASES = {
    "mha": dict(num_heads=4, num_kv_heads=4),
    "gqa": dict(num_heads=4, num_kv_heads=2),
    "mqa_tied": dict(num_heads=4, num_kv_heads=1, tie_embeddings=True),
    "llama3_scaling": dict(num_heads=4, num_kv_heads=2,
                           rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64)),
    "qwen2_bias": dict(num_heads=4, num_kv_heads=2, attention_bias=True, architecture="qwen2"),
}


def _hf_config(cfg):
    d = {
        "model_type": cfg.architecture,
        "architectures": ["Qwen2ForCausalLM" if cfg.architecture == "qwen2"
                          else "LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    if cfg.architecture == "llama":
        d["attention_bias"] = cfg.attention_bias
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        d["rope_scaling"] = {"rope_type": "llama3", "factor": s.factor,
                             "low_freq_factor": s.low_freq_factor,
                             "high_freq_factor": s.high_freq_factor,
                             "original_max_position_embeddings": s.original_max_position}
    return d


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_parity_with_transformers(case, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import save_file

    cfg = tiny_config(**HF_CASES[case])
    model = random_model(cfg, seed=7)
    tensors = model_to_tensors(model)
    # random (non-unit) norms and biases so that every parameter matters
    rng = np.random.default_rng(3)
    for k in tensors:
        if k.endswith("norm.weight") or k.endswith(".bias"):
            tensors[k] = (1.0 + 0.1 * rng.standard_normal(tensors[k].shape)).astype(np.float32)
    (tmp_path / "config.json").write_text(json.dumps(_hf_config(cfg)))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ours = load_hf_dir(tmp_path).model
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32)
    hf.eval()
    toks = rng.integers(0, cfg.vocab_size, (2, 40))
    with torch.no_grad():
        ref = hf(torch.tensor(toks)).logits.numpy()
    got = np.asarray(full_forward(ours, jnp.asarray(toks, jnp.int32)).logits)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
@pytest.mark.parametrize("chunks", [2, 3, 4])
def test_chunked_matmul_matches_plain_product(rows, chunks):
    from specjax.models.llama import chunked_matmul

    rng = np.random.default_rng(rows * 10 + chunks)
    w = rng.standard_normal((48, 20)).astype(np.float32)
    x = rng.standard_normal((rows, 20)).astype(np.float32)
    got = np.asarray(chunked_matmul(jnp.asarray(x), jnp.asarray(w), chunks, jnp.float32))
    np.testing.assert_allclose(got, x @ w.T, atol=1e-5, rtol=1e-5)


def test_small_gemm_chunks_rule(monkeypatch):
    from specjax.models import llama

    monkeypatch.setattr(llama, "SMALL_GEMM_CHUNK_BYTES", 1 << 20)
    assert llama.small_gemm_chunks((49152, 576), 1, 4) == 1  # one row: matrix-vector path
    assert llama.small_gemm_chunks((49152, 576), llama.SMALL_GEMM_MAX_ROWS + 1, 4) == 1
    c = llama.small_gemm_chunks((49152, 576), 4, 4)
    assert c > 1 and 49152 % c == 0 and 49152 * 576 * 4 // c >= 1 << 20
    assert llama.small_gemm_chunks((577, 576), 4, 4) == 1  # 577 is prime: no even split
    assert llama.small_gemm_chunks((64, 64), 4, 4) == 1  # smaller than one chunk
    monkeypatch.setattr(llama, "SMALL_GEMM_CHUNK_BYTES", 0)
    assert llama.small_gemm_chunks((49152, 576), 4, 4) == 1  # switched off


def test_chunked_linear_inside_model_keeps_outputs(monkeypatch):
    """With tiny chunks, every multi-row product of the tiny model (layers and head) takes
    the chunked path: block logits still equal the full forward's, and speculative greedy
    decoding still equals plain decoding token for token."""
    from specjax import drafters
    from specjax.engine import generate
    from specjax.models import llama

    cfg = tiny_config(vocab_size=64, num_layers=2)
    model = random_model(cfg, seed=4)
    rng = np.random.default_rng(5)
    toks = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, 12)), jnp.int32)
    monkeypatch.setattr(llama, "SMALL_GEMM_CHUNK_BYTES", 0)
    ref = np.asarray(full_forward(model, toks).logits)
    prompts = [[1, 2, 3, 4, 1, 2, 3], [5, 6, 7, 5, 6]]
    plain = generate(model, prompts, max_new_tokens=12).tokens
    monkeypatch.setattr(llama, "SMALL_GEMM_CHUNK_BYTES", 256)
    assert llama.small_gemm_chunks(model.embed[...].shape, 4, 4) > 1
    np.testing.assert_allclose(np.asarray(full_forward(model, toks[:, :8]).logits),
                               ref[:, :8], atol=2e-5, rtol=1e-5)
    d = drafters.make("draft_model", model, k=3, layers=1)
    assert generate(model, prompts, max_new_tokens=12, drafter=d).tokens == plain


@pytest.mark.parametrize("B,T", [(1, 1), (3, 1), (1, 3), (2, 2)])
def test_write_block_writes_in_range_and_drops_past_the_end(B, T):
    """``write_block`` against a numpy reference: entries landing at or past the buffer's end
    are dropped, never clamped onto committed slots (the one-token path scatters a second,
    out-of-range entry: it must leave no trace)."""
    from specjax.cache import write_block

    S = 6
    rng = np.random.default_rng(B * 10 + T)
    buf = rng.normal(size=(B, 2, S, 3)).astype(np.float32)  # the cache: [B, KVH, S, Dh]
    new = rng.normal(size=(B, T, 2, 3)).astype(np.float32)  # a block: [B, T, KVH, Dh]
    for offs in ([0] * B, [S - 1] * B, [S] * B, list(rng.integers(0, S + 1, B))):
        want = buf.copy()
        for b, o in enumerate(offs):
            for t in range(T):
                if o + t < S:
                    want[b, :, o + t] = new[b, t]
        got = write_block(jnp.asarray(buf), jnp.asarray(new), jnp.asarray(offs, jnp.int32))
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("numerics", ["exact", "fast"])
def test_one_token_forward_does_not_copy_the_cache(numerics):
    """A donated one-token forward writes each layer's cache in place: the compiled program
    holds no copy of a cache-shaped buffer (a one-element scatter once became a
    dynamic-update-slice that XLA fused into the attention reads and paid for with a copy of
    every layer's cache, 1.8x the forward's time at 4096 positions)."""
    import functools
    import re

    import jax
    from flax import nnx

    from specjax.models.numerics import compiler_options

    model = random_model(tiny_config(), seed=0)
    model.set_numerics(numerics)
    graphdef, params = nnx.split(model)

    @functools.partial(jax.jit, donate_argnames=("cache",),
                       compiler_options=compiler_options(numerics == "exact"))
    def fwd(params, tokens, positions, cache):
        o = nnx.merge(graphdef, params)(tokens, positions, cache)
        return o.logits, o.cache

    cache = model.init_cache(1, 96).with_lengths(jnp.full((1,), 40, jnp.int32))
    shape = "f32[" + ",".join(map(str, cache.k[0].shape)) + "]"
    text = fwd.lower(params, jnp.zeros((1, 1), jnp.int32), jnp.full((1, 1), 40, jnp.int32),
                     cache).compile().as_text()
    copies = [ln for ln in text.splitlines()
              if re.search(r"= " + re.escape(shape) + r"\{[^}]*\} copy\(", ln)]
    assert not copies, f"{len(copies)} cache copies, e.g. {copies[0].strip()[:160]}"
