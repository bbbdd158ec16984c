"""Lower-precision weights: ``w8a8`` (int8 weights and int8 activations, int32 accumulation).

``quantize(model, "w8a8")`` returns a copy of a :class:`~specjax.models.llama.Llama` whose
linear layers (fused q/k/v, output, fused gate/up, down) and LM head hold int8 weights with one
float32 scale per output row (symmetric, ``max |w| / 127``). At run time each activation row is
quantized to int8 with its own scale, the product runs int8 x int8 -> int32 and is rescaled.
Embedding lookup, norms, rotary embeddings, attention and the KV cache stay in the compute
dtype.

Why w8a8 and not int8 weights with float activations: on XLA:CPU a dequantizing ``convert``
feeding a float ``dot`` is materialized and runs about 10x slower than the float32 product,
while the integer product has a fast kernel (docs/benchmarks.md). A decode step reads a quarter
of the float32 weight bytes. The float embedding table stays for token lookup, and an untied
float LM head is dropped.

The output is not the float32 model's output. Measured on SmolLM2-135M (docs/benchmarks.md):
perplexity on Spec-Bench questions rises from 28.9 to 30.2, and the teacher-forced argmax
agrees with float32 at 92% of positions, so greedy continuations part after a few tokens.

Speculative decoding on a w8a8 target is NOT token-identical to plain w8a8 decoding. The verify
forward over k tokens and one-token decoding reduce in different orders: attention splits the
prefix and the new block differently, and XLA:CPU's reductions (RMSNorm included) depend on
the shape. The last-bit differences (about 1e-7) sometimes move an activation across an int8
rounding boundary. Rows with large outliers have a coarse step, so
one flip can move logits by about 1 and change a near-tie. On the built-in prompts, prompt
lookup and plain decoding part after 11-94 tokens. The float32 path does not amplify
this (logit differences about 3e-5) and is identical to plain decoding on every benchmarked
prompt. Use it where exactness matters.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from specjax.models.llama import Llama, quantize_rows

QUANT_MODES = ("none", "w8a8")


def quantize_param(param) -> tuple[nnx.Param, nnx.Param]:
    """A ``[out, in]`` weight as ``(int8 values, float32 scale per row)`` parameters, the pair
    :func:`specjax.models.llama.linear` takes for a w8a8 product."""
    vals, scale = quantize_rows(param[...])
    return nnx.Param(vals), nnx.Param(scale[:, 0])


def quantize(model: Llama, mode: str = "w8a8") -> Llama:
    """A copy of ``model`` with its weights quantized (``mode``: ``"w8a8"``; ``"none"`` or
    None returns ``model`` itself). The input model is left as it is.

    Raises:
      ValueError: an unknown mode, or a model that is already quantized.
    """
    if mode in (None, "none"):
        return model
    if mode not in QUANT_MODES:
        raise ValueError(f"unknown quantization {mode!r}; available: {', '.join(QUANT_MODES)}")
    if quantization_of(model) != "none":
        raise ValueError(f"the model is already quantized ({quantization_of(model)})")
    m = nnx.clone(model)
    for blk in m.layers:
        a, mlp = blk.attn, blk.mlp
        a.wqkv, a.wqkv_scale = quantize_param(a.wqkv)
        a.wo, a.wo_scale = quantize_param(a.wo)
        mlp.w_gate_up, mlp.w_gate_up_scale = quantize_param(mlp.w_gate_up)
        mlp.w_down, mlp.w_down_scale = quantize_param(mlp.w_down)
    m.head_q, m.head_scale = quantize_param(m.embed if m.lm_head is None else m.lm_head)
    m.lm_head = None  # an untied float head is never read again (the embedding still is)
    m.quantization = mode
    return m


def quantization_of(model: Llama) -> str:
    """``"none"`` or the mode :func:`quantize` applied."""
    return getattr(model, "quantization", "none")


def dequantized(param, scale) -> jnp.ndarray:
    """Float32 values of an int8 weight and its row scales (``scale`` None: as stored)."""
    w = param[...]
    if scale is None:
        return w.astype(jnp.float32)
    return w.astype(jnp.float32) * scale[...].astype(jnp.float32)[:, None]
