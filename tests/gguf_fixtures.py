"""Writers of tiny checkpoints for the loader tests: GGUF files (llama.cpp layout) and
Hugging Face directories (config.json + safetensors), from a tiny random :class:`Llama`.

Nothing here uses the library's GGUF reader: names, the Q/K row permutation and the metadata
follow llama.cpp's ``convert_hf_to_gguf.py``, so the tests compare the loader against an
independent writer (``gguf.GGUFWriter``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import gguf

# ----------------------------------------------------------------------------- tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (as in SmolLM2)
# merges in rank order; "1 2" exists so that splitting digits individually is observable
MERGES = ["h e", "l l", "l o", "Ġ w", "he ll", "o r", "1 2"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def tokenizer_vocab() -> tuple[list[str], list[int]]:
    """Tokens and GGUF token types: 3 control tokens, the 256 byte characters, merge results."""
    byte_chars = [bytes_to_unicode()[b] for b in range(256)]
    merged = [m.replace(" ", "") for m in MERGES]
    tokens = SPECIALS + byte_chars + merged
    assert len(set(tokens)) == len(tokens)
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))  # 3 = CONTROL, 1 = NORMAL
    return tokens, types


VOCAB_SIZE = len(tokenizer_vocab()[0])
BOS_ID, EOS_ID = 1, 2  # <|im_start|>, <|im_end|>


# ----------------------------------------------------------------------------- GGUF

def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """``LlamaModel.permute`` of llama.cpp's convert_hf_to_gguf.py (rotate-half -> interleaved)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, idx, rest = hf.split(".", 3)
    return f"blk.{int(idx)}.{_LAYER[rest]}"


def gguf_tensors(cfg, tensors: dict[str, np.ndarray], permute=llama_cpp_permute
                 ) -> dict[str, np.ndarray]:
    """HF-named float32 tensors -> llama.cpp-named ones, in writing order.

    Q/K rows (and biases) are permuted for the llama architecture only, as llama.cpp's
    converter does (its Qwen2 converter keeps the Hugging Face layout).
    """
    if cfg.architecture != "llama":
        permute = None
    out = {"token_embd.weight": tensors["model.embed_tokens.weight"]}
    for i in range(cfg.num_layers):
        for hf_rest in _LAYER:
            hf = f"model.layers.{i}.{hf_rest}"
            if hf not in tensors:
                continue
            w = tensors[hf]
            if permute is not None and hf_rest.startswith("self_attn.q_proj."):
                w = permute(w, cfg.num_heads)
            elif permute is not None and hf_rest.startswith("self_attn.k_proj."):
                w = permute(w, cfg.num_kv_heads)
            out[gguf_name(hf)] = w
    out["output_norm.weight"] = tensors["model.norm.weight"]
    if "lm_head.weight" in tensors:
        out["output.weight"] = tensors["lm_head.weight"]
    return out


def stored_value(x: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """What a reader gets back after ``x`` is stored as ``qtype`` (1-D tensors stay F32)."""
    if x.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
        return x.astype(np.float32)
    q = gguf.quants.quantize(x.astype(np.float32), qtype)
    return gguf.quants.dequantize(q, qtype).reshape(x.shape).astype(np.float32)


def write_gguf(path, cfg, tensors: dict[str, np.ndarray], *,
               qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
               arch: str = "llama", drop: tuple[str, ...] = (),
               replace: dict[str, np.ndarray] | None = None,
               omit_keys: tuple[str, ...] = (), tokenizer: bool = True,
               tokenizer_model: str = "gpt2", tokens: list[str] | None = None) -> Path:
    """Writes a llama.cpp-style GGUF of ``tensors`` (HF names, ``[out, in]``, float32).

    qtype: storage type of the 2-D tensors (norms stay F32, as llama.cpp does).
    drop: GGUF tensor names to leave out; replace: GGUF name -> array written instead
    (after the permutation); omit_keys: ``{arch}.*`` metadata keys (without the prefix)
    to leave out; tokens: replaces the token list (same length expected).
    """
    path = Path(path)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.name", "tiny-test-llama")
    meta = {
        "block_count": cfg.num_layers,
        "context_length": cfg.max_position_embeddings,
        "embedding_length": cfg.hidden_size,
        "feed_forward_length": cfg.intermediate_size,
        "attention.head_count": cfg.num_heads,
        "attention.head_count_kv": cfg.num_kv_heads,
        "rope.freq_base": float(cfg.rope_theta),
        "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
        "rope.dimension_count": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
    }
    for key, val in meta.items():
        if key in omit_keys:
            continue
        if isinstance(val, float):
            w.add_float32(f"{arch}.{key}", val)
        else:
            w.add_uint32(f"{arch}.{key}", val)
    if tokenizer:
        vocab, types = tokenizer_vocab()
        if tokens is not None:
            vocab = tokens
        w.add_string("tokenizer.ggml.model", tokenizer_model)
        w.add_string("tokenizer.ggml.pre", "smollm")
        w.add_array("tokenizer.ggml.tokens", vocab)
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_array("tokenizer.ggml.merges", MERGES)
        w.add_uint32("tokenizer.ggml.bos_token_id", BOS_ID)
        w.add_uint32("tokenizer.ggml.eos_token_id", EOS_ID)
        w.add_uint32("tokenizer.ggml.padding_token_id", EOS_ID)
        w.add_bool("tokenizer.ggml.add_bos_token", False)
        w.add_string("tokenizer.chat_template", CHATML_TEMPLATE)
    named = gguf_tensors(cfg, tensors)
    named.update(replace or {})
    for name, arr in named.items():
        if name in drop:
            continue
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, arr)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ----------------------------------------------------------------------------- HF dirs

def hf_config_dict(cfg, **overrides) -> dict:
    d = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
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
        "torch_dtype": "float32",
    }
    d.update(overrides)
    return d


def write_hf_dir(path, cfg, tensors: dict[str, np.ndarray], *, shards: int = 1,
                 config: dict | None = None) -> Path:
    """config.json + model.safetensors, or ``shards`` files with model.safetensors.index.json."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or hf_config_dict(cfg)))
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"))
        return path
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in names[s::shards]}
        save_file(part, str(path / fname))
        weight_map.update({k: fname for k in part})
    total = sum(v.nbytes for v in tensors.values())
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return path
