"""Checkpoint loaders: GGUF files (F32/F16/Q8_0/Q4_0/Q4_1), their tokenizer, Hugging Face
directories (single file and sharded), and the error messages for damaged or wrong inputs.

The checkpoints are tiny random models written by an independent writer (``gguf.GGUFWriter``
with llama.cpp's names and Q/K row permutation, ``safetensors.numpy.save_file``); see
``gguf_fixtures.py``.
"""

from __future__ import annotations

import json
import re
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

import gguf
from gguf_fixtures import (
    BOS_ID,
    EOS_ID,
    MERGES,
    SPECIALS,
    VOCAB_SIZE,
    gguf_name,
    gguf_tensors,
    hf_config_dict,
    llama_cpp_permute,
    stored_value,
    tokenizer_vocab,
    write_gguf,
    write_hf_dir,
)
from specjax.config import RopeScaling, tiny_config
from specjax.models.loaders import (
    hf_config,
    load,
    load_gguf,
    load_hf_dir,
    permute_rope_rows,
    random_model,
    read_gguf,
    unpermute_rope_rows,
)
from specjax.models.weights import CheckpointError, model_to_tensors
from specjax.tokenizer import TokenizerError

Q = gguf.GGMLQuantizationType


# ----------------------------------------------------------------------------- fixtures

def _logits(model, tokens):
    B, T = tokens.shape
    cache = model.init_cache(B, T)
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    return np.asarray(model(tokens, pos, cache).logits)


@pytest.fixture(scope="module")
def cfg():
    # the model's vocabulary is exactly the tokenizer's token list
    return tiny_config(vocab_size=VOCAB_SIZE)


@pytest.fixture(scope="module")
def model(cfg):
    return random_model(cfg, seed=7)


@pytest.fixture(scope="module")
def tensors(model):
    t = model_to_tensors(model)
    # the norms are all ones after init: make them random so a swapped norm would show
    rng = np.random.default_rng(11)
    for k in t:
        if k.endswith("norm.weight"):
            t[k] = (1.0 + 0.1 * rng.standard_normal(t[k].shape)).astype(np.float32)
    return t


@pytest.fixture(scope="module")
def ref_model(cfg, tensors):
    """The random model with the randomized norms: what every checkpoint here must load to."""
    from specjax.models.weights import model_from_tensors

    return model_from_tensors(cfg, tensors, source="reference")


@pytest.fixture(scope="module")
def tokens_block(cfg):
    rng = np.random.default_rng(3)
    return jnp.asarray(rng.integers(0, cfg.vocab_size, (2, 9)), jnp.int32)


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def f32_gguf(gguf_dir, cfg, tensors):
    return write_gguf(gguf_dir / "tiny-f32.gguf", cfg, tensors)


@pytest.fixture(scope="module")
def loaded_f32(f32_gguf):
    return load_gguf(f32_gguf)


def _msg(path, *parts):
    """A regex: the path, then (anywhere after it) each part in order."""
    return re.escape(str(path)) + "".join(".*" + p for p in parts)


# ----------------------------------------------------------------------------- permutation

