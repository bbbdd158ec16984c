"""Medusa-1 heads (card C19): ``K`` residual heads on the target's last hidden state.

Head ``k`` (``1..K``) reads the target's normed last hidden state ``h_t`` at the newest
verified position ``t`` and predicts the token ``k + 1`` positions ahead (``x_{t+1}`` is the
target's own next token, the pending token of the next step):
``logits_k = W_k (h + SiLU(U_k h))`` with ``U_k`` zero-initialised (identity start) and
``W_k`` initialised from the target's LM head rows of a draft vocabulary (``draft_ids``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.errors import DrafterError


@dataclasses.dataclass(frozen=True)
class MedusaHeadConfig:
    num_heads: int
    hidden_size: int
    vocab_size: int
    draft_vocab: int
    target_layers: int

    def __post_init__(self):
        if not isinstance(self.num_heads, int) or self.num_heads < 1:
            raise DrafterError(f"Medusa needs at least one head, got {self.num_heads!r}")
        if not 1 <= self.draft_vocab <= self.vocab_size:
            raise DrafterError(f"draft_vocab must be in [1, {self.vocab_size}], got "
                               f"{self.draft_vocab}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class MedusaHeads(nnx.Module):
    def __init__(self, cfg: MedusaHeadConfig, out_rows: jax.Array, *, rngs: nnx.Rngs):
        self.cfg = cfg
        K, h = cfg.num_heads, cfg.hidden_size
        self.res = nnx.Param(jnp.zeros((K, h, h), jnp.float32))  # U_k, zero: identity start
        self.res_bias = nnx.Param(jnp.zeros((K, h), jnp.float32))
        self.out = nnx.Param(jnp.broadcast_to(jnp.asarray(out_rows, jnp.float32)[None],
                                              (K,) + tuple(out_rows.shape)))

    def __call__(self, h: jax.Array) -> jax.Array:
        """``h[B, h]`` -> logits ``[B, K, draft_vocab]``."""
        h = h.astype(jnp.float32)
        u = jnp.einsum("bd,ked->bke", h, self.res[...]) + self.res_bias[...][None]
        x = h[:, None] + jax.nn.silu(u)
        return jnp.einsum("bkd,kvd->bkv", x, self.out[...])

