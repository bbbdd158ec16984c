"""A batch-invariant matrix product: a row's result does not depend on how many rows share the
product, nor on where the row sits among them. See :mod:`.kernel`."""

from specjax.pallas_kernels.invariant_matmul.kernel import (KERNEL_MODES, MODE_ENV, MODES,
                                                            Blocks, choose_blocks,
                                                            default_mode, invariant_matmul,
                                                            kernel_mode)
from specjax.pallas_kernels.invariant_matmul.reference import blocked_matmul_reference

__all__ = ["KERNEL_MODES", "MODES", "MODE_ENV", "Blocks", "blocked_matmul_reference",
           "choose_blocks", "default_mode", "invariant_matmul", "kernel_mode"]