def test_permute_rope_rows_is_llama_cpp_permutation():
    """Rows of head h, rotate-half index j (< hd/2) and j + hd/2 become rows 2j and 2j+1."""
    n_head, hd, d = 3, 8, 5
    w = np.arange(n_head * hd * d, dtype=np.float32).reshape(n_head * hd, d)
    p = permute_rope_rows(w, n_head)
    for h in range(n_head):
        for j in range(hd // 2):
            np.testing.assert_array_equal(p[h * hd + 2 * j], w[h * hd + j])
            np.testing.assert_array_equal(p[h * hd + 2 * j + 1], w[h * hd + j + hd // 2])
    np.testing.assert_array_equal(p, llama_cpp_permute(w, n_head))
    np.testing.assert_array_equal(unpermute_rope_rows(p, n_head), w)
    b = np.arange(n_head * hd, dtype=np.float32)  # biases permute the same way
    np.testing.assert_array_equal(unpermute_rope_rows(permute_rope_rows(b, n_head), n_head), b)


# ----------------------------------------------------------------------------- GGUF: F32

def test_gguf_writer_layout_read_back_with_gguf_reader(f32_gguf, cfg, tensors):
    """The fixture file is what llama.cpp writes: ggml (reversed) shapes, permuted Q/K."""
    r = gguf.GGUFReader(str(f32_gguf))
    by_name = {t.name: t for t in r.tensors}
    q = by_name["blk.0.attn_q.weight"]
    assert [int(x) for x in q.shape] == [cfg.hidden_size, cfg.num_heads * cfg.head_dim]
    assert q.data.shape == (cfg.num_heads * cfg.head_dim, cfg.hidden_size)
    want = llama_cpp_permute(tensors["model.layers.0.self_attn.q_proj.weight"], cfg.num_heads)
    np.testing.assert_array_equal(np.asarray(q.data), want)
    assert not np.array_equal(want, tensors["model.layers.0.self_attn.q_proj.weight"])
    emb = by_name["token_embd.weight"]
    assert [int(x) for x in emb.shape] == [cfg.hidden_size, VOCAB_SIZE]
    assert r.fields["general.architecture"].contents() == "llama"


def test_gguf_f32_round_trip_tensors_config_logits(loaded_f32, cfg, tensors, ref_model,
                                                  tokens_block, f32_gguf):
    got_cfg, got, fields = read_gguf(f32_gguf)
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert got[k].dtype == np.float32
        np.testing.assert_array_equal(got[k], v, err_msg=k)  # Q/K un-permuted exactly

    c = loaded_f32.config
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
            c.num_kv_heads, c.head_dim, c.max_position_embeddings) == (
        cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.num_heads,
        cfg.num_kv_heads, cfg.head_dim, cfg.max_position_embeddings)
    assert c.rope_theta == pytest.approx(cfg.rope_theta)
    assert c.rms_norm_eps == pytest.approx(cfg.rms_norm_eps, rel=1e-6)  # stored as float32
    assert c.tie_embeddings is False and c.attention_bias is False
    assert c.architecture == "llama" and c.rope_scaling is None
    assert loaded_f32.format == "gguf" and loaded_f32.source == str(f32_gguf)
    assert loaded_f32.details["name"] == "tiny-test-llama"
    assert loaded_f32.details["tensor_types"] == {"F32": 2 + 9 * cfg.num_layers + 1}

    np.testing.assert_array_equal(
        np.asarray(model_to_tensors(loaded_f32.model)["lm_head.weight"]),
        tensors["lm_head.weight"])
    want = _logits(ref_model, tokens_block)
    got_logits = _logits(loaded_f32.model, tokens_block)
    assert got_logits.shape == (2, 9, VOCAB_SIZE)
    np.testing.assert_allclose(got_logits, want, rtol=0, atol=1e-6)
    assert np.abs(want).max() > 1e-3  # not a degenerate all-zero comparison


def test_gguf_unpermuted_q_k_matter(gguf_dir, cfg, tensors, ref_model, tokens_block):
    """A file written *without* the llama.cpp permutation loads different weights and logits:
    the round trip above is only exact because the loader undoes the permutation."""
    named = gguf_tensors(cfg, tensors, permute=lambda w, n: w)
    path = write_gguf(gguf_dir / "no-permute.gguf", cfg, tensors,
                      replace={k: v for k, v in named.items()
                               if ".attn_q." in k or ".attn_k." in k})
    m = load_gguf(path).model
    assert not np.allclose(_logits(m, tokens_block), _logits(ref_model, tokens_block), atol=1e-6)


def test_load_dispatches_gguf_by_path(f32_gguf, ref_model, tokens_block):
    out = load(str(f32_gguf), numerics="fast")
    assert out.format == "gguf"
    np.testing.assert_allclose(_logits(out.model, tokens_block), _logits(ref_model, tokens_block),
                               rtol=0, atol=1e-6)


def test_gguf_vocab_size_from_token_list_when_metadata_lacks_it(gguf_dir, cfg, tensors):
    path = write_gguf(gguf_dir / "no-vocab-key.gguf", cfg, tensors, omit_keys=("vocab_size",))
    assert load_gguf(path).config.vocab_size == VOCAB_SIZE


def test_gguf_bfloat16_compute(f32_gguf, ref_model, tokens_block):
    out = load_gguf(f32_gguf, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    assert out.model.embed[...].dtype == jnp.bfloat16
    got = _logits(out.model, tokens_block)
    want = _logits(ref_model, tokens_block)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max() + 1e-3


# ----------------------------------------------------------------------------- GGUF: quantized

def _quant_bound(x: np.ndarray, qtype) -> np.ndarray:
    """Per-element bound on |dequantize(quantize(x)) - x| for a 2-D ``x`` as stored.

    eps16 = 2**-11 is fp16's unit roundoff (scales are stored as fp16), sub16 = 2**-25 half
    its subnormal spacing; blocks are 32 consecutive values of a row.
      F16:  |e| <= eps16 |x| + sub16.
      Q8_0: d = amax/127, q = round(x/d) in [-127, 127]: |e| <= d/2 + 127 |fp16(d) - d|
            <= d (1/2 + 127 eps16).
      Q4_0: d = amax/8, q - 8 in [-8, 7]: the value opposite the max-magnitude one is
            clipped from +8 to +7 steps, so |e| <= d, plus 8 |fp16(d) - d|:
            <= d (1 + 8 eps16).
      Q4_1: d = (max - min)/15, q in [0, 15]: |e| <= d/2 + 15 eps16 d + eps16 |min|.
    Each gets 1e-6 amax of slack for float32 arithmetic.
    """
    eps16, sub16 = 2.0 ** -11, 2.0 ** -25
    if qtype == Q.F16:
        return eps16 * np.abs(x) + sub16
    rows, cols = x.shape
    b = x.reshape(rows, cols // 32, 32).astype(np.float64)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    if qtype == Q.Q8_0:
        d = amax / 127
        bound = d * (0.5 + 127 * eps16) + 127 * sub16
    elif qtype == Q.Q4_0:
        d = amax / 8
        bound = d * (1 + 8 * eps16) + 8 * sub16
    elif qtype == Q.Q4_1:
        mn, mx = b.min(axis=-1, keepdims=True), b.max(axis=-1, keepdims=True)
        d = (mx - mn) / 15
        bound = d * (0.5 + 15 * eps16) + eps16 * np.abs(mn) + 16 * sub16
    else:  # pragma: no cover
        raise AssertionError(qtype)
    bound = bound + 1e-6 * amax
    return np.broadcast_to(bound, b.shape).reshape(rows, cols)


def _supported(qtype) -> bool:
    try:
        gguf.quants.quantize(np.zeros((1, 32), np.float32), qtype)
        return True
    except NotImplementedError:
        return False


QTYPES = [pytest.param(q, id=q.name,
                       marks=pytest.mark.skipif(not _supported(q),
                                                reason=f"gguf cannot quantize {q.name}"))
          for q in (Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_1)]


@pytest.mark.parametrize("qtype", QTYPES)
def test_gguf_quantized_tensors(qtype, gguf_dir, cfg, tensors, ref_model, tokens_block):
    path = write_gguf(gguf_dir / f"tiny-{qtype.name}.gguf", cfg, tensors, qtype=qtype)
    out = load_gguf(path)
    n_mat = 2 + 7 * cfg.num_layers  # embeddings, output, 7 matrices per layer
    assert out.details["tensor_types"] == {qtype.name: n_mat, "F32": 2 * cfg.num_layers + 1}
    got = model_to_tensors(out.model)
    stored = gguf_tensors(cfg, tensors)  # llama.cpp layout (permuted Q/K)
    for hf, orig in tensors.items():
        gname = gguf_name(hf)
        s = stored[gname]
        # exactly what gguf's own quantize -> dequantize gives (in the stored layout) ...
        want = stored_value(s, qtype)
        bound = _quant_bound(s, qtype) if s.ndim == 2 else np.zeros_like(s)
        if ".attn_q." in gname:
            want, bound = (unpermute_rope_rows(a, cfg.num_heads) for a in (want, bound))
        elif ".attn_k." in gname:
            want, bound = (unpermute_rope_rows(a, cfg.num_kv_heads) for a in (want, bound))
        np.testing.assert_array_equal(got[hf], want, err_msg=hf)
        # ... and within the quantization step of the original (1-D norms are exact F32)
        err = np.abs(got[hf].astype(np.float64) - orig)
        assert np.all(err <= bound), (hf, float((err - bound).max()))
        if s.ndim == 2:
            assert err.max() > 0, f"{hf}: {qtype.name} did not quantize anything"
    # the quantized model is close to the original one
    want_l = _logits(ref_model, tokens_block)
    got_l = _logits(out.model, tokens_block)
    rel = np.abs(got_l - want_l).max() / np.abs(want_l).max()
    assert rel < {Q.F16: 2e-3, Q.Q8_0: 0.05, Q.Q4_0: 0.5, Q.Q4_1: 0.5}[qtype], rel


# ----------------------------------------------------------------------------- GGUF: tied

def test_gguf_tied_embeddings(gguf_dir, tokens_block):
    cfg = tiny_config(vocab_size=VOCAB_SIZE, tie_embeddings=True)
    m = random_model(cfg, seed=5)
    t = model_to_tensors(m)
    assert "lm_head.weight" not in t
    path = write_gguf(gguf_dir / "tied.gguf", cfg, t)
    assert "output.weight" not in {x.name for x in gguf.GGUFReader(str(path)).tensors}
    out = load_gguf(path)
    assert out.config.tie_embeddings is True
    assert out.model.lm_head is None
    np.testing.assert_allclose(_logits(out.model, tokens_block), _logits(m, tokens_block),
                               rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- GGUF: rope_freqs

def test_gguf_rope_freqs_tensor(gguf_dir, cfg, tensors, ref_model, tokens_block):
    """llama.cpp stores Llama 3.x rope scaling as per-frequency divisors (rope_freqs.weight),
    not as metadata: the loader must apply them, not drop them."""
    import dataclasses

    from specjax.models.llama import rope_inv_freq
    from specjax.models.weights import model_from_tensors

    l3 = RopeScaling("llama3", 8.0, 1.0, 4.0, 16)
    base = np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta, None))
    factors = (base / np.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta, l3)))
    assert not np.allclose(factors, 1.0)
    path = write_gguf(gguf_dir / "rope-freqs.gguf", cfg, tensors,
                      replace={"rope_freqs.weight": factors.astype(np.float32)})
    out = load_gguf(path)
    assert out.config.rope_scaling.kind == "factors"
    want = _logits(model_from_tensors(dataclasses.replace(cfg, rope_scaling=l3), tensors,
                                      source="llama3"), tokens_block)
    got = _logits(out.model, tokens_block)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.abs(got - _logits(ref_model, tokens_block)).max() > 1e-4  # scaling matters here
    path = write_gguf(gguf_dir / "rope-ones.gguf", cfg, tensors,
                      replace={"rope_freqs.weight": np.ones(cfg.head_dim // 2, np.float32)})
    assert load_gguf(path).config.rope_scaling is None
    path = write_gguf(gguf_dir / "rope-bad.gguf", cfg, tensors,
                      replace={"rope_freqs.weight": np.full(5, 2.0, np.float32)})
    with pytest.raises(CheckpointError, match=_msg(path, "rope_freqs.weight has 5 entries")):
        load_gguf(path)


# ----------------------------------------------------------------------------- GGUF: qwen2

def test_gguf_qwen2_biases_not_permuted(gguf_dir, tokens_block):
    """qwen2 GGUFs keep the Hugging Face Q/K layout (no permutation) and carry Q/K/V biases."""
    from specjax.models.weights import model_from_tensors

    cfg = tiny_config(vocab_size=VOCAB_SIZE, attention_bias=True, architecture="qwen2")
    t = model_to_tensors(random_model(cfg, seed=4))
    rng = np.random.default_rng(2)
    for k in t:
        if k.endswith(".bias"):  # zeros after init: make them count
            t[k] = (0.1 * rng.standard_normal(t[k].shape)).astype(np.float32)
    path = write_gguf(gguf_dir / "qwen2.gguf", cfg, t, arch="qwen2")
    raw = {x.name: np.asarray(x.data) for x in gguf.GGUFReader(str(path)).tensors}
    np.testing.assert_array_equal(raw["blk.0.attn_q.weight"],
                                  t["model.layers.0.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(raw["blk.1.attn_k.bias"],
                                  t["model.layers.1.self_attn.k_proj.bias"])
    out = load_gguf(path)
    assert out.config.architecture == "qwen2" and out.config.attention_bias is True
    got = model_to_tensors(out.model)
    assert set(got) == set(t)
    for k, v in t.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    ref = model_from_tensors(cfg, t, source="reference")
    np.testing.assert_allclose(_logits(out.model, tokens_block), _logits(ref, tokens_block),
                               rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- tokenizer

@pytest.fixture(scope="module")
def tok(loaded_f32):
    return loaded_f32.tokenizer


@pytest.mark.parametrize("text", [
    "Hello world, hello!",
    "The year 2024 had 365 days; pi = 3.14159.",
    "héllo wörld 你好 🙂\n\t",
    "  two leading spaces\n\nblank line\r\nCRLF  trailing  ",
    "tabs\t\tand\u00a0nbsp, zero\u200bwidth, combining e\u0301, RTL \u05e9\u05dc\u05d5\u05dd",
    "",
])
def test_tokenizer_round_trips_text(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < VOCAB_SIZE for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_vocab_and_special_ids(tok):
    tokens, _ = tokenizer_vocab()
    assert tok.vocab_size == VOCAB_SIZE
    for i in (0, 1, 2, 3, 100, VOCAB_SIZE - 1):
        assert tok.id_to_token(i) == tokens[i]
    assert tok.bos_id == BOS_ID and tok.bos_token == "<|im_start|>"
    assert tok.eos_ids == (EOS_ID,) and tok.eos_token == "<|im_end|>"
    assert tok.pad_id == EOS_ID
    assert tok.add_bos is False
    assert tok.encode("hi", add_bos=True)[0] == BOS_ID


def test_tokenizer_merges_apply(tok):
    tokens, _ = tokenizer_vocab()
    vid = {t: i for i, t in enumerate(tokens)}
    assert tok.encode("hello") == [vid["hell"], vid["o"]]  # h e -> he, l l -> ll, he ll -> hell
    assert tok.encode(" world") == [vid["Ġw"], vid["or"], vid["l"], vid["d"]]
    assert tok.encode("lo") == [vid["lo"]]
    assert len(MERGES) == len(tokens) - 256 - len(SPECIALS)


def test_tokenizer_splits_digits_individually(tok):
    tokens, _ = tokenizer_vocab()
    vid = {t: i for i, t in enumerate(tokens)}
    # "1 2" is a merge: only the smollm pre-tokenizer's digit splitting keeps "12" apart
    assert tok.encode("12") == [vid["1"], vid["2"]]
    assert tok.encode("a123b") == [vid["a"], vid["1"], vid["2"], vid["3"], vid["b"]]
    ids = tok.encode("Call 555-0123 or 3.14159")
    pieces = [tok.id_to_token(i) for i in ids]
    assert not any(sum(c.isdigit() for c in p) > 1 for p in pieces), pieces


@pytest.mark.parametrize("sid,text", list(enumerate(SPECIALS)))
def test_special_tokens_encode_to_single_ids(tok, sid, text):
    assert tok.encode(text) == [sid]
    ids = tok.encode(f"a{text}b")
    assert ids == [tok.encode("a")[0], sid, tok.encode("b")[0]]
    assert tok.decode(ids, skip_special_tokens=False) == f"a{text}b"
    assert tok.decode(ids) == "ab"


def test_hf_tokenizer_files(tok, tmp_path):
    """tokenizer.json + the side files of an HF directory: the chat template may sit in
    chat_template.jinja (newer transformers), EOS ids in generation_config.json; a damaged
    side file is a clear error naming it."""
    from specjax.tokenizer import tokenizer_from_hf_dir

    tok.backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "chat_template.jinja").write_text(tok.chat_template, encoding="utf-8")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS_ID]}))
    t = tokenizer_from_hf_dir(tmp_path, {}, "x")
    assert t.chat_template == tok.chat_template and t.eos_ids == (EOS_ID,)
    assert t.encode("Hello world, hello!") == tok.encode("Hello world, hello!")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer_config\.json: cannot read"):
        tokenizer_from_hf_dir(tmp_path, {}, "x")


def test_chat_template_renders_chatml(tok):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi 12 🙂"}]
    want = ("<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi 12 🙂<|im_end|>\n")
    assert tok.apply_chat_template(msgs, add_generation_prompt=False) == want
    assert tok.apply_chat_template(msgs) == want + "<|im_start|>assistant\n"
    ids = tok.encode_chat("Hi 12 🙂", system="Be brief.")
    assert ids == tok.encode(want + "<|im_start|>assistant\n")
    assert ids[0] == BOS_ID and ids.count(BOS_ID) == 3 and ids.count(EOS_ID) == 2
    assert tok.decode(ids, skip_special_tokens=False) == want + "<|im_start|>assistant\n"


# ----------------------------------------------------------------------------- bad GGUF files

def _truncation_points(path) -> dict[str, int]:
    size = path.stat().st_size
    r = gguf.GGUFReader(str(path))
    last = max(r.tensors, key=lambda t: t.data_offset)
    return {
        "empty": 0,
        "magic-only": 4,
        "after-header": 24,  # magic, version, tensor count, kv count
        "in-metadata": 200,
        "after-metadata": int(r.data_offset) - 1,
        "half": size // 2,
        "last-tensor-short-by-1": int(last.data_offset + last.n_bytes) - 1,
    }


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0], ids=["F32", "Q8_0"])
def test_truncated_gguf(qtype, gguf_dir, tmp_path, cfg, tensors):
    src = write_gguf(gguf_dir / f"whole-{qtype.name}.gguf", cfg, tensors, qtype=qtype)
    data = src.read_bytes()
    points = _truncation_points(src)
    assert len(set(points.values())) == len(points)
    for label, n in points.items():
        p = tmp_path / f"cut-{label}.gguf"
        p.write_bytes(data[:n])
        want = "not a GGUF file" if n < 4 else "truncated"
        with pytest.raises(CheckpointError, match=_msg(p, want)):
            load_gguf(p)
        with pytest.raises(CheckpointError, match=_msg(p, want)):
            load(p)


