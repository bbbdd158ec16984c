"""A separate (small) draft model with the target's tokenizer and its own KV cache.

Cache sync: after each step the draft cache must hold the committed tokens. Instead of
tracking which drafted entries survived, every proposal starts by feeding the two newest
tokens ``[x_{n-1}, x_n]`` at positions ``n-1, n`` with the draft cache's length set to
``n - 1``: entries before ``n - 1`` are always committed tokens (the previous proposal wrote
the accepted path there), entry ``n - 1`` is rewritten with identical values if it was already
right, and the correction/bonus token ``x_n`` is added. So the draft cache is exact after any
acceptance length, including a full acceptance (whose last draft token was never fed).

Idle steps (a policy that backs off, ``DecodeLoop.idle_skip``): the draft model's ``skip``
feeds nothing. The draft cache's ``lengths`` say how far it holds committed tokens (``update``
sets them to the new pending position minus one), and the next proposal first catches up on
the tokens committed while it was idle, :data:`CATCH_UP` at a time, before the two-token
feed. So a run that stops drafting costs plain steps, not a draft-model forward per token.

The default stand-in (the target's first blocks, :func:`truncated_copy`) computes, for every
committed token, exactly the keys and values the target's own first blocks put in the target
cache. So it runs no prefill of its own: its cache starts empty, and a proposal that finds it
more than :data:`CATCH_UP` tokens behind takes those layers of the target cache instead of
feeding the tokens through (the first proposal, and the first after a long idle stretch). On
the long Spec-Bench prompts its own prefill had cost 12-15% of the target's
(docs/benchmarks_notes.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.drafters._chain import chain_draft
from specjax.drafters._tree import draft_tree_or_nothing, tree_draft
from specjax.drafters.base import DRAFTERS, StepContext, check_k, tree_field, tree_option
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.tree import DraftTree, TreeSpec

CATCH_UP = 16  # committed tokens a proposal feeds per catch-up forward after idle steps


@dataclasses.dataclass(frozen=True)
class DraftModelDrafter:
    graphdef: object
    max_k: int
    vocab: int
    tree: TreeSpec | None = None
    description: str = ""
    # > 0: the draft model is the target's first ``target_layers`` blocks (truncated_copy):
    # its cache entries of committed tokens are the target cache's, taken instead of computed
    target_layers: int = 0
    name: str = "draft_model"
    deterministic: bool = False
    features: FeatureSpec = FeatureSpec()
    _params: object = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    def params(self):
        return self._params

    def _model(self, params):
        return nnx.merge(self.graphdef, params)

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        m = self._model(params)
        B, P = prompt_tokens.shape
        cache = m.init_cache(B, cache_len)
        if self.target_layers:  # the first proposal takes the prompt's entries from the target
            return cache
        pos = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
        out = m(prompt_tokens, pos, cache, compute_logits=False,
                prefix_empty=True)
        return out.cache.with_lengths(prompt_lens)

    def propose(self, params, target, state, ctx: StepContext, k, greedy, stop=None):
        m = self._model(params)

        def step(tokens, positions, cache):
            o = m(tokens, positions, cache, logits_index=jnp.full(
                (tokens.shape[0], 1), tokens.shape[1] - 1, jnp.int32))
            return o.logits[:, 0], o.cache

        n = ctx.seq_len - 1
        state = catch_up(m, state, ctx.seq, n - 1,
                         ctx.target_cache if self.target_layers else None)
        idx = jnp.stack([n - 1, n], axis=1)
        first = jnp.take_along_axis(ctx.seq, idx, axis=1)
        k = jnp.where(ctx.live, k, 0)
        kmax = jnp.max(k)
        if self.tree is None:
            # the first step always runs (it keeps the draft cache in sync even when k == 0)
            tokens, q, cache, k = chain_draft(step, state, first, idx, self.max_k, k, ctx,
                                              greedy, self.vocab, stop=stop)
            return DraftTree.chain(tokens, k, q), cache, ctx.target_cache

        def run(tokens, positions, cache, offset, mask):
            o = m(tokens, positions, cache, attn_mask=mask, write_offset=offset)
            return o.logits, o.cache

        # sync step (always): [x_{n-1}, x_n] at slots n-1, n; then the root x_n is scratch
        # slot 0 (cache length n) and the tree's levels go to the slots after it
        root_logits, cache = step(first, idx, state.with_lengths(n - 1))
        tree, cache = draft_tree_or_nothing(
            lambda c: tree_draft(run, root_logits, c, self.tree, ctx, greedy, kmax, k,
                                 self.vocab, stop),
            cache.with_lengths(n), self.tree, kmax, greedy, self.vocab)
        return tree, cache, ctx.target_cache

    def update(self, params, state, ctx, n_acc, tree, path, features):
        # the committed tokens the draft cache now holds: all before the new pending token's
        # predecessor (the next proposal's two-token feed starts there)
        synced = ctx.seq_len - 2
        if self.tree is None or path.shape[1] < 2:
            return state.with_lengths(synced)
        # the next proposal rewrites slot n + n_acc (the last accepted node) and expects the
        # accepted nodes before it at n + 1 ...: gather them from their drafting slots
        D = path.shape[1]
        before = path[:, :D - 1]
        slots = jnp.take_along_axis(tree.slot, jnp.maximum(before, 0), axis=1)
        cache = state.with_lengths(state.lengths + 1)  # past the root (slot n)
        cache = cache.commit_path(jnp.maximum(slots - 1, 0), jnp.maximum(n_acc - 1, 0))
        return cache.with_lengths(synced)

    def skip(self, params, target, state, ctx, features):
        """A step that drafted nothing (``DecodeLoop.idle_skip``): feed nothing; the next
        proposal catches up (:func:`catch_up`) from the cache's ``lengths``."""
        return state


