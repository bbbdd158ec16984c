"""Tree attention: T tree nodes attend to a committed KV prefix plus a masked tree block.

LongSpec's hybrid split (METHODS.md card C30): a flash-decoding Pallas kernel for the prefix,
a small masked attention for the tree block, merged by log-sum-exp. See :mod:`.api`.
"""

from specjax.pallas_kernels.tree_attention.api import IMPLEMENTATIONS, tree_attention
from specjax.pallas_kernels.tree_attention.reference import (tree_attention_dense,
                                                            tree_attention_xla)

__all__ = ["IMPLEMENTATIONS", "tree_attention", "tree_attention_dense", "tree_attention_xla"]