def test_truncated_gguf_sweep(f32_gguf, tmp_path):
    """Every cut point on a coarse grid gives a CheckpointError naming the file."""
    data = f32_gguf.read_bytes()
    p = tmp_path / "cut.gguf"
    for n in np.linspace(5, len(data) - 64, 60).astype(int):
        p.write_bytes(data[:n])
        with pytest.raises(CheckpointError, match=re.escape(str(p))):
            read_gguf(p)


def test_wrong_magic(f32_gguf, tmp_path):
    p = tmp_path / "bad-magic.gguf"
    p.write_bytes(b"GGML" + f32_gguf.read_bytes()[4:])
    with pytest.raises(CheckpointError, match=_msg(p, "not a GGUF file", "GGML")):
        load_gguf(p)
    q = tmp_path / "bad-magic.bin"  # no .gguf suffix: load() must still refuse clearly
    q.write_bytes(b"\x00\x01\x02\x03junk")
    with pytest.raises(CheckpointError, match=_msg(q, "not a GGUF file")):
        load(q)


def test_unknown_architecture(tmp_path, cfg, tensors):
    p = write_gguf(tmp_path / "gpt9.gguf", cfg, tensors, arch="gpt9")
    with pytest.raises(CheckpointError, match=_msg(p, "unknown architecture", "gpt9")):
        load_gguf(p)


