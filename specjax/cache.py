"""The KV cache: an explicit pytree passed into and returned from every forward.

Layout: one key and one value array per layer, each ``[B, KVH, S, Dh]`` where ``S`` is the
static maximum length: heads before positions, so that the attention's score product reads a
head's keys as they lie (with positions before heads XLA:CPU copied every layer's keys in
every forward; the exact value product still reads a transposed copy of the values, see
``specjax.models.numerics.value_product``). A block of new entries (what a forward computes,
writes and returns) stays ``[B, T, KVH, Dh]``. ``lengths[b]`` is the number of committed
entries of row ``b``; entries at ``lengths[b]`` and beyond are scratch: a forward writes
its new tokens there, and the caller decides how many of them to commit (plain decoding
commits all, speculative decoding commits the accepted prefix/path). Rejected entries are
never deleted: they sit past the row's length and are overwritten by the next write. Every
entry is finite (writes store a non-finite value as 0, :func:`write_block`): the attention
weights scratch slots by exact zeros and reads them unmasked.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

SEQ_AXIS = 2  # the positions axis of a cache buffer [B, KVH, S, Dh]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Per-layer KV cache with per-row committed lengths.

    Attributes:
      k: tuple of ``num_layers`` arrays ``[B, KVH, S, Dh]`` (keys, rotary already applied).
      v: tuple of ``num_layers`` arrays ``[B, KVH, S, Dh]`` (values).
      lengths: ``int32[B]``: committed entries per row; ``0 <= lengths[b] <= S``.
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    lengths: jax.Array

    @classmethod
    def init(cls, num_layers: int, batch: int, max_len: int, num_kv_heads: int, head_dim: int,
             dtype=jnp.float32) -> "KVCache":
        shape = (batch, num_kv_heads, max_len, head_dim)
        return cls(
            k=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
            v=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
            lengths=jnp.zeros((batch,), jnp.int32),
        )

    @property
    def max_len(self) -> int:
        return self.k[0].shape[SEQ_AXIS]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def num_layers(self) -> int:
        return len(self.k)

    def advance(self, n: jax.Array) -> "KVCache":
        """Commits ``n[b]`` more entries per row (the ones just written past the length)."""
        new = jnp.minimum(self.lengths + jnp.asarray(n, jnp.int32), self.max_len)
        return dataclasses.replace(self, lengths=new)

    def with_lengths(self, lengths: jax.Array) -> "KVCache":
        return dataclasses.replace(self, lengths=jnp.asarray(lengths, jnp.int32))

    def constrain(self, sharding) -> "KVCache":
        """Every layer's K and V laid out by ``sharding`` (inside jit)."""
        wsc = jax.lax.with_sharding_constraint
        return KVCache(k=tuple(wsc(a, sharding) for a in self.k),
                       v=tuple(wsc(a, sharding) for a in self.v), lengths=self.lengths)

    def write(self, k: tuple, v: tuple, offsets: jax.Array) -> "KVCache":
        """Writes per-layer blocks ``k[i], v[i]: [B, T, KVH, Dh]`` at ``offsets[b] + [0, T)``
        (``None`` leaves a layer as it is); writes past the end are dropped. Lengths stay."""
        ks = tuple(a if n is None else write_block(a, n, offsets) for a, n in zip(self.k, k))
        vs = tuple(a if n is None else write_block(a, n, offsets) for a, n in zip(self.v, v))
        return KVCache(k=ks, v=vs, lengths=self.lengths)

    def commit_path(self, path: jax.Array, n: jax.Array) -> "KVCache":
        """Gathers entries of a verified block into contiguous committed slots.

        Args:
          path: ``int32[B, P]``: block-relative indices (0 = first entry written after the
            row's length) of the entries to keep, in order.
          n: ``int32[B]``: how many of ``path`` to commit per row.
        Returns the cache with ``path[b, :n[b]]`` moved to ``lengths[b] + [0, n[b])`` and
        lengths advanced by ``n``. Entries beyond are left as scratch.
        """
        B, P = path.shape
        src = self.lengths[:, None] + path  # [B, P]
        dst = self.lengths[:, None] + jnp.arange(P, dtype=jnp.int32)[None, :]
        keep = jnp.arange(P)[None, :] < n[:, None]
        dst = jnp.where(keep, dst, self.max_len)  # out-of-range: dropped
        rows = jnp.arange(B)[:, None]

        def move(a):
            vals = slots_of(a, jnp.clip(src, 0, self.max_len - 1))  # [B, P, KVH, Dh]
            return a.at[rows, :, dst].set(vals, mode="drop")

        return KVCache(
            k=tuple(move(a) for a in self.k),
            v=tuple(move(a) for a in self.v),
            lengths=jnp.minimum(self.lengths + n, self.max_len),
        )


def write_block(buf: jax.Array, new: jax.Array, offsets: jax.Array) -> jax.Array:
    """Writes ``new[b]`` (``[T, KVH, Dh]``) into ``buf[b, :, offsets[b]:offsets[b]+T]``
    (``buf``: ``[B, KVH, S, Dh]``).

    Writes that would land past the buffer's end are dropped, never wrapped or clamped onto
    committed entries. A non-finite entry is written as 0: a cache holds only finite values
    (zeros where nothing was written), so the attention's products may read scratch slots
    under exact zero weights (``0 * x == 0``) instead of masking a copy of every layer's
    values in every forward (``split_attention``). A value the model itself overflowed to is
    read raw by the forward that computed it (its own block) and as 0 by later ones; either
    way such a row's output is already meaningless.
    """
    new = new.astype(buf.dtype)  # first: a narrower cache may overflow to inf in the cast
    new = jnp.where(jnp.isfinite(new), new, jnp.zeros((), new.dtype))
    B, T = new.shape[:2]
    if T == 1:
        # a one-token write is scattered as two, the second out of range (dropped): XLA
        # rewrites a one-element scatter into a dynamic-update-slice, fuses that into the
        # attention's reads of the cache, and then copies every layer's whole buffer to do it
        # in place (116 cache copies in a one-token forward, batch 1, exact numerics: 138.2
        # against 76.9 ms at 4096 positions, 35.0 against 33.5 at 144; 2026-12-02,
        # scripts/ab_one_token_write.py); a real scatter stays in place as for longer blocks
        new = jnp.concatenate([new, new], axis=1)
        idx = jnp.stack([offsets, jnp.full_like(offsets, buf.shape[SEQ_AXIS])], axis=1)
    else:
        idx = offsets[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    # rows and slots are advanced indices around a slice: the updates are [B, T, KVH, Dh]
    return buf.at[jnp.arange(B)[:, None], :, idx].set(new, mode="drop")


def slots_of(buf: jax.Array, idx: jax.Array) -> jax.Array:
    """``buf [B, KVH, S, Dh]`` at per-row slots ``idx [B, N]``: ``[B, N, KVH, Dh]``."""
    return buf[jnp.arange(buf.shape[0])[:, None], :, idx]


def block_layout(buf: jax.Array) -> jax.Array:
    """A cache buffer ``[B, KVH, S, Dh]`` with positions before heads, ``[B, S, KVH, Dh]`` (a
    transposing copy, for code that takes that layout: the Pallas tree-attention kernels)."""
    return jnp.swapaxes(buf, 1, 2)
