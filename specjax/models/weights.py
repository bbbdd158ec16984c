"""Putting checkpoint tensors (Hugging Face names, ``[out, in]`` layout) into a :class:`Llama`."""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.config import ModelConfig
from specjax.models.llama import Llama


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded: names the file and the problem."""


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


def _targets(model: Llama) -> dict[str, nnx.Variable]:
    out = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm}
    if model.lm_head is not None:
        out["lm_head.weight"] = model.lm_head
    for i, blk in enumerate(model.layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": blk.attn_norm,
            p + "post_attention_layernorm.weight": blk.mlp_norm,
            p + "self_attn.q_proj.weight": blk.attn.wq,
            p + "self_attn.k_proj.weight": blk.attn.wk,
            p + "self_attn.v_proj.weight": blk.attn.wv,
            p + "self_attn.o_proj.weight": blk.attn.wo,
            p + "mlp.gate_proj.weight": blk.mlp.w_gate,
            p + "mlp.up_proj.weight": blk.mlp.w_up,
            p + "mlp.down_proj.weight": blk.mlp.w_down,
        })
        if blk.attn.bq is not None:
            out.update({
                p + "self_attn.q_proj.bias": blk.attn.bq,
                p + "self_attn.k_proj.bias": blk.attn.bk,
                p + "self_attn.v_proj.bias": blk.attn.bv,
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
    for k, var in _targets(abstract).items():
        var.set_value(jnp.asarray(np.asarray(tensors[k]), dtype=param_dtype))
    return abstract


def model_to_tensors(model: Llama) -> dict[str, np.ndarray]:
    """The inverse of :func:`model_from_tensors` (float32 numpy, HF names)."""
    return {k: np.asarray(jax.device_get(v[...]), dtype=np.float32)
            for k, v in _targets(model).items()}