def test_missing_metadata(tmp_path, cfg, tensors):
    p = write_gguf(tmp_path / "no-heads.gguf", cfg, tensors, omit_keys=("attention.head_count",))
    with pytest.raises(CheckpointError, match=_msg(p, r"lacks llama\.attention\.head_count")):
        load_gguf(p)
    p = write_gguf(tmp_path / "no-layers.gguf", cfg, tensors, omit_keys=("block_count",))
    with pytest.raises(CheckpointError, match=_msg(p, r"lacks llama\.block_count")):
        load_gguf(p)


def test_missing_tensor(tmp_path, cfg, tensors):
    p = write_gguf(tmp_path / "missing.gguf", cfg, tensors, drop=("blk.1.ffn_up.weight",))
    with pytest.raises(CheckpointError,
                       match=_msg(p, "missing tensor", r"model\.layers\.1\.mlp\.up_proj\.weight")):
        load_gguf(p)


def test_shape_mismatch(tmp_path, cfg, tensors):
    f, d = cfg.intermediate_size, cfg.hidden_size
    bad = np.zeros((f + 32, d), np.float32)
    p = write_gguf(tmp_path / "shape.gguf", cfg, tensors, replace={"blk.1.ffn_up.weight": bad})
    with pytest.raises(CheckpointError, match=_msg(
            p, r"model\.layers\.1\.mlp\.up_proj\.weight", re.escape(f"({f + 32}, {d})"),
            "expected", re.escape(f"({f}, {d})"))):
        load_gguf(p)


