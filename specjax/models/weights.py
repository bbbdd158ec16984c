"""Putting checkpoint tensors (Hugging Face names, ``[out, in]`` layout) into a :class:`Llama`."""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.config import ModelConfig
from specjax.models.llama import Llama
from specjax.errors import CheckpointError  # noqa: F401  (re-exported)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    d, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (v, d)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        })
        if cfg.attention_bias:
            out.update({
                p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.bias": (kv,),
            })
    return out


def _targets(model: Llama) -> dict[str, tuple[nnx.Variable, int, int]]:
    """HF name -> (variable, first row, end row) of the (possibly fused) parameter."""
    cfg = model.cfg
    q, kv, f = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, \
        cfg.intermediate_size
    out = {"model.embed_tokens.weight": (model.embed, 0, cfg.vocab_size),
           "model.norm.weight": (model.final_norm, 0, cfg.hidden_size)}
    if model.lm_head is not None:
        out["lm_head.weight"] = (model.lm_head, 0, cfg.vocab_size)
    d = cfg.hidden_size
    for i, blk in enumerate(model.layers):
        p = f"model.layers.{i}."
        a, m = blk.attn, blk.mlp
        out.update({
            p + "input_layernorm.weight": (blk.attn_norm, 0, d),
            p + "post_attention_layernorm.weight": (blk.mlp_norm, 0, d),
            p + "self_attn.q_proj.weight": (a.wqkv, 0, q),
            p + "self_attn.k_proj.weight": (a.wqkv, q, q + kv),
            p + "self_attn.v_proj.weight": (a.wqkv, q + kv, q + 2 * kv),
            p + "self_attn.o_proj.weight": (a.wo, 0, d),
            p + "mlp.gate_proj.weight": (m.w_gate_up, 0, f),
            p + "mlp.up_proj.weight": (m.w_gate_up, f, 2 * f),
            p + "mlp.down_proj.weight": (m.w_down, 0, d),
        })
        if a.bqkv is not None:
            out.update({
                p + "self_attn.q_proj.bias": (a.bqkv, 0, q),
                p + "self_attn.k_proj.bias": (a.bqkv, q, q + kv),
                p + "self_attn.v_proj.bias": (a.bqkv, q + kv, q + 2 * kv),
            })
    return out


_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _with_gguf_name(hf_name: str) -> str:
    """``model.layers.1.mlp.up_proj.weight (GGUF: blk.1.ffn_up.weight)`` for error messages."""
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[1] == "layers" and parts[3] in _GGUF_NAMES:
        return f"{hf_name} (GGUF: blk.{parts[2]}.{_GGUF_NAMES[parts[3]]})"
    return hf_name


def model_from_tensors(cfg: ModelConfig, tensors: Mapping[str, np.ndarray], *, source: str,
                       param_dtype=jnp.float32, dtype=jnp.float32) -> Llama:
    """Builds a model whose parameters are ``tensors`` (HF names). Checks every name and shape."""
    want = expected_shapes(cfg)
    missing = [k for k in want if k not in tensors]
    if missing:
        missing = [_with_gguf_name(k) for k in missing]
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise CheckpointError(f"{source}: missing tensor(s) {missing[:5]}{more}")
    for k, shape in want.items():
        got = tuple(np.shape(tensors[k]))
        if got != shape:
            raise CheckpointError(
                f"{source}: tensor {k!r} has shape {got}, expected {shape} for this config"
            )
    abstract = nnx.eval_shape(lambda: Llama(cfg, param_dtype=param_dtype, dtype=dtype))
    parts: dict[int, list] = {}
    for k, (var, lo, hi) in _targets(abstract).items():
        parts.setdefault(id(var), [var, []])[1].append((lo, k))
    for var, pieces in parts.values():
        arrs = [np.asarray(tensors[k], dtype=np.float32) for _, k in sorted(pieces)]
        full = arrs[0] if len(arrs) == 1 else np.concatenate(arrs, axis=0)
        var.set_value(jnp.asarray(full, dtype=param_dtype))
    return abstract


def model_to_tensors(model: Llama) -> dict[str, np.ndarray]:
    """The inverse of :func:`model_from_tensors` (float32 numpy, HF names). For a quantized
    model the int8 weights come back dequantized: the layers', and an untied head's (its
    float copy is dropped by quantization). A tied head is the float embedding table, which
    quantization keeps."""
    from specjax.models.quant import dequantized

    scales = {}
    for blk in model.layers:
        for mod, names in ((blk.attn, ("wqkv", "wo")), (blk.mlp, ("w_gate_up", "w_down"))):
            for n in names:
                scales[id(getattr(mod, n))] = getattr(mod, n + "_scale", None)
    cache: dict[int, np.ndarray] = {}
    out = {}
    for k, (var, lo, hi) in _targets(model).items():
        if id(var) not in cache:
            cache[id(var)] = np.asarray(jax.device_get(dequantized(var, scales.get(id(var)))),
                                        dtype=np.float32)
        out[k] = cache[id(var)][lo:hi]
    if not model.cfg.tie_embeddings and model.lm_head is None:  # quantized untied head
        out["lm_head.weight"] = np.asarray(
            jax.device_get(dequantized(model.head_q, model.head_scale)), dtype=np.float32)
    return out
