"""Loading the model a command runs on, from its settings (name, dtype, quantization,
attention implementation).

Shared by :mod:`specjax.cli` and :mod:`specjax.bench`, so that neither imports the other (the
CLI builds a bench config and calls the bench). The messages name the command-line flags, as
these settings are the flags of ``specjax generate``, ``info``, ``demo`` and ``bench``.
"""

from __future__ import annotations

import sys
import time

from specjax.errors import CLIError


def compute_dtype(name: str):
    """``"float32"`` | ``"bfloat16"`` (``--dtype``) -> the jax dtype."""
    import jax.numpy as jnp

    table = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
    if name not in table:
        raise CLIError(f"--dtype must be one of {sorted(table)}, got {name!r}")
    return table[name]


def load_for_run(model: str, dtype: str = "float32", quantize: str = "none",
                 attention_impl: str = "dense", *, decodes_text: bool = True,
                 speculative: bool = False, numerics: str = "exact",
                 exact_products: str | None = None):
    """Loads ``model`` for a run and says so on stderr (with the time it took).

    Args:
      model: preset name, ``.gguf`` file, Hugging Face directory or ``random:PRESET``.
      dtype: compute dtype, ``"float32"`` or ``"bfloat16"``.
      quantize: ``"none"`` or ``"w8a8"`` (:mod:`specjax.models.quant`).
      attention_impl: the model's attention implementation (``"dense"``, ``"xla"``,
        ``"pallas"``, ...; see ``Llama.set_attention_impl``).
      decodes_text: whether the run decodes text. Random weights have no tokenizer, so they
        are refused then (they serve ``specjax bench --verify-curve`` and ``info`` only).
      speculative: whether the run decodes speculatively: with ``fast`` numerics on a
        quantized target that is not token-identical to plain decoding, which a warning on
        stderr says.
      numerics: ``"exact"`` (invariant; ``--numerics``) or ``"fast"``
        (:mod:`specjax.models.numerics`).
      exact_products: with ``exact``: ``"xla"`` or ``"pallas"`` (``--exact-products``; the
        batch-invariant Pallas kernels); None: ``$SPECJAX_EXACT_PRODUCTS``, else ``"xla"``.

    Returns:
      The :class:`specjax.models.LoadedModel`.

    Raises:
      CLIError: an unknown dtype, quantization or attention implementation, or random
        weights for a run that decodes text.
    """
    from specjax.models.loaders import RANDOM_PREFIX, load
    from specjax.models.quant import QUANT_MODES

    t0 = time.perf_counter()
    from specjax.models.numerics import NUMERICS

    if quantize not in QUANT_MODES:
        raise CLIError(f"--quantize must be {' or '.join(QUANT_MODES)}, got {quantize!r}")
    if numerics not in NUMERICS:
        raise CLIError(f"--numerics must be {' or '.join(NUMERICS)}, got {numerics!r}")
    if exact_products is not None and numerics != "exact":
        raise CLIError(f"--exact-products {exact_products} needs --numerics exact (the "
                       f"products of fast numerics are the platform's own)")
    no_text = (f"{model!r} has random weights and no tokenizer: it serves `specjax bench "
               "--verify-curve` (timings) only; give a checkpoint or a preset name to decode "
               "text")
    if decodes_text and isinstance(model, str) and model.startswith(RANDOM_PREFIX):
        raise CLIError(no_text)  # said before building the random weights
    lm = load(model, dtype=compute_dtype(dtype), quantize=quantize, numerics=numerics)
    if exact_products is not None:
        try:
            lm.model.set_numerics(numerics, products=exact_products)
        except ValueError as e:
            raise CLIError(f"--exact-products: {e}") from None
    if lm.format == "random" and decodes_text:
        raise CLIError(no_text)
    if quantize != "none" and speculative and numerics == "fast":
        print(f"warning: with --numerics fast, speculative decoding on a {quantize} target is "
              f"not token-identical to plain {quantize} decoding (int8 rounding of activations "
              "amplifies last-bit differences between the verify and decode forwards); "
              "--numerics exact (the default) is", file=sys.stderr)
    try:
        lm.model.set_attention_impl(attention_impl)
    except ValueError as e:
        raise CLIError(f"--attention-impl: {e}") from None
    print(f"loaded {model} ({lm.format}) in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return lm
