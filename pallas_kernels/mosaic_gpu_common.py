"""What the Mosaic GPU (Hopper ``wgmma``) kernels share: the operand dtypes ``wgmma`` takes
exactly, the transposed view of a shared-memory operand, and the mode plumbing of the
batch-invariant kernels (:mod:`specjax.pallas_kernels.invariant_matmul`,
:mod:`specjax.pallas_kernels.invariant_attention`). Imports Mosaic GPU on first use only."""

from __future__ import annotations

import jax.numpy as jnp

SUPPORTED_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def dtype_reason(dtype, noun: str = "inputs") -> str | None:
    """Why ``wgmma`` cannot take ``dtype`` operands exactly, or None (``noun``: what the
    message calls them)."""
    if jnp.dtype(dtype) in SUPPORTED_DTYPES:
        return None
    return (f"supports {[str(d) for d in SUPPORTED_DTYPES]} {noun} (wgmma would run "
            f"{jnp.dtype(dtype)} in tf32)")


def transposed(ref):
    """``ref`` viewed transposed (``Ref.transpose`` in newer JAX, ``transpose_ref`` before)."""
    if hasattr(ref, "transpose"):
        return ref.transpose((1, 0))
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return plgpu.transpose_ref(ref, (1, 0))


def interpreter(mode: str):
    """The Mosaic GPU interpreter's params for ``"mosaic_gpu_interpret"``, None for
    ``"mosaic_gpu"`` (the compiled kernel)."""
    if mode != "mosaic_gpu_interpret":
        return None
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # not public

    return InterpretGPUParams()


def portable_mode(mode: str) -> str:
    """The portable kernel's mode for inputs a Mosaic GPU kernel does not take: Triton on a
    GPU, the interpreter for ``"mosaic_gpu_interpret"``."""
    return "triton" if mode == "mosaic_gpu" else "interpret"