def test_shape_mismatch_in_permuted_q_rows_divisible(tmp_path, cfg, tensors):
    rows = cfg.num_heads * cfg.head_dim + 2 * cfg.num_heads  # still reshapeable per head
    bad = np.zeros((rows, cfg.hidden_size), np.float32)
    p = write_gguf(tmp_path / "q-shape.gguf", cfg, tensors, replace={"blk.0.attn_q.weight": bad})
    with pytest.raises(CheckpointError,
                       match=_msg(p, r"blk\.0\.attn_q\.weight", f"has {rows} rows, expected")):
        load_gguf(p)


def test_shape_mismatch_in_permuted_q_rows_not_divisible(tmp_path, cfg, tensors):
    bad = np.zeros((cfg.num_heads * cfg.head_dim + 2, cfg.hidden_size), np.float32)
    p = write_gguf(tmp_path / "q-odd.gguf", cfg, tensors, replace={"blk.0.attn_q.weight": bad})
    with pytest.raises(CheckpointError, match=_msg(p, "attn_q.weight", "rows, expected")):
        load_gguf(p)


def test_tokenizer_vocab_larger_than_model(tmp_path):
    cfg = tiny_config(vocab_size=VOCAB_SIZE - 3)
    t = model_to_tensors(random_model(cfg, seed=1))
    p = write_gguf(tmp_path / "small-vocab.gguf", cfg, t)
    with pytest.raises(CheckpointError, match=_msg(
            p, f"tokenizer has {VOCAB_SIZE} tokens", f"only {VOCAB_SIZE - 3}")):
        load_gguf(p)