def catch_up(m, cache, seq, need, target_cache=None):
    """The draft cache holding every committed token before position ``need[b]``: while some
    row's ``cache.lengths`` (entries before it hold committed tokens) is short of it, feed the
    next :data:`CATCH_UP` tokens of ``seq`` at their positions (a row already there, or nearly,
    rewrites committed entries it holds with the same values). No forward when no row is
    behind, which is every step after a drafting step.

    ``target_cache`` (a draft model made of the target's first blocks): when some row is more
    than :data:`CATCH_UP` tokens behind, the draft cache becomes those layers of the target
    cache (which holds every committed token before the pending one) instead."""
    C = min(CATCH_UP, cache.max_len)
    if target_cache is not None:
        L = cache.num_layers

        def take(c):
            return dataclasses.replace(c, k=tuple(target_cache.k[:L]),
                                       v=tuple(target_cache.v[:L]),
                                       lengths=jnp.minimum(target_cache.lengths, need))

        cache = jax.lax.cond(jnp.any(cache.lengths + C < need), take, lambda c: c, cache)
    pos0 = jnp.arange(C, dtype=jnp.int32)[None]

    def body(cache):
        s = cache.lengths
        start = jnp.maximum(jnp.minimum(s, need - C), 0)
        pos = start[:, None] + pos0
        toks = jnp.take_along_axis(seq, jnp.minimum(pos, seq.shape[1] - 1), axis=1)
        out = m(toks, pos, cache.with_lengths(start), compute_logits=False)
        return out.cache.with_lengths(jnp.maximum(s, jnp.minimum(start + C, need)))

    return jax.lax.while_loop(lambda c: jnp.any(c.lengths < need), body, cache)


def truncated_copy(target_model, num_layers: int):
    """A draft model made of the target's first ``num_layers`` blocks and its head (demo)."""
    from specjax.models.weights import model_from_tensors, model_to_tensors

    cfg = target_model.cfg
    tensors = {
        k: v for k, v in model_to_tensors(target_model).items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < num_layers
    }
    small = dataclasses.replace(cfg, num_layers=num_layers)
    from specjax.models.quant import quantization_of, quantize

    out = model_from_tensors(small, tensors, source=f"first {num_layers} layers of the target",
                             dtype=target_model.dtype)
    return quantize(out, quantization_of(target_model))  # as precise as the target


@dataclasses.dataclass(frozen=True)
class DraftModelConfig:
    """Options of ``draft_model``."""

    k: int = dataclasses.field(default=4, metadata={"help": "maximum draft length"})
    draft_model: Any = dataclasses.field(default=None, metadata={
        "help": "a preset, GGUF file or HF directory (or a loaded model); default: the "
                "target's first `layers` blocks"})
    layers: int | None = dataclasses.field(default=None, metadata={
        "help": "blocks of the target-truncation stand-in (default: a sixth)"})
    tree: TreeSpec | None = tree_field(4)

    def __post_init__(self):
        check_k(self.k)


@DRAFTERS.register("draft_model", config=DraftModelConfig,
                   doc="a separate small model with the target's tokenizer and its own cache")
def make_draft_model(cfg: DraftModelConfig, target_lm) -> DraftModelDrafter:
    """``draft_model``: a preset, GGUF path or HF directory; default: the target's first
    ``layers`` blocks (a stand-in until a trained draft model exists)."""
    draft_model, layers = cfg.draft_model, cfg.layers
    target = getattr(target_lm, "model", target_lm)
    L = target.cfg.num_layers
    shared = 0  # the target's blocks the draft model is made of (its cache entries are theirs)
    if draft_model is None:
        n = layers if layers is not None else max(1, L // 6)
        if not isinstance(n, int) or not 1 <= n < L:
            raise DrafterError(f"layers must be in [1, {L - 1}], got {n!r}")
        dm = truncated_copy(target, n)
        desc = f"target's first {n} of {L} layers"
        shared = n
    elif hasattr(draft_model, "cfg"):  # a Llama
        dm, desc = draft_model, "given model"
    else:
        if hasattr(getattr(draft_model, "model", None), "cfg"):  # a LoadedModel
            lm, desc = draft_model, f"given model ({getattr(draft_model, 'source', '?')})"
        else:
            from specjax.models.loaders import load

            from specjax.models.quant import quantization_of

            # a checkpoint path is loaded as precise as the target (a given model is used as is)
            # (its numerics only change what is proposed, never what is accepted: fast)
            lm, desc = load(draft_model, dtype=target.dtype,
                            quantize=quantization_of(target), numerics="fast"), str(draft_model)
        dm = lm.model
        tok_t = getattr(target_lm, "tokenizer", None)
        if tok_t is not None and lm.tokenizer is not None and tok_t.vocab_size != \
                lm.tokenizer.vocab_size:
            raise DrafterError(
                f"draft model {desc} has a {lm.tokenizer.vocab_size}-token vocabulary, "
                f"the target {tok_t.vocab_size}: they must share one tokenizer"
            )
    if dm.cfg.vocab_size != target.cfg.vocab_size:
        raise DrafterError(
            f"draft model vocabulary ({dm.cfg.vocab_size}) differs from the target's "
            f"({target.cfg.vocab_size}): they must share one tokenizer"
        )
    spec = tree_option(cfg.tree, cfg.k)
    graphdef, params = nnx.split(dm)
    return DraftModelDrafter(graphdef=graphdef, max_k=spec.depth if spec else cfg.k,
                             vocab=dm.cfg.vocab_size, tree=spec, description=desc,
                             target_layers=shared,
                             _params=params)
