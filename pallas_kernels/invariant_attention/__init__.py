"""Batch-invariant attention over a cache row: the product part of exact numerics' attention
(:func:`specjax.models.numerics.exact_attention`), whose bits do not depend on how many queries
or rows share the call, nor on the cache's length. See :mod:`.kernel`."""

from specjax.pallas_kernels.invariant_attention.kernel import (MODES, block_sizes,
                                                               invariant_attention_part)
from specjax.pallas_kernels.invariant_attention.reference import attention_part_reference

__all__ = ["MODES", "attention_part_reference", "block_sizes", "invariant_attention_part"]