def test_gguf_without_tokenizer(tmp_path, cfg, tensors):
    p = write_gguf(tmp_path / "no-tok.gguf", cfg, tensors, tokenizer=False)
    with pytest.raises(TokenizerError, match=_msg(p, r"no tokenizer", r"tokenizer\.ggml\.model")):
        load_gguf(p)


def test_gguf_sentencepiece_tokenizer_unsupported(tmp_path, cfg, tensors):
    p = write_gguf(tmp_path / "spm.gguf", cfg, tensors, tokenizer_model="llama")
    with pytest.raises(TokenizerError, match=_msg(p, "'llama' is not supported")):
        load_gguf(p)


def test_gguf_duplicate_tokens(tmp_path, cfg, tensors):
    tokens, _ = tokenizer_vocab()
    tokens = list(tokens)
    tokens[-1] = tokens[-2]
    p = write_gguf(tmp_path / "dup.gguf", cfg, tensors, tokens=tokens)
    with pytest.raises(TokenizerError, match=_msg(p, "duplicate tokens")):
        load_gguf(p)


def test_nonexistent_paths(tmp_path):
    p = tmp_path / "nope.gguf"
    with pytest.raises(CheckpointError, match=_msg(p, "file not found")):
        load_gguf(p)
    with pytest.raises(CheckpointError, match=_msg(p, "file not found")):
        load(p)
    q = tmp_path / "nope-dir"
    with pytest.raises(CheckpointError, match=re.escape(repr(str(q))) + ".*neither a preset"):
        load(q)
    with pytest.raises(CheckpointError, match=_msg(q, "no config.json")):
        load_hf_dir(q)


