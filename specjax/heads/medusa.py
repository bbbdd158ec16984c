"""Medusa-1 heads (card C19): ``K`` residual heads on the target's last hidden state.

Head ``k`` (``1..K``) reads the target's normed last hidden state ``h_t`` at the newest
verified position ``t`` and predicts the token ``k + 1`` positions ahead (``x_{t+1}`` is the
target's own next token, the pending token of the next step):
``logits_k = W_k (h + SiLU(U_k h + b_k))`` with ``U_k`` zero-initialised (identity start) and
``W_k`` initialised from the target's LM head rows of a draft vocabulary (``draft_ids``).
With ``shared_out`` the heads share one ``W`` (one matrix in the file instead of ``K``: the
shipped heads use it to stay small; the product per head is the same).

Files (:func:`save_medusa_heads` / :func:`load_medusa_heads`): a directory with
``config.json`` (format ``"specjax-medusa-1"``, the config, the target's shapes and tokenizer
hash, ``meta``) and ``model.safetensors`` (``res``, ``res_bias``, ``out``, ``draft_ids``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.errors import CheckpointError, DrafterError
from specjax.heads.files import check_target, describe, fill_state, read_head_conf, \
    read_tensors, save_head_dir

FORMAT = "specjax-medusa-1"


@dataclasses.dataclass(frozen=True)
class MedusaHeadConfig:
    num_heads: int
    hidden_size: int
    vocab_size: int
    draft_vocab: int
    target_layers: int
    shared_out: bool = False

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
        n_out = 1 if cfg.shared_out else K
        self.out = nnx.Param(jnp.broadcast_to(jnp.asarray(out_rows, jnp.float32)[None],
                                              (n_out,) + tuple(out_rows.shape)))

    def hidden(self, h: jax.Array) -> jax.Array:
        """``h[..., h]`` -> the heads' inputs to their LM heads ``[..., K, h]``."""
        h = h.astype(jnp.float32)
        u = jnp.einsum("...d,ked->...ke", h, self.res[...]) + self.res_bias[...]
        return h[..., None, :] + jax.nn.silu(u)

    def __call__(self, h: jax.Array) -> jax.Array:
        """``h[..., h]`` -> logits ``[..., K, draft_vocab]``."""
        x = self.hidden(h)
        out = self.out[...]
        if self.cfg.shared_out:
            return jnp.einsum("...kd,vd->...kv", x, out[0])
        return jnp.einsum("...kd,kvd->...kv", x, out)


def init_medusa_heads(cfg: MedusaHeadConfig, target, draft_ids) -> tuple:
    """Fresh heads for ``target`` (identity residuals, LM head rows of ``draft_ids``).
    Returns ``(graphdef, state)``."""
    rows = target.embed[...] if getattr(target, "lm_head", None) is None else \
        target.lm_head[...]
    heads = MedusaHeads(cfg, jnp.asarray(rows)[jnp.asarray(draft_ids)], rngs=nnx.Rngs(0))
    return nnx.split(heads)


def save_medusa_heads(path: str | Path, cfg: MedusaHeadConfig, state, draft_ids, *,
                      tokenizer=None, meta: dict | None = None, dtype: str = "float32"
                      ) -> Path:
    return save_head_dir(path, FORMAT, "heads", cfg, state, draft_ids, tokenizer=tokenizer,
                         meta=meta, dtype=dtype)


def load_medusa_heads(path: str | Path, target, tokenizer=None):
    """Loads a heads directory for ``target``. Returns ``(cfg, graphdef, state, draft_ids,
    description)``.

    Raises:
      CheckpointError: naming the file and the problem (missing/truncated files, heads for
        another target or tokenizer, a bad draft map, misshapen tensors).
    """
    conf = read_head_conf(path, FORMAT, "Medusa heads")
    try:
        cfg = MedusaHeadConfig(**conf["heads"])
    except (KeyError, TypeError, DrafterError) as e:
        raise CheckpointError(f"{Path(path) / 'config.json'}: bad heads config: {e}") from None
    t = target.cfg
    check_target(path, conf, [("num_layers", cfg.target_layers, t.num_layers),
                              ("hidden_size", cfg.hidden_size, t.hidden_size),
                              ("vocab_size", cfg.vocab_size, t.vocab_size)],
                 tokenizer, "these heads were")
    tensors, ids = read_tensors(path, cfg.draft_vocab, cfg.vocab_size)
    graphdef, state = init_medusa_heads(cfg, target, ids)
    state = fill_state(state, tensors, path, "Medusa heads")
    return cfg, graphdef, state, ids, describe("medusa heads", path, conf)
