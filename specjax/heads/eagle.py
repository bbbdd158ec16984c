"""EAGLE draft heads (cards C21-C23): one decoder layer that drafts from target features.

Positions follow the EAGLE convention: the head's entry at position ``t`` reads the pair
``(g_t, x_{t+1})``, a feature of position ``t`` and the embedding of the token after it, and
its output predicts ``x_{t+2}``. ``g_t`` is the target's feature for committed positions and
the head's own output hidden state at the previous position while drafting.

Two variants (static ``EagleHeadConfig.variant``):

* ``eagle3``: the target feature is the concatenation of three hidden states (low, middle and
  high layers), fused by ``fc`` (``3h -> h``, no bias). The layer's q/k/v read
  ``concat(norm_e(emb(x)), norm_h(g))`` (width ``2h``); the residual stream starts from ``g``;
  a final norm and a reduced-vocabulary LM head (``draft_vocab`` tokens, each mapped to a
  target id by ``draft_ids``) give the draft logits.
* ``eagle1``: the feature is the target's last hidden state after the final norm; ``fc``
  fuses ``concat(emb(x), g)`` (``2h -> h``), then a pre-norm decoder layer; the output is
  compared with the next feature (regression) and fed to the LM head without a norm.

The head has its own one-layer KV cache (a :class:`specjax.cache.KVCache`), written at the
pair positions, so a tree of drafts is fed level by level as the target's own layers are.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.cache import KVCache
from specjax.errors import DrafterError
from specjax.heads._attn import cached_attention
from specjax.models.llama import apply_rope, linear, rms_norm, rope_inv_freq
from specjax.models.quant import quantize_param

VARIANTS = ("eagle1", "eagle3")


@dataclasses.dataclass(frozen=True)
class EagleHeadConfig:
    """Shape of an EAGLE head (static; stored in its checkpoint).

    Attributes:
      variant: ``"eagle1"`` or ``"eagle3"``.
      hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size: the decoder layer
        (the target's by default).
      vocab_size: the target's vocabulary.
      draft_vocab: rows of the head's LM head (``<= vocab_size``).
      feature_layers: ``eagle3``: the three target blocks whose output residual streams are
        fused; ``eagle1``: empty (it reads the normed last hidden state).
      target_layers: the target's layer count (a head trained for another target is refused).
      rms_norm_eps, rope_theta: as the target's.
    """

    variant: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab: int
    feature_layers: tuple[int, ...]
    target_layers: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise DrafterError(f"EAGLE variant must be one of {VARIANTS}, got {self.variant!r}")
        if not 1 <= self.draft_vocab <= self.vocab_size:
            raise DrafterError(f"draft_vocab must be in [1, {self.vocab_size}], got "
                               f"{self.draft_vocab}")
        if self.variant == "eagle3" and len(self.feature_layers) != 3:
            raise DrafterError(f"an eagle3 head fuses 3 target layers, got "
                               f"{self.feature_layers}")
        bad = [i for i in self.feature_layers if not 0 <= i < self.target_layers]
        if bad:
            raise DrafterError(f"feature layers {bad} outside the target's "
                               f"{self.target_layers} layers")

    @classmethod
    def for_target(cls, target_cfg, variant: str = "eagle3", draft_vocab: int | None = None,
                   feature_layers: tuple[int, ...] | None = None) -> "EagleHeadConfig":
        """The head for a target (its layer shapes; EAGLE-3's default low/middle/high layers:
        the outputs of blocks 1, L/2 - 1 and L - 4, i.e. the inputs of layers 2, L/2, L-3)."""
        L = target_cfg.num_layers
        if feature_layers is None:
            feature_layers = default_feature_layers(L) if variant == "eagle3" else ()
        return cls(variant=variant, hidden_size=target_cfg.hidden_size,
                   num_heads=target_cfg.num_heads, num_kv_heads=target_cfg.num_kv_heads,
                   head_dim=target_cfg.head_dim,
                   intermediate_size=target_cfg.intermediate_size,
                   vocab_size=target_cfg.vocab_size,
                   draft_vocab=draft_vocab or target_cfg.vocab_size,
                   feature_layers=tuple(feature_layers), target_layers=L,
                   rms_norm_eps=target_cfg.rms_norm_eps, rope_theta=target_cfg.rope_theta)

    @property
    def feature_width(self) -> int:
        """Width of the raw target feature a position carries."""
        return self.hidden_size * (len(self.feature_layers) if self.variant == "eagle3" else 1)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EagleHeadConfig":
        d = dict(d)
        d["feature_layers"] = tuple(d.get("feature_layers", ()))
        return cls(**d)


def default_feature_layers(num_layers: int) -> tuple[int, ...]:
    """Low, middle and high blocks: 1, L/2 - 1 and L - 4 (1, 14, 26 for 30 layers); on a model
    too small for three distinct ones of those, three evenly spread blocks."""
    L = num_layers
    picks = (1, L // 2 - 1, L - 4)
    if len(set(picks)) == 3 and min(picks) >= 0 and max(picks) < L:
        return picks
    return tuple(int(round(x)) for x in np.linspace(0, L - 1, 3))


# the head's matrices (``[out, in]``, products through :func:`linear`)
MATRICES = ("fc", "wqkv", "wo", "w_gate_up", "w_down", "lm_head")


def quantize_head(graphdef, state) -> tuple:
    """The head with every matrix as int8 rows and a float32 scale per row (w8a8 products,
    as :mod:`specjax.models.quant` does for the target): ``(graphdef, state)``. For drafting
    only; the verifier keeps the output exact whatever the drafts are."""
    head = nnx.merge(graphdef, state)
    for name in MATRICES:
        vals, scale = quantize_param(getattr(head, name))
        setattr(head, name, vals)
        setattr(head, name + "_scale", scale)
    return nnx.split(head)


class EagleHead(nnx.Module):
    """The trainable head. Call :meth:`fuse` on raw target features, then :meth:`__call__`."""

    def __init__(self, cfg: EagleHeadConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.cfg = cfg
        h, nh, kvh, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        f = cfg.intermediate_size
        init = nnx.initializers.normal(0.02)
        if cfg.variant == "eagle3":
            self.fc = nnx.Param(init(rngs.params(), (h, cfg.feature_width), param_dtype))
            self.emb_norm = nnx.Param(jnp.ones((h,), param_dtype))
            self.hid_norm = nnx.Param(jnp.ones((h,), param_dtype))
            qkv_in = 2 * h
        else:
            self.fc = nnx.Param(init(rngs.params(), (h, 2 * h), param_dtype))
            self.emb_norm = None
            self.hid_norm = None
            qkv_in = h
        self.attn_norm = nnx.Param(jnp.ones((h,), param_dtype))
        self.wqkv = nnx.Param(init(rngs.params(), ((nh + 2 * kvh) * hd, qkv_in), param_dtype))
        self.wo = nnx.Param(init(rngs.params(), (h, nh * hd), param_dtype))
        self.mlp_norm = nnx.Param(jnp.ones((h,), param_dtype))
        self.w_gate_up = nnx.Param(init(rngs.params(), (2 * f, h), param_dtype))
        self.w_down = nnx.Param(init(rngs.params(), (h, f), param_dtype))
        self.final_norm = nnx.Param(jnp.ones((h,), param_dtype))
        self.lm_head = nnx.Param(init(rngs.params(), (cfg.draft_vocab, h), param_dtype))
        # per-row scales of int8 matrices (quantize_head); None: float matrices
        for name in MATRICES:
            setattr(self, name + "_scale", nnx.data(None))

    def _w(self, name: str):
        """``(matrix, its int8 row scales or None)`` for :func:`linear`."""
        scale = getattr(self, name + "_scale", None)
        return getattr(self, name)[...], None if scale is None else scale[...]

    def init_cache(self, batch: int, max_len: int) -> KVCache:
        c = self.cfg
        return KVCache.init(1, batch, max_len, c.num_kv_heads, c.head_dim, jnp.float32)

    def fuse(self, raw: jax.Array) -> jax.Array:
        """Raw target features ``[..., feature_width]`` -> the head's feature ``[..., h]``
        (EAGLE-3: the ``fc`` fusion of three layers; EAGLE-1: as is)."""
        if self.cfg.variant == "eagle3":
            w, sc = self._w("fc")
            return linear(raw, w, jnp.float32, scale=sc)
        return raw.astype(jnp.float32)

    def qkv(self, tokens_emb: jax.Array, feats: jax.Array, positions: jax.Array):
        """The layer's input side: ``(q[B, T, H, Dh], k[B, T, KVH, Dh], v, residual[B, T, h])``
        with rotary embeddings applied (shared by inference and training-time test)."""
        c = self.cfg
        B, T, _ = feats.shape
        nh, kvh, hd = c.num_heads, c.num_kv_heads, c.head_dim
        dt = jnp.float32
        if c.variant == "eagle3":
            x_in = jnp.concatenate([rms_norm(tokens_emb, self.emb_norm[...], c.rms_norm_eps),
                                    rms_norm(feats, self.hid_norm[...], c.rms_norm_eps)], -1)
            resid = feats
        else:
            w, sc = self._w("fc")
            resid = linear(jnp.concatenate([tokens_emb, feats], -1), w, dt, scale=sc)
            x_in = rms_norm(resid, self.attn_norm[...], c.rms_norm_eps)
        inv_freq = rope_inv_freq(hd, c.rope_theta, None)
        w, sc = self._w("wqkv")
        qkv = linear(x_in, w, dt, scale=sc)
        q, k, v = jnp.split(qkv, [nh * hd, (nh + kvh) * hd], axis=-1)
        q = apply_rope(q.reshape(B, T, nh, hd), positions, inv_freq)
        k = apply_rope(k.reshape(B, T, kvh, hd), positions, inv_freq)
        return q, k, v.reshape(B, T, kvh, hd), resid

    def finish(self, att: jax.Array, resid: jax.Array, compute_logits: bool = True):
        """The layer's output side from the attention output ``[B, T, H * Dh]``: returns
        ``(logits[B, T, draft_vocab] | None, hidden[B, T, h])``."""
        c = self.cfg
        dt = jnp.float32
        w, sc = self._w("wo")
        x = resid + linear(att, w, dt, scale=sc)
        w, sc = self._w("w_gate_up")
        gate, up = jnp.split(linear(rms_norm(x, self.mlp_norm[...], c.rms_norm_eps), w, dt,
                                    scale=sc), 2, axis=-1)
        w, sc = self._w("w_down")
        x = x + linear(jax.nn.silu(gate) * up, w, dt, scale=sc)
        if not compute_logits:
            return None, x
        return self.logits(x), x

    def logits(self, x: jax.Array) -> jax.Array:
        """Draft-vocabulary logits ``[..., draft_vocab]`` of output features ``x [..., h]``
        (the final norm of EAGLE-3, then the LM head)."""
        c = self.cfg
        hn = rms_norm(x, self.final_norm[...], c.rms_norm_eps) if c.variant == "eagle3" else x
        w, sc = self._w("lm_head")
        return linear(hn, w, jnp.float32, scale=sc)

    def __call__(self, tokens_emb: jax.Array, feats: jax.Array, positions: jax.Array,
                 cache: KVCache, *, attn_mask: jax.Array | None = None, write_offset: int = 0,
                 prefix_empty: bool = False, compute_logits: bool = True):
        """One decoder-layer pass over pairs ``(feats[b, t], tokens_emb[b, t])``.

        Args:
          tokens_emb: ``[B, T, h]`` embeddings of the pair tokens (the target's embedding).
          feats: ``[B, T, h]`` fused features (:meth:`fuse`) or the head's own outputs.
          positions: ``int32[B, T]`` pair positions.
          cache: the head's one-layer cache; the block is written at ``lengths + write_offset
            + [0, T)`` and sees the committed prefix plus ``attn_mask`` over the scratch window
            (default: causal within the block).
        Returns ``(logits[B, T, draft_vocab] | None, hidden[B, T, h], cache)``; ``hidden`` is
        the output fed back as the next position's feature.
        """
        q, k, v, resid = self.qkv(tokens_emb, feats, positions)
        att, cache = cached_attention(q, k, v, cache, attn_mask=attn_mask,
                                      write_offset=write_offset, prefix_empty=prefix_empty)
        logits, x = self.finish(att, resid, compute_logits)
        return logits, x, cache


def to_target_logits(draft_logits: jax.Array, draft_ids: jax.Array, vocab: int) -> jax.Array:
    """``[..., draft_vocab]`` logits -> ``[..., vocab]`` with ``-inf`` on tokens outside the
    draft vocabulary (``draft_ids[i]``: the target id of draft id ``i``)."""
    full = jnp.full(draft_logits.shape[:-1] + (vocab,), -jnp.inf, jnp.float32)
    return full.at[..., draft_ids].set(draft_logits.astype(jnp.float32))


def init_head(cfg: EagleHeadConfig, target, draft_ids=None, seed: int = 0) -> tuple:
    """A freshly initialised head for ``target`` (a Llama) and its draft-vocabulary map.
    The LM head's rows start from the target's output rows of the draft tokens and the final
    norm from the target's.

    Returns ``(graphdef, state, draft_ids int32[draft_vocab])``."""
    head = EagleHead(cfg, rngs=nnx.Rngs(seed))
    if draft_ids is None:
        draft_ids = np.arange(cfg.draft_vocab, dtype=np.int32)
    draft_ids = np.asarray(draft_ids, np.int32)
    if draft_ids.shape != (cfg.draft_vocab,) or draft_ids.min() < 0 or \
            draft_ids.max() >= cfg.vocab_size or len(set(draft_ids.tolist())) != len(draft_ids):
        raise DrafterError(f"the draft vocabulary map must hold {cfg.draft_vocab} distinct "
                           f"target ids in [0, {cfg.vocab_size})")
    out_rows = target.lm_head[...] if getattr(target, "lm_head", None) is not None else \
        target.embed[...]
    head.lm_head[...] = jnp.asarray(out_rows, jnp.float32)[jnp.asarray(draft_ids)]
    # the final norm's scales as the target's: the copied LM-head rows expect its outputs
    head.final_norm[...] = jnp.asarray(target.final_norm[...], jnp.float32)
    graphdef, state = nnx.split(head)
    return graphdef, state, draft_ids
