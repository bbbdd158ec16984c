"""Training Hydra / Hydra++ heads (card C20) by teacher distillation.

The frozen target runs once over whole sequences. The context vector ``c_t`` is its normed
last hidden state (Hydra) or the prefix layer's output over those states (Hydra++, trained
with the heads). Head ``i`` at position ``t`` reads ``c_t`` and the teacher-forced embeddings
of ``x_{t+1} .. x_{t+i+1}`` and learns the target's own distribution over ``x_{t+i+2}`` (its
logits at ``t + i + 1``: Hydra++'s teacher loss), restricted to the draft vocabulary and masked
where the target's argmax lies outside it, over answer positions, head ``i`` weighted
``head_weight ** i``. (Hydra++'s embedding noise and dropout are not applied.)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.errors import ConfigError
from specjax.heads.hydra import HydraHeadConfig, head_buffer, init_hydra_heads, \
    save_hydra_heads
from specjax.train.task import TASKS
from specjax.train.tasks._target import draft_vocabulary, target_pass
from specjax.train.tasks.medusa import shift_left


@dataclasses.dataclass(frozen=True)
class HydraTaskConfig:
    """Options of the ``hydra`` training task."""

    num_heads: int = dataclasses.field(default=4, metadata={
        "help": "heads K (head i drafts i + 1 tokens past the pending one)"})
    mlp_layers: int = dataclasses.field(default=4, metadata={
        "help": "residual blocks per head (Hydra++: 4)"})
    prefix_attention: bool = dataclasses.field(default=True, metadata={
        "help": "Hydra++'s prefix attention layer"})
    head_weight: float = dataclasses.field(default=0.8, metadata={
        "help": "loss weight of head i is head_weight ** i"})
    draft_vocab: int = dataclasses.field(default=8192, metadata={
        "help": "draft vocabulary size (the most frequent answer tokens of the corpus)"})
    shared_out: bool = True
    corpus: str | None = None
    seed_head: int = 0

    def __post_init__(self):
        if not isinstance(self.num_heads, int) or self.num_heads < 1:
            raise ConfigError(f"num_heads must be an integer >= 1, got {self.num_heads!r}")
        if not isinstance(self.mlp_layers, int) or self.mlp_layers < 0:
            raise ConfigError(f"mlp_layers must be an integer >= 0, got {self.mlp_layers!r}")
        if not 0.0 < self.head_weight <= 1.0:
            raise ConfigError(f"head_weight must be in (0, 1], got {self.head_weight!r}")
        if not isinstance(self.draft_vocab, int) or self.draft_vocab < 1:
            raise ConfigError(f"draft_vocab must be an integer >= 1, got {self.draft_vocab!r}")


@dataclasses.dataclass(frozen=True)
class HydraTask:
    name: str
    head_cfg: HydraHeadConfig
    cfg: HydraTaskConfig
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
        tokens = batch["tokens"]
        mask = batch["loss_mask"].astype(bool)
        B, T = tokens.shape
        tp = target_pass(self.target_graphdef, frozen, tokens)
        pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
        cache = heads.prefix.init_cache(B, T) if heads.prefix is not None else None
        c, _ = heads.context(tp.final_hidden, pos, cache, prefix_empty=True)
        emb = jnp.take(tp.target.embed[...], tokens, axis=0).astype(jnp.float32)
        K = self.head_cfg.num_heads
        total = jnp.float32(0.0)
        metrics = {}
        for i in range(K):
            logits = heads.logits(head_buffer(c, emb, K, i), i)  # [B, T, Vd]
            t_logits = shift_left(tp.logits, i + 1)
            valid = shift_left(mask, i + 2, False) & shift_left(tp.inside, i + 1, False)
            n = jnp.maximum(jnp.sum(valid), 1)
            p = jax.nn.softmax(t_logits, axis=-1)
            ce = -jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1)
            head_loss = jnp.sum(jnp.where(valid, ce, 0.0)) / n
            total = total + self.cfg.head_weight ** i * head_loss
            hit = jnp.argmax(logits, -1) == jnp.argmax(t_logits, -1)
            metrics[f"acc_{i}"] = jnp.sum(valid & hit) / n
            metrics[f"loss_{i}"] = head_loss
        metrics["loss"] = total
        return total, metrics

    def save_head(self, params, path, meta):
        return save_hydra_heads(path, self.head_cfg, params["heads"], self._draft_ids,
                                tokenizer=self._tokenizer, meta=meta)


@TASKS.register("hydra", config=HydraTaskConfig,
                doc="Hydra++ heads: sequentially dependent MLP heads (prefix attention layer, "
                    "teacher distillation)")
def build_hydra(cfg: HydraTaskConfig, lm) -> HydraTask:
    target = getattr(lm, "model", lm)
    V = target.cfg.vocab_size
    ids = draft_vocabulary(cfg.corpus, V, cfg.draft_vocab)
    hcfg = HydraHeadConfig.for_target(target.cfg, cfg.num_heads, len(ids),
                                      mlp_layers=cfg.mlp_layers,
                                      prefix_attention=cfg.prefix_attention,
                                      shared_out=cfg.shared_out)
    graphdef, state = init_hydra_heads(hcfg, target, ids, seed=cfg.seed_head)
    tgraph, tparams = nnx.split(target)
    return HydraTask(name="hydra", head_cfg=hcfg, cfg=cfg, target_graphdef=tgraph,
                     head_graphdef=graphdef, _target_params=tparams, _draft_ids=ids,
                     _init_state=state, _tokenizer=getattr(lm, "tokenizer", None))