def test_unknown_preset():
    with pytest.raises(CheckpointError, match=r"unknown preset 'no-such-preset'.*smollm2-135m"):
        from specjax.models.loaders import resolve_preset
        resolve_preset("no-such-preset")
    with pytest.raises(CheckpointError,
                       match=r"'no-such-preset' is neither a preset.*smollm2-135m"):
        load("no-such-preset")


def test_unknown_random_preset_is_named():
    with pytest.raises(CheckpointError, match=r"unknown preset 'nope' after 'random:'.*"
                                              r"smollm2-135m"):
        load("random:nope")


@pytest.mark.long  # suite time: 23 s to draw 135M random weights
def test_random_preset_model():
    import jax.numpy as jnp

    from specjax.models.loaders import preset_config

    lm = load("random:smollm2-135m", dtype=jnp.bfloat16)
    assert lm.format == "random" and lm.tokenizer is None
    assert lm.config == preset_config("smollm2-135m") and lm.config.num_layers == 30
    assert lm.model.embed[...].dtype == jnp.bfloat16
    with pytest.raises(CheckpointError, match=r"unknown preset 'nope' after 'random:'.*"
                                              r"smollm2-135m"):
        load("random:nope")


# ----------------------------------------------------------------------------- HF directories

@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, cfg, tensors):
    return write_hf_dir(tmp_path_factory.mktemp("hf") / "tiny", cfg, tensors)


@pytest.mark.parametrize("shards", [1, 2])
def test_hf_dir_round_trip(shards, tmp_path, cfg, tensors, ref_model, tokens_block):
    d = write_hf_dir(tmp_path / f"hf{shards}", cfg, tensors, shards=shards)
    if shards > 1:
        assert (d / "model.safetensors.index.json").exists()
        assert len(list(d.glob("*.safetensors"))) == shards
    out = load_hf_dir(d)
    assert out.format == "hf" and out.tokenizer is None and out.config == cfg
    got = model_to_tensors(out.model)
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    np.testing.assert_allclose(_logits(out.model, tokens_block), _logits(ref_model, tokens_block),
                               rtol=0, atol=1e-6)
    assert load(d).format == "hf"


def test_hf_dir_tied_ignores_stored_lm_head(tmp_path, tokens_block):
    cfg = tiny_config(vocab_size=VOCAB_SIZE, tie_embeddings=True)
    m = random_model(cfg, seed=9)
    t = model_to_tensors(m)
    t["lm_head.weight"] = np.zeros_like(t["model.embed_tokens.weight"])  # HF sometimes stores it
    out = load_hf_dir(write_hf_dir(tmp_path / "tied", cfg, t))
    assert out.config.tie_embeddings and out.model.lm_head is None
    np.testing.assert_allclose(_logits(out.model, tokens_block), _logits(m, tokens_block),
                               rtol=0, atol=1e-6)


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_hf_missing_config(hf_dir, tmp_path):
    d = _copy(hf_dir, tmp_path / "d")
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match=_msg(d, "no config.json")):
        load_hf_dir(d)


