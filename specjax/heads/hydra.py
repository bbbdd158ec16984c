"""Hydra and Hydra++ heads (card C20): sequentially dependent draft heads.

Head ``i`` (0-based) drafts the token ``i + 2`` positions past the newest committed position
``t`` (``x_{t+1}``, the target's own next token, is the pending token). It reads the context
vector ``c_t`` and the embeddings of every token between: ``x_{t+1}`` and the drafts
``d_1 .. d_i`` before it. The inputs live in a fixed buffer ``[K + 1, h]``: slot 0 is
``c_t``, slot ``j + 1`` the ``j``-th token's embedding, zeros past the head's depth, so one
input projection per head over the whole buffer (``[h, (K + 1) h]``) is exactly a projection
of the head's own inputs, and a head chosen by a traced depth is one gather.

Per head: ``x = W_in [c; e_1; ..; e_{i+1}]`` (``W_in`` starts as the identity on ``c`` and
zero on the embeddings), ``mlp_layers`` residual blocks ``x <- x + SiLU(W_l x + b_l)``
(zero-initialised, so a fresh head is an identity), then an LM head over the draft
vocabulary (rows from the target's, shared between heads with ``shared_out``).

Hydra++ (``prefix_attention``): ``c_t`` is the output of one extra decoder layer (attention
and MLP, the target's shapes, its own KV cache) over the target's normed last hidden states
of the committed prefix, instead of the hidden state itself. Its output projections start at
zero, so a fresh layer is an identity too.

Files (:func:`save_hydra_heads` / :func:`load_hydra_heads`): ``config.json`` (format
``"specjax-hydra-1"``) and ``model.safetensors`` with the parameters and ``draft_ids``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.cache import KVCache, write_block
from specjax.errors import CheckpointError, DrafterError
from specjax.heads._attn import cached_attention
from specjax.heads.files import check_target, describe, fill_state, read_head_conf, \
    read_tensors, save_head_dir
from specjax.models.llama import apply_rope, linear, rms_norm, rope_inv_freq

FORMAT = "specjax-hydra-1"


@dataclasses.dataclass(frozen=True)
class HydraHeadConfig:
    """Shape of a set of Hydra heads (static; stored in the file).

    Attributes:
      num_heads: heads ``K`` (the deepest draft).
      hidden_size, vocab_size, target_layers: the target's.
      draft_vocab: LM-head rows (``draft_ids`` maps them to target ids).
      mlp_layers: residual blocks per head (Hydra++: 4; Hydra: 1).
      prefix_attention: Hydra++'s extra decoder layer making the context vector.
      num_attn_heads, num_kv_heads, head_dim, intermediate_size, rms_norm_eps, rope_theta:
        the prefix layer's shapes (the target's).
      shared_out: one LM-head matrix for all heads.
    """

    num_heads: int
    hidden_size: int
    vocab_size: int
    draft_vocab: int
    target_layers: int
    mlp_layers: int = 4
    prefix_attention: bool = True
    num_attn_heads: int = 1
    num_kv_heads: int = 1
    head_dim: int = 1
    intermediate_size: int = 1
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    shared_out: bool = True

    def __post_init__(self):
        for name in ("num_heads", "mlp_layers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "num_heads"
                                                                      else 0):
                raise DrafterError(f"Hydra {name} must be an integer >= "
                                   f"{1 if name == 'num_heads' else 0}, got {v!r}")
        if not 1 <= self.draft_vocab <= self.vocab_size:
            raise DrafterError(f"draft_vocab must be in [1, {self.vocab_size}], got "
                               f"{self.draft_vocab}")

    @classmethod
    def for_target(cls, tcfg, num_heads: int, draft_vocab: int, **kw) -> "HydraHeadConfig":
        return cls(num_heads=num_heads, hidden_size=tcfg.hidden_size,
                   vocab_size=tcfg.vocab_size, draft_vocab=draft_vocab,
                   target_layers=tcfg.num_layers, num_attn_heads=tcfg.num_heads,
                   num_kv_heads=tcfg.num_kv_heads, head_dim=tcfg.head_dim,
                   intermediate_size=tcfg.intermediate_size, rms_norm_eps=tcfg.rms_norm_eps,
                   rope_theta=tcfg.rope_theta, **kw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class PrefixLayer(nnx.Module):
    """One pre-norm Llama decoder block over target hidden states, with its own cache."""

    def __init__(self, cfg: HydraHeadConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        h, nh, kvh, hd = cfg.hidden_size, cfg.num_attn_heads, cfg.num_kv_heads, cfg.head_dim
        f = cfg.intermediate_size
        init = nnx.initializers.normal(0.02)
        self.attn_norm = nnx.Param(jnp.ones((h,), jnp.float32))
        self.wqkv = nnx.Param(init(rngs.params(), ((nh + 2 * kvh) * hd, h), jnp.float32))
        self.wo = nnx.Param(jnp.zeros((h, nh * hd), jnp.float32))
        self.mlp_norm = nnx.Param(jnp.ones((h,), jnp.float32))
        self.w_gate_up = nnx.Param(init(rngs.params(), (2 * f, h), jnp.float32))
        self.w_down = nnx.Param(jnp.zeros((h, f), jnp.float32))

    def init_cache(self, batch: int, max_len: int) -> KVCache:
        c = self.cfg
        return KVCache.init(1, batch, max_len, c.num_kv_heads, c.head_dim, jnp.float32)

    def __call__(self, x, positions, cache: KVCache, *, prefix_empty: bool = False):
        """``x[B, T, h]`` at ``positions``, written at ``cache.lengths + [0, T)`` (causal in
        the block, the committed prefix visible). Returns ``(out[B, T, h], cache)``."""
        c = self.cfg
        B, T, _ = x.shape
        nh, kvh, hd = c.num_attn_heads, c.num_kv_heads, c.head_dim
        dt = jnp.float32
        x = x.astype(dt)
        qkv = linear(rms_norm(x, self.attn_norm[...], c.rms_norm_eps), self.wqkv[...], dt)
        q, k, v = jnp.split(qkv, [nh * hd, (nh + kvh) * hd], axis=-1)
        inv_freq = rope_inv_freq(hd, c.rope_theta, None)
        q = apply_rope(q.reshape(B, T, nh, hd), positions, inv_freq)
        k = apply_rope(k.reshape(B, T, kvh, hd), positions, inv_freq)
        att, cache = cached_attention(q, k, v.reshape(B, T, kvh, hd), cache,
                                      prefix_empty=prefix_empty)
        x = x + linear(att, self.wo[...], dt)
        gate, up = jnp.split(linear(rms_norm(x, self.mlp_norm[...], c.rms_norm_eps),
                                    self.w_gate_up[...], dt), 2, axis=-1)
        return x + linear(jax.nn.silu(gate) * up, self.w_down[...], dt), cache

    def prompt(self, x, lengths, cache: KVCache):
        """A drafter's pass over the prompt: ``x[B, P, h]`` at positions ``0..P-1`` into a
        fresh ``cache``, rows ``lengths`` long. Writes every position's keys and values and
        computes the output at each row's last position only, the one output a drafter reads
        (its context vector). Returns ``(out[B, h], cache)`` with ``lengths`` set.

        The whole layer over the prompt (``__call__`` with ``prefix_empty=True``) also ran
        the queries, the attention, the output projection and the MLP of every other
        position: for SmolLM2's shapes the keys and values are 6% of the layer's products.
        The last position's output agrees with the whole layer's to float rounding (its
        attention reads the written keys as a cached prefix)."""
        c = self.cfg
        B, P, _ = x.shape
        nh, kvh, hd = c.num_attn_heads, c.num_kv_heads, c.head_dim
        dt = jnp.float32
        x = x.astype(dt)
        kv = linear(rms_norm(x, self.attn_norm[...], c.rms_norm_eps),
                    self.wqkv[...][nh * hd:], dt)
        k, v = jnp.split(kv, [kvh * hd], axis=-1)
        pos = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
        k = apply_rope(k.reshape(B, P, kvh, hd), pos, rope_inv_freq(hd, c.rope_theta, None))
        start = jnp.zeros((B,), jnp.int32)
        cache = KVCache(k=(write_block(cache.k[0], k, start),),
                        v=(write_block(cache.v[0], v.reshape(B, P, kvh, hd), start),),
                        lengths=start)
        last = jnp.maximum(lengths.astype(jnp.int32) - 1, 0)
        x_last = jnp.take_along_axis(x, last[:, None, None], axis=1)  # [B, 1, h]
        out, cache = self(x_last, last[:, None], cache.with_lengths(last))
        return out[:, 0], cache.with_lengths(lengths)


class HydraHeads(nnx.Module):
    def __init__(self, cfg: HydraHeadConfig, out_rows: jax.Array, *, rngs: nnx.Rngs):
        self.cfg = cfg
        K, h, L = cfg.num_heads, cfg.hidden_size, cfg.mlp_layers
        w_in = np.zeros((K, h, (K + 1) * h), np.float32)
        w_in[:, :, :h] = np.eye(h, dtype=np.float32)  # start: x = c
        self.w_in = nnx.Param(jnp.asarray(w_in))
        self.blocks = nnx.Param(jnp.zeros((K, L, h, h), jnp.float32))
        self.block_bias = nnx.Param(jnp.zeros((K, L, h), jnp.float32))
        n_out = 1 if cfg.shared_out else K
        self.out = nnx.Param(jnp.broadcast_to(jnp.asarray(out_rows, jnp.float32)[None],
                                              (n_out,) + tuple(out_rows.shape)))
        self.prefix = PrefixLayer(cfg, rngs=rngs) if cfg.prefix_attention else None

    def context(self, g, positions, cache: KVCache | None, *, prefix_empty: bool = False):
        """Context vectors ``c[B, T, h]`` of target features ``g[B, T, h]`` (Hydra++: through
        the prefix layer and its cache; Hydra: ``g`` itself). Returns ``(c, cache)``."""
        if self.prefix is None:
            return g.astype(jnp.float32), cache
        return self.prefix(g, positions, cache, prefix_empty=prefix_empty)

    def logits(self, buf: jax.Array, i) -> jax.Array:
        """Head ``i``'s logits ``[..., draft_vocab]`` from input buffers ``[..., K + 1, h]``
        (``i`` a Python int or a traced scalar)."""
        K, h = self.cfg.num_heads, self.cfg.hidden_size
        flat = buf.astype(jnp.float32).reshape(buf.shape[:-2] + ((K + 1) * h,))
        x = flat @ self.w_in[...][i].T
        blocks, bias = self.blocks[...][i], self.block_bias[...][i]
        for j in range(self.cfg.mlp_layers):
            x = x + jax.nn.silu(x @ blocks[j].T + bias[j])
        out = self.out[...][0 if self.cfg.shared_out else i]
        return x @ out.T


def head_buffer(c: jax.Array, emb: jax.Array, K: int, i: int) -> jax.Array:
    """Training input of head ``i``: ``c[B, T, h]`` and ``emb[B, T, h]`` (embedding of
    ``x_t``) -> ``[B, T, K + 1, h]`` holding ``c_t`` and the embeddings of ``x_{t+1} ..
    x_{t+i+1}`` (teacher-forced), zeros past them."""
    B, T, h = c.shape
    slots = [c.astype(jnp.float32)]
    for j in range(1, K + 1):  # slot j: the embedding of x_{t+j}
        if j <= i + 1:
            slots.append(jnp.concatenate([emb[:, j:], jnp.zeros((B, j, h), emb.dtype)],
                                         axis=1).astype(jnp.float32))
        else:
            slots.append(jnp.zeros((B, T, h), jnp.float32))
    return jnp.stack(slots, axis=2)


def input_buffers(c: jax.Array, emb: jax.Array, K: int) -> jax.Array:
    """Every head's training input, ``[B, T, K, K + 1, h]`` (:func:`head_buffer`)."""
    return jnp.stack([head_buffer(c, emb, K, i) for i in range(K)], axis=2)


