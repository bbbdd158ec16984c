"""Training EAGLE-3 and EAGLE-1 heads (cards C21, C23; the EAGLE-3 recipe of the issue).

Per batch the frozen target runs once over the whole sequences (its features are recomputed
in the step rather than stored: see docs/training.md) and gives, at every position ``t``, the
fused feature ``g_t`` and its distribution over the token ``x_{t+2}`` (its logits at
``t + 1``). The head then runs ``ttt_steps`` unrolled steps ("training-time test"): step 0
reads the pairs ``(g_t, x_{t+1})``; step ``i`` reads ``(h^{(i-1)}_{t-1}, x_{t+1})``, its own
previous output shifted by one position with the teacher-forced token, and attends to the
step-0 keys up to ``t - i`` plus its own earlier steps' keys on the diagonal ``t - i + j``,
exactly what drafting ``i`` tokens past a committed prefix sees. Every step predicts
``x_{t+2}``.

Loss (EAGLE-3): soft cross-entropy against the target's distribution restricted to the draft
vocabulary, masked where the target's argmax lies outside it, step ``i`` weighted
``step_weight ** i``, over answer positions. EAGLE-1 adds a smooth-L1 regression of the head's
output onto the next position's feature (``feature_weight``; the token term weighted
``token_weight``), as in its paper.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.errors import ConfigError
from specjax.heads.eagle import EagleHeadConfig, init_head
from specjax.heads.io import load_eagle_head, save_eagle_head
from specjax.train.task import TASKS
from specjax.train.tasks._target import draft_vocabulary, target_pass


@dataclasses.dataclass(frozen=True)
class EagleTaskConfig:
    """Options of the ``eagle3`` / ``eagle1`` training tasks."""

    ttt_steps: int = dataclasses.field(default=3, metadata={
        "help": "unrolled training-time-test steps (the paper: 7)"})
    step_weight: float = dataclasses.field(default=0.8, metadata={
        "help": "loss weight of step i is step_weight ** i"})
    draft_vocab: int = dataclasses.field(default=16384, metadata={
        "help": "draft vocabulary size (the most frequent answer tokens of the corpus)"})
    corpus: str | None = dataclasses.field(default=None, metadata={
        "help": "corpus whose answer-token counts choose the draft vocabulary (default: the "
                "trainer's data)"})
    token_weight: float = 1.0
    feature_weight: float = dataclasses.field(default=0.0, metadata={
        "help": "EAGLE-1's smooth-L1 feature regression weight (eagle1 default 1.0, token 0.1)"})
    seed_head: int = 0
    prompt_weight: float = dataclasses.field(default=0.0, metadata={
        "help": "loss weight of prompt positions (the target's law over the prompt text is a "
                "teacher signal too, computed by the same forward); 0: answer tokens only"})
    revocab: bool = dataclasses.field(default=False, metadata={
        "help": "with init_from: re-choose the draft vocabulary from this run's corpus at "
                "draft_vocab tokens instead of keeping the head's; the LM-head rows of tokens "
                "in both carry over, new tokens start from the target's output rows"})

    def __post_init__(self):
        if not isinstance(self.revocab, bool):
            raise ConfigError(f"revocab must be true or false, got {self.revocab!r}")
        if not isinstance(self.ttt_steps, int) or self.ttt_steps < 1:
            raise ConfigError(f"ttt_steps (unrolled steps) must be an integer >= 1, got "
                              f"{self.ttt_steps!r}")
        if not 0.0 <= self.prompt_weight <= 1.0:
            raise ConfigError(f"prompt_weight must be in [0, 1], got {self.prompt_weight!r}")
        if not 0.0 < self.step_weight <= 1.0:
            raise ConfigError(f"step_weight must be in (0, 1], got {self.step_weight!r}")
        if not isinstance(self.draft_vocab, int) or self.draft_vocab < 1:
            raise ConfigError(f"draft_vocab must be an integer >= 1, got {self.draft_vocab!r}")


def ttt_attention(q, keys, values, i: int, window: int | None = None):
    """Attention of step ``i``'s queries ``[B, T, H, Dh]`` over step 0's keys at positions
    ``<= t - i`` and step ``j``'s keys at ``t - i + j`` (``j = 1..i``). Returns
    ``[B, T, H * Dh]``; a query with nothing to see (``t < i``) gets zeros. ``window``: step
    0's keys only within the last ``window`` positions (a measurement: how far back the head
    reads, scripts/measure_draft_vocab.py ``--window``; training and drafting use None)."""
    B, T, H, Dh = q.shape
    kvh = keys[0].shape[2]
    g = H // kvh
    qg = q.reshape(B, T, kvh, g, Dh)
    scale = 1.0 / math.sqrt(Dh)
    t = jnp.arange(T)
    s0 = jnp.einsum("btkgd,bskd->bkgts", qg, keys[0]) * scale
    seen = t[None, :] <= t[:, None] - i
    if window is not None:
        seen = seen & (t[None, :] > t[:, None] - i - window)
    s0 = jnp.where(seen[None, None, None], s0, -jnp.inf)
    diag, vals = [], []
    for j in range(1, i + 1):
        shift = i - j  # key of position t - shift
        kj = jnp.pad(keys[j], ((0, 0), (shift, 0), (0, 0), (0, 0)))[:, :T]
        vj = jnp.pad(values[j], ((0, 0), (shift, 0), (0, 0), (0, 0)))[:, :T]
        sj = jnp.einsum("btkgd,btkd->bkgt", qg, kj) * scale
        diag.append(jnp.where((t >= i)[None, None, None], sj, -jnp.inf))
        vals.append(vj)
    m = jnp.max(s0, axis=-1)
    for sj in diag:
        m = jnp.maximum(m, sj)
    m = jnp.where(jnp.isneginf(m), 0.0, m)
    p0 = jnp.exp(s0 - m[..., None])
    den = jnp.sum(p0, axis=-1)
    out = jnp.einsum("bkgts,bskd->btkgd", p0, values[0])
    for sj, vj in zip(diag, vals):
        pj = jnp.exp(sj - m)
        den = den + pj
        out = out + jnp.einsum("bkgt,btkd->btkgd", pj, vj)
    den = jnp.where(den == 0.0, 1.0, den)
    out = out / jnp.transpose(den, (0, 3, 1, 2))[..., None]
    return out.reshape(B, T, H * Dh)


def ttt_forward(head, emb_next, g0, steps: int, window: int | None = None):
    """The head unrolled ``steps`` times over whole sequences. ``emb_next[b, t]`` is the
    embedding of ``x_{t+1}``; ``g0`` the fused target features. Returns per step
    ``(logits[B, T, draft_vocab], hidden[B, T, h])``."""
    B, T, h = g0.shape
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    feats, keys, values, outs = g0, [], [], []
    for i in range(steps):
        q, k, v, resid = head.qkv(emb_next, feats, pos)
        keys.append(k)
        values.append(v)
        logits, hid = head.finish(ttt_attention(q, keys, values, i, window), resid)
        outs.append((logits, hid))
        feats = jnp.concatenate([jnp.zeros((B, 1, h), hid.dtype), hid[:, :-1]], axis=1)
    return outs


@dataclasses.dataclass(frozen=True)
class EagleTask:
    """The ``eagle3`` / ``eagle1`` training task (see the module docstring)."""

    name: str
    head_cfg: EagleHeadConfig
    cfg: EagleTaskConfig
    target_graphdef: object
    head_graphdef: object
    _target_params: object = dataclasses.field(compare=False, hash=False, repr=False)
    _draft_ids: object = dataclasses.field(compare=False, hash=False, repr=False)
    _init_state: object = dataclasses.field(compare=False, hash=False, repr=False)
    _tokenizer: object = dataclasses.field(default=None, compare=False, hash=False, repr=False)
    start_note: str = dataclasses.field(default="", compare=False)

    def init_params(self, rng):
        return {"head": self._init_state}

    def frozen(self):
        return {"target": self._target_params,
                "draft_ids": jnp.asarray(self._draft_ids, jnp.int32)}

    def _target_pass(self, frozen, tokens):
        layers = self.head_cfg.feature_layers if self.head_cfg.variant == "eagle3" else ()
        return target_pass(self.target_graphdef, frozen, tokens, layers)

    def unrolled(self, head, tp, tokens, steps: int, window: int | None = None):
        """The head unrolled ``steps`` times (:func:`ttt_forward`) over ``tokens [B, T]``
        from the target pass ``tp`` of the same tokens: per step ``(logits, hidden)``
        (``window``: see :func:`ttt_attention`)."""
        raw = jnp.concatenate(tp.hidden, -1) if self.head_cfg.variant == "eagle3" \
            else tp.final_hidden
        nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
        emb_next = jnp.take(tp.target.embed[...], nxt, axis=0).astype(jnp.float32)
        return ttt_forward(head, emb_next, head.fuse(raw), steps, window)

    def loss(self, params, frozen, batch, rng):
        head = nnx.merge(self.head_graphdef, params["head"])
        tokens = batch["tokens"]
        mask = batch["loss_mask"].astype(bool)
        B, T = tokens.shape
        tp = self._target_pass(frozen, tokens)
        t_logits, inside, final_h = tp.logits, tp.inside, tp.final_hidden
        # position t predicts x_{t+2}: the target's logits at t + 1
        p_t = jax.nn.softmax(jnp.concatenate(
            [t_logits[:, 1:], jnp.zeros_like(t_logits[:, :1])], axis=1), axis=-1)
        in_t = jnp.concatenate([inside[:, 1:], jnp.zeros((B, 1), bool)], axis=1)
        want_t = jnp.concatenate([mask[:, 2:], jnp.zeros((B, 2), bool)], axis=1) & in_t
        t_idx = jnp.arange(T)[None]
        # loss weight per position: answer targets 1, prompt targets prompt_weight (metrics:
        # answer positions only)
        real = t_idx + 2 < batch["lengths"][:, None]
        prompt_t = jnp.concatenate([~mask[:, 2:], jnp.zeros((B, 2), bool)], axis=1) & real
        w_t = jnp.where(want_t, 1.0, jnp.where(prompt_t & in_t, self.cfg.prompt_weight, 0.0))
        outs = self.unrolled(head, tp, tokens, self.cfg.ttt_steps)
        total = jnp.float32(0.0)
        metrics = {}
        argmax_t = jnp.argmax(p_t, axis=-1)
        for i, (logits, hid) in enumerate(outs):
            valid = want_t & (t_idx >= i)
            n = jnp.maximum(jnp.sum(valid), 1)
            w = jnp.where(t_idx >= i, w_t, 0.0)
            wn = jnp.maximum(jnp.sum(w), 1e-9)
            ce = -jnp.sum(p_t * jax.nn.log_softmax(logits, axis=-1), axis=-1)
            step_loss = jnp.sum(w * ce) / wn
            if self.cfg.feature_weight > 0:  # EAGLE-1: regress the next position's feature
                f_next = jnp.concatenate([final_h[:, 1:], jnp.zeros_like(final_h[:, :1])], 1)
                # mean over the feature's width, as the EAGLE authors' loss (a sum weighs
                # the regression h times more against the token term than its paper)
                l1 = jnp.mean(optax_smooth_l1(hid - f_next), axis=-1)
                step_loss = self.cfg.token_weight * step_loss + self.cfg.feature_weight * (
                    jnp.sum(w * l1) / wn)
            total = total + self.cfg.step_weight ** i * step_loss
            hit = jnp.argmax(logits, axis=-1) == argmax_t
            metrics[f"acc_{i}"] = jnp.sum(valid & hit) / n
            metrics[f"loss_{i}"] = step_loss
        metrics["loss"] = total
        return total, metrics

    def warm_start(self, path) -> "EagleTask":
        """This task starting from the trained head in ``path``: its parameters (as float32)
        and its draft vocabulary replace the fresh ones. With ``revocab`` the task keeps its
        own draft vocabulary (chosen from its corpus) and the head's LM head is carried over
        onto it (:func:`carry_lm_head`).

        Raises:
          ConfigError: a head of another variant or shape than this task trains.
          DrafterError: a head trained for another target, or a damaged head directory.
        """
        target = nnx.merge(self.target_graphdef, self._target_params)
        cfg, graphdef, state, ids, _ = load_eagle_head(path, target, self._tokenizer)
        mine = dataclasses.replace(self.head_cfg, draft_vocab=cfg.draft_vocab)
        if cfg != mine:
            diff = [f.name for f in dataclasses.fields(cfg)
                    if getattr(cfg, f.name) != getattr(mine, f.name)]
            raise ConfigError(f"{path}: a head with other {', '.join(diff)} than the "
                              f"{self.name} task trains; it cannot start this run")
        state = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), state)
        if self.cfg.revocab:
            new_ids = np.asarray(self._draft_ids, np.int32)
            state = carry_lm_head(nnx.merge(graphdef, state), np.asarray(ids), new_ids,
                                  self.head_graphdef, self._init_state)
            kept = int(np.isin(new_ids, ids).sum())
            return dataclasses.replace(self, _init_state=state, start_note=(
                f"draft vocabulary re-chosen from the corpus (revocab): {len(new_ids)} tokens, "
                f"{kept} of the head's {len(ids)} kept, {len(new_ids) - kept} new"))
        return dataclasses.replace(self, head_cfg=cfg, head_graphdef=graphdef,
                                   _init_state=state, _draft_ids=np.asarray(ids, np.int32),
                                   start_note=f"its draft vocabulary of {len(ids)} tokens "
                                              f"(revocab=true re-chooses it)")

    def save_head(self, params, path, meta):
        return save_eagle_head(path, self.head_cfg, params["head"], self._draft_ids,
                               tokenizer=self._tokenizer, meta=meta)


def carry_lm_head(old_head, old_ids, new_ids, new_graphdef, new_state):
    """The trained head ``old_head`` (draft vocabulary ``old_ids``) moved onto the draft
    vocabulary ``new_ids``. ``new_graphdef`` / ``new_state``: a fresh head of that vocabulary
    (:func:`specjax.heads.eagle.init_head`, whose LM-head rows are the target's output rows).
    Every parameter but the LM head is taken from ``old_head``; the LM-head row of a token in
    both vocabularies is its trained row, a new token keeps the fresh row. Returns the new
    state."""
    head = nnx.merge(new_graphdef, new_state)
    for name, value in vars(old_head).items():
        if isinstance(value, nnx.Param) and name != "lm_head":
            getattr(head, name)[...] = value[...]
    rows = np.array(head.lm_head[...], np.float32)
    slot = np.full(max(int(np.max(old_ids)), int(np.max(new_ids))) + 1, -1, np.int64)
    slot[old_ids] = np.arange(len(old_ids))
    old = slot[new_ids]
    rows[old >= 0] = np.asarray(old_head.lm_head[...], np.float32)[old[old >= 0]]
    head.lm_head[...] = jnp.asarray(rows)
    return nnx.split(head)[1]


def optax_smooth_l1(x, beta: float = 1.0):
    """Smooth-L1 (Huber with ``beta``) elementwise, as EAGLE-1's feature loss."""
    a = jnp.abs(x)
    return jnp.where(a < beta, 0.5 * x * x / beta, a - 0.5 * beta)


def _build(variant: str):
    def build(cfg: EagleTaskConfig, lm) -> EagleTask:
        target = getattr(lm, "model", lm)
        V = target.cfg.vocab_size
        ids = draft_vocabulary(cfg.corpus, V, cfg.draft_vocab)
        head_cfg = EagleHeadConfig.for_target(target.cfg, variant, draft_vocab=len(ids))
        graphdef, state, draft_ids = init_head(head_cfg, target, ids, seed=cfg.seed_head)
        tgraph, tparams = nnx.split(target)
        if variant == "eagle1" and cfg.feature_weight == 0.0:
            cfg = dataclasses.replace(cfg, feature_weight=1.0, token_weight=0.1)
        return EagleTask(name=variant, head_cfg=head_cfg, cfg=cfg, target_graphdef=tgraph,
                         head_graphdef=graphdef, _target_params=tparams, _draft_ids=draft_ids,
                         _init_state=state, _tokenizer=getattr(lm, "tokenizer", None))

    return build


TASKS.register("eagle3", config=EagleTaskConfig,
               doc="EAGLE-3 head: fused low/mid/high target features, reduced draft "
                   "vocabulary, training-time test")(_build("eagle3"))
TASKS.register("eagle1", config=EagleTaskConfig,
               doc="EAGLE-1 head: last-layer feature + token embedding, feature regression + "
                   "token loss")(_build("eagle1"))