def test_hf_invalid_config_json(hf_dir, tmp_path):
    d = _copy(hf_dir, tmp_path / "d")
    (d / "config.json").write_text('{"model_type": "llama",')
    with pytest.raises(CheckpointError, match=_msg(d / "config.json", "invalid JSON")):
        load_hf_dir(d)


def test_hf_unknown_model_type(hf_dir, tmp_path, cfg):
    d = _copy(hf_dir, tmp_path / "d")
    (d / "config.json").write_text(json.dumps(hf_config_dict(cfg, model_type="gpt9")))
    with pytest.raises(CheckpointError,
                       match=_msg(d / "config.json", "unknown architecture", "'gpt9'")):
        load_hf_dir(d)


def test_hf_config_missing_key(hf_dir, tmp_path, cfg):
    d = _copy(hf_dir, tmp_path / "d")
    c = hf_config_dict(cfg)
    del c["num_hidden_layers"]
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(CheckpointError,
                       match=_msg(d / "config.json", "lacks 'num_hidden_layers'")):
        load_hf_dir(d)


def test_hf_config_rope_parameters_spelling(cfg):
    """transformers >= 5 writes rope_parameters (theta inside) instead of rope_scaling."""
    c = hf_config_dict(cfg)
    del c["rope_theta"]
    c["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}
    got = hf_config(c, "x")
    assert got.rope_theta == 500000.0
    assert got.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 64)
    c["rope_parameters"] = {"rope_type": "default", "rope_theta": 123.0}
    got = hf_config(c, "x")
    assert got.rope_theta == 123.0 and got.rope_scaling is None
    c["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": 1.0}}
    with pytest.raises(CheckpointError, match="per-layer-type rope_parameters"):
        hf_config(c, "x")


def test_hf_llama_attention_bias_refused(cfg):
    # a Llama with attention_bias has an o_proj bias too, which the model cannot hold: refuse
    # rather than load it silently without that bias
    with pytest.raises(CheckpointError, match="attention_bias=true on a llama model"):
        hf_config(hf_config_dict(cfg, attention_bias=True), "x")
    assert hf_config(hf_config_dict(cfg, attention_bias=False), "x").attention_bias is False


def test_hf_config_inconsistent_with_weights(hf_dir, tmp_path, cfg):
    d = _copy(hf_dir, tmp_path / "d")
    (d / "config.json").write_text(json.dumps(hf_config_dict(cfg, intermediate_size=96)))
    with pytest.raises(CheckpointError,
                       match=_msg(d, r"mlp\.gate_proj\.weight", r"\(128, 64\)", r"\(96, 64\)")):
        load_hf_dir(d)


@pytest.mark.parametrize("keep", [0.5, 0.99, 9])
def test_hf_truncated_safetensors(hf_dir, tmp_path, keep):
    d = _copy(hf_dir, tmp_path / "d")
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:int(len(data) * keep) if keep < 1 else keep])
    with pytest.raises(CheckpointError, match=_msg(f, "cannot read safetensors", "truncated")):
        load_hf_dir(d)


def test_hf_missing_tensor(tmp_path, cfg, tensors):
    t = dict(tensors)
    del t["model.layers.1.mlp.up_proj.weight"]
    d = write_hf_dir(tmp_path / "d", cfg, t)
    with pytest.raises(CheckpointError,
                       match=_msg(d, "missing tensor", r"model\.layers\.1\.mlp\.up_proj")):
        load_hf_dir(d)


def test_hf_no_safetensors(hf_dir, tmp_path):
    d = _copy(hf_dir, tmp_path / "d")
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=_msg(d, r"no \*\.safetensors")):
        load_hf_dir(d)


def test_hf_index_names_missing_shard(tmp_path, cfg, tensors):
    d = write_hf_dir(tmp_path / "d", cfg, tensors, shards=2)
    missing = d / "model-00002-of-00002.safetensors"
    missing.unlink()
    with pytest.raises(CheckpointError, match=_msg(missing, "listed in the index but missing")):
        load_hf_dir(d)


@pytest.mark.parametrize("index_text", ["{not json", "{}"], ids=["invalid-json", "no-weight-map"])
def test_hf_corrupt_index(tmp_path, cfg, tensors, index_text):
    d = write_hf_dir(tmp_path / "d", cfg, tensors, shards=2)
    (d / "model.safetensors.index.json").write_text(index_text)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json: not a valid"):
        load_hf_dir(d)
