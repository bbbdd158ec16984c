"""Training Medusa-1 heads (card C19) by self-distillation.

The frozen target runs once over whole sequences; head ``i`` (0-based) at position ``t``
reads the normed last hidden state ``h_t`` and learns the target's own distribution over
``x_{t+i+2}`` (its logits at ``t + i + 1``), restricted to the draft vocabulary and masked
where the target's argmax lies outside it, over answer positions; head ``i``'s loss is
weighted ``head_weight ** i`` (the paper's decaying weights).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.errors import ConfigError
from specjax.heads.medusa import MedusaHeadConfig, init_medusa_heads, save_medusa_heads
from specjax.train.task import TASKS
from specjax.train.tasks._target import draft_vocabulary, target_pass


@dataclasses.dataclass(frozen=True)
class MedusaTaskConfig:
    """Options of the ``medusa`` training task."""

    num_heads: int = dataclasses.field(default=3, metadata={
        "help": "heads K (head i drafts i + 1 tokens past the pending one)"})
    head_weight: float = dataclasses.field(default=0.8, metadata={
        "help": "loss weight of head i is head_weight ** i"})
    draft_vocab: int = dataclasses.field(default=8192, metadata={
        "help": "draft vocabulary size (the most frequent answer tokens of the corpus)"})
    shared_out: bool = dataclasses.field(default=True, metadata={
        "help": "one LM head matrix shared by all heads (K times smaller files)"})
    corpus: str | None = None

    def __post_init__(self):
        if not isinstance(self.num_heads, int) or self.num_heads < 1:
            raise ConfigError(f"num_heads must be an integer >= 1, got {self.num_heads!r}")
        if not 0.0 < self.head_weight <= 1.0:
            raise ConfigError(f"head_weight must be in (0, 1], got {self.head_weight!r}")
        if not isinstance(self.draft_vocab, int) or self.draft_vocab < 1:
            raise ConfigError(f"draft_vocab must be an integer >= 1, got {self.draft_vocab!r}")


def shift_left(x: jax.Array, n: int, fill=0) -> jax.Array:
    """``out[:, t] = x[:, t + n]`` (``fill`` past the end), along axis 1."""
    if n == 0:
        return x
    pad = jnp.full((x.shape[0], n) + x.shape[2:], fill, x.dtype)
    return jnp.concatenate([x[:, n:], pad], axis=1)


@dataclasses.dataclass(frozen=True)
class MedusaTask:
    name: str
    head_cfg: MedusaHeadConfig
    cfg: MedusaTaskConfig
    target_graphdef: object
    head_graphdef: object
    _target_params: object = dataclasses.field(compare=False, hash=False, repr=False)
    _draft_ids: object = dataclasses.field(compare=False, hash=False, repr=False)
    _init_state: object = dataclasses.field(compare=False, hash=False, repr=False)
    _tokenizer: object = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    def init_params(self, rng):
        return {"heads": self._init_state}

    def frozen(self):
        return {"target": self._target_params,
                "draft_ids": jnp.asarray(self._draft_ids, jnp.int32)}

    def loss(self, params, frozen, batch, rng):
        heads = nnx.merge(self.head_graphdef, params["heads"])
        mask = batch["loss_mask"].astype(bool)
        tp = target_pass(self.target_graphdef, frozen, batch["tokens"])
        logits = heads(tp.final_hidden)  # [B, T, K, Vd]
        total = jnp.float32(0.0)
        metrics = {}
        for i in range(self.head_cfg.num_heads):
            t_logits = shift_left(tp.logits, i + 1)
            valid = shift_left(mask, i + 2, False) & shift_left(tp.inside, i + 1, False)
            n = jnp.maximum(jnp.sum(valid), 1)
            p = jax.nn.softmax(t_logits, axis=-1)
            ce = -jnp.sum(p * jax.nn.log_softmax(logits[:, :, i], axis=-1), axis=-1)
            head_loss = jnp.sum(jnp.where(valid, ce, 0.0)) / n
            total = total + self.cfg.head_weight ** i * head_loss
            hit = jnp.argmax(logits[:, :, i], -1) == jnp.argmax(t_logits, -1)
            metrics[f"acc_{i}"] = jnp.sum(valid & hit) / n
            metrics[f"loss_{i}"] = head_loss
        metrics["loss"] = total
        return total, metrics

    def save_head(self, params, path, meta):
        return save_medusa_heads(path, self.head_cfg, params["heads"], self._draft_ids,
                                 tokenizer=self._tokenizer, meta=meta)


@TASKS.register("medusa", config=MedusaTaskConfig,
                doc="Medusa-1 heads: K residual heads on the last hidden state, distilled "
                    "from the target's own distribution")
def build_medusa(cfg: MedusaTaskConfig, lm) -> MedusaTask:
    target = getattr(lm, "model", lm)
    V = target.cfg.vocab_size
    ids = draft_vocabulary(cfg.corpus, V, cfg.draft_vocab)
    hcfg = MedusaHeadConfig(num_heads=cfg.num_heads, hidden_size=target.cfg.hidden_size,
                            vocab_size=V, draft_vocab=len(ids),
                            target_layers=target.cfg.num_layers, shared_out=cfg.shared_out)
    graphdef, state = init_medusa_heads(hcfg, target, ids)
    tgraph, tparams = nnx.split(target)
    return MedusaTask(name="medusa", head_cfg=hcfg, cfg=cfg, target_graphdef=tgraph,
                      head_graphdef=graphdef, _target_params=tparams, _draft_ids=ids,
                      _init_state=state, _tokenizer=getattr(lm, "tokenizer", None))
