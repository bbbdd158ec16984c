"""Target features a drafter reads: declared once (static), computed by the verify forward.

A drafter declares a :class:`FeatureSpec` (hidden states of which layers, the normed last
hidden state, logits). The prefill and every verify forward of the loop compute exactly those
for every token they process, and the loop hands them on:

* ``drafter.init(..., features)``: the features of every prompt position ``[B, P, ...]``;
* ``drafter.update(..., features)``: the features of the tokens committed by the step, in
  path order: entry 0 is the root (the step's pending token), entry ``i`` the ``i``-th
  accepted node (``[B, D + 1, ...]``; entries past ``n_acc`` are padding). Their positions
  are ``committed_length + i``.

So an EAGLE- or Medusa-style drafter drafts its next step from the verify pass of the last
one, with no extra target forward. A drafter that declares nothing costs nothing: the forward
returns no extra arrays.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.errors import DrafterError
from specjax.sampling import greedy_token


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """What a drafter needs from the target, per processed token (static, hashable).

    Attributes:
      layers: block indices whose output residual stream (before the final norm) is
        returned; ``-1`` is the last block.
      final_hidden: the last hidden state after the final norm (the LM head's input).
      logits: the target's float32 logits.
      top_ids: when > 0, the ids of the target's ``top_ids`` most likely next tokens
        (``int32[..., top_ids]``, best first), without handing over the logits.
      top_probs: with ``top_ids``, also their probabilities under the target's plain softmax
        (temperature 1, ``float32[..., top_ids]``).
    """

    layers: tuple[int, ...] = ()
    final_hidden: bool = False
    logits: bool = False
    top_ids: int = 0
    top_probs: bool = False

    def __post_init__(self):
        if not isinstance(self.layers, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in self.layers):
            raise DrafterError(f"FeatureSpec.layers must be a tuple of layer indices, got "
                               f"{self.layers!r}")
        if not isinstance(self.top_ids, int) or isinstance(self.top_ids, bool) or \
                self.top_ids < 0:
            raise DrafterError(f"FeatureSpec.top_ids must be an integer >= 0, got "
                               f"{self.top_ids!r}")
        if self.top_probs and not self.top_ids:
            raise DrafterError("FeatureSpec.top_probs needs top_ids > 0 (the probabilities of "
                               "which ids?)")

    @property
    def empty(self) -> bool:
        return not (self.layers or self.final_hidden or self.logits or self.top_ids)

    @property
    def all_logits(self) -> bool:
        """The forward must compute the logits of every token (not just the last)."""
        return self.logits or self.top_ids > 0

    def check(self, num_layers: int) -> None:
        bad = [i for i in self.layers if not -1 <= i < num_layers]
        if bad:
            raise DrafterError(f"the drafter asks for hidden states of layers {bad}; this "
                               f"{num_layers}-layer target has layers 0..{num_layers - 1} "
                               "(-1 = the last)")


NO_FEATURES = FeatureSpec()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Features:
    """Target features of a block of tokens (``None`` where not declared).

    Attributes:
      hidden: one ``[B, T, D]`` array per declared layer, in declaration order.
      final_hidden: ``[B, T, D]`` or None.
      logits: ``float32[B, T, V]`` or None.
      top_ids: ``int32[B, T, top_ids]`` or None.
      top_probs: ``float32[B, T, top_ids]`` or None.
    """

    hidden: tuple[jax.Array, ...] = ()
    final_hidden: jax.Array | None = None
    logits: jax.Array | None = None
    top_ids: jax.Array | None = None
    top_probs: jax.Array | None = None

    def map(self, fn) -> "Features":
        """Applies ``fn`` to every array (each has the token axis at 1)."""
        return jax.tree.map(fn, self)


def forward_kwargs(spec: FeatureSpec) -> dict:
    """Keyword arguments of :class:`specjax.models.llama.Llama` that compute ``spec``."""
    return {"hidden_layers": spec.layers} if spec.layers else {}


def from_output(spec: FeatureSpec, out) -> Features:
    """The declared features of a forward's output (``hidden_layers`` as in
    :func:`forward_kwargs`; the logits of every token)."""
    top = probs = None
    if spec.top_ids == 1:  # one id: a max and a min, cheaper on XLA:CPU than lax.top_k(x, 1)
        # and its argmax (docs/benchmarks_notes.md, "The greedy token ...")
        top = greedy_token(out.logits)[..., None]
        vals = jnp.take_along_axis(out.logits, top, axis=-1) if spec.top_probs else None
    elif spec.top_ids:
        vals, top = jax.lax.top_k(out.logits, spec.top_ids)
        top = top.astype(jnp.int32)
    if spec.top_ids and spec.top_probs:
        lse = jax.nn.logsumexp(out.logits.astype(jnp.float32), axis=-1, keepdims=True)
        probs = jnp.exp(vals.astype(jnp.float32) - lse)
    return Features(hidden=tuple(out.hidden) if spec.layers else (),
                    final_hidden=out.final_hidden if spec.final_hidden else None,
                    logits=out.logits if spec.logits else None, top_ids=top, top_probs=probs)


def pad_tokens(f: Features, T: int) -> Features:
    """Zero-pads every array's token axis to ``T``."""
    return f.map(lambda a: jnp.pad(a, [(0, 0), (0, T - a.shape[1])] + [(0, 0)] * (a.ndim - 2)))


def take_tokens(f: Features, idx: jax.Array) -> Features:
    """``idx[B, M]`` token indices -> features ``[B, M, ...]`` (indices are clamped)."""
    def g(a):
        i = jnp.clip(idx, 0, a.shape[1] - 1)
        return jnp.take_along_axis(a, i.reshape(i.shape + (1,) * (a.ndim - 2)), axis=1)

    return f.map(g)