def init_hydra_heads(cfg: HydraHeadConfig, target, draft_ids, seed: int = 0) -> tuple:
    """Fresh heads for ``target``. Returns ``(graphdef, state)``."""
    rows = target.embed[...] if getattr(target, "lm_head", None) is None else \
        target.lm_head[...]
    heads = HydraHeads(cfg, jnp.asarray(rows)[jnp.asarray(draft_ids)], rngs=nnx.Rngs(seed))
    return nnx.split(heads)


def save_hydra_heads(path: str | Path, cfg: HydraHeadConfig, state, draft_ids, *,
                     tokenizer=None, meta: dict | None = None, dtype: str = "float32") -> Path:
    return save_head_dir(path, FORMAT, "heads", cfg, state, draft_ids, tokenizer=tokenizer,
                         meta=meta, dtype=dtype)


def load_hydra_heads(path: str | Path, target, tokenizer=None):
    """Loads Hydra heads for ``target``: ``(cfg, graphdef, state, draft_ids, description)``.

    Raises:
      CheckpointError: naming the file and the problem.
    """
    conf = read_head_conf(path, FORMAT, "Hydra heads")
    try:
        cfg = HydraHeadConfig(**conf["heads"])
    except (KeyError, TypeError, DrafterError) as e:
        raise CheckpointError(f"{Path(path) / 'config.json'}: bad heads config: {e}") from None
    t = target.cfg
    check_target(path, conf, [("num_layers", cfg.target_layers, t.num_layers),
                              ("hidden_size", cfg.hidden_size, t.hidden_size),
                              ("vocab_size", cfg.vocab_size, t.vocab_size)],
                 tokenizer, "these heads were")
    tensors, ids = read_tensors(path, cfg.draft_vocab, cfg.vocab_size)
    graphdef, state = init_hydra_heads(cfg, target, ids)
    state = fill_state(state, tensors, path, "Hydra heads")
    kind = "hydra++ heads" if cfg.prefix_attention else "hydra heads"
    return cfg, graphdef, state, ids, describe(kind, path, conf)
