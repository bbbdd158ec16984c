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
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.errors import CheckpointError, DrafterError
from specjax.heads.interop import _np_dtype
from specjax.tokenizer import tokenizer_sha256

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
    from safetensors.numpy import save_file

    dt = _np_dtype(dtype)
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    tensors = {".".join(map(str, k)): np.asarray(leaf.get_value(), np.float32).astype(dt)
               for k, leaf in nnx.to_flat_state(state)}
    tensors["draft_ids"] = np.asarray(draft_ids, np.int32)
    save_file(tensors, str(p / "model.safetensors"))
    conf = {"format": FORMAT, "heads": cfg.to_dict(),
            "target": {"num_layers": cfg.target_layers, "hidden_size": cfg.hidden_size,
                       "vocab_size": cfg.vocab_size,
                       "tokenizer_sha256": tokenizer_sha256(tokenizer) if tokenizer else None},
            "meta": meta or {}}
    (p / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    return p


def load_medusa_heads(path: str | Path, target, tokenizer=None):
    """Loads a heads directory for ``target``. Returns ``(cfg, graphdef, state, draft_ids,
    description)``.

    Raises:
      CheckpointError: naming the file and the problem (missing/truncated files, heads for
        another target or tokenizer, a bad draft map, misshapen tensors).
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = Path(path)
    conf_f, weights_f = p / "config.json", p / "model.safetensors"
    for f in (conf_f, weights_f):
        if not f.is_file():
            raise CheckpointError(f"{f}: not found (Medusa heads are a directory with "
                                  "config.json and model.safetensors)")
    try:
        conf = json.loads(conf_f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{conf_f}: not a JSON config: {e}") from None
    if not isinstance(conf, dict) or conf.get("format") != FORMAT:
        raise CheckpointError(f"{conf_f}: not specjax Medusa heads (format "
                              f"{conf.get('format') if isinstance(conf, dict) else None!r}, "
                              f"expected {FORMAT!r})")
    try:
        cfg = MedusaHeadConfig(**conf["heads"])
    except (KeyError, TypeError, DrafterError) as e:
        raise CheckpointError(f"{conf_f}: bad heads config: {e}") from None
    t = target.cfg
    for field, have, want in (("num_layers", cfg.target_layers, t.num_layers),
                              ("hidden_size", cfg.hidden_size, t.hidden_size),
                              ("vocab_size", cfg.vocab_size, t.vocab_size)):
        if have != want:
            raise CheckpointError(f"{p}: these heads were trained for a target with {field} = "
                                  f"{have}; the loaded target has {want}")
    want_tok = (conf.get("target") or {}).get("tokenizer_sha256")
    have_tok = tokenizer_sha256(tokenizer) if tokenizer is not None else None
    if want_tok and have_tok and want_tok != have_tok:
        raise CheckpointError(f"{p}: these heads were trained with another tokenizer")
    try:
        tensors = load_file(str(weights_f))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights_f}: unreadable or truncated safetensors file: "
                              f"{e}") from None
    ids = tensors.pop("draft_ids", None)
    if ids is None:
        raise CheckpointError(f"{weights_f}: has no 'draft_ids' tensor")
    ids = np.asarray(ids).astype(np.int64)
    if ids.shape != (cfg.draft_vocab,) or ids.min() < 0 or ids.max() >= cfg.vocab_size or \
            len(np.unique(ids)) != len(ids):
        raise CheckpointError(f"{weights_f}: draft_ids must hold {cfg.draft_vocab} distinct "
                              f"target ids in [0, {cfg.vocab_size})")
    graphdef, state = init_medusa_heads(cfg, target, ids)
    flat = nnx.to_flat_state(state)
    for path_, leaf in flat:
        name = ".".join(map(str, path_))
        if name not in tensors:
            raise CheckpointError(f"{weights_f}: missing tensor {name}")
        arr = np.asarray(tensors[name], np.float32)
        if arr.shape != leaf.get_value().shape:
            raise CheckpointError(f"{weights_f}: tensor {name} has shape {arr.shape}, "
                                  f"expected {leaf.get_value().shape}")
        leaf.set_value(arr)
    step = (conf.get("meta") or {}).get("step")
    desc = f"medusa heads {p}" + (f" (step {step})" if step is not None else "")
    return cfg, graphdef, nnx.from_flat_state(flat), ids.astype(np.int32), desc
