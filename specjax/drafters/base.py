"""The drafter protocol, the per-step context it sees, and the drafter registry.

A drafter is a frozen, hashable object (it is a static argument of the compiled loop); the
arrays it needs (a draft model's weights, a trained head) are returned by
:meth:`Drafter.params` and passed into the jit separately. Inside the loop it is called as::

    state = drafter.init(params, target, prompt_tokens, prompt_lens, cache_len, features)
    tree, state, target_cache = drafter.propose(params, target, state, ctx, k, greedy, stop)
    state = drafter.update(params, state, ctx_after, n_acc, tree, path, features)

``propose`` returns a :class:`specjax.tree.DraftTree` (a chain is the one-branch tree) with
at most ``k[b]`` levels per row. ``stop`` is the policy's mid-draft hook
(:class:`specjax.policies.base.DraftStep` -> ``bool[B]``) or None: a drafter with a draft
distribution calls it after each drafted token (the chain and tree helpers in
``_chain.py`` / ``_tree.py`` do) and drafts no further for rows where it is True.
``update`` gets the accepted count and path (node indices, root to leaf) of each row.

``features`` are the target features the drafter declared in its ``features``
(:class:`specjax.features.FeatureSpec`): for the prompt in ``init``, and for the tokens the
step committed (the root, then the accepted nodes) in ``update``. They come from the prefill
and the verify forward: no extra target forward.

An optional ``skip(params, target, state, ctx_after, features) -> state`` lets the loop
leave the drafter out of a step in which the policy gives every row ``k = 0``: neither
``propose`` nor ``update`` runs, and ``skip`` records the one committed token (``features``
as for ``update`` with nothing accepted: index 0 is that token's). The EAGLE drafter defers
its head pass to the next proposal this way; a drafter without ``skip`` is proposed and
updated every step, drafting nothing.

An optional ``plan(params, target, state, ctx, k, greedy) -> (bound, state)`` lets a drafter look
before the step: the loop calls it after the policy's decision, and drafts at most
``min(k, bound)`` tokens per row; a step where that is 0 for every row is an idle step
(``skip``), not a verify pass of the pending token alone. Model-free drafters whose lookup
finds nothing on many steps (prompt lookup, ``ngram``) have one: their ``plan`` does the
lookup and keeps its result in the state, and ``propose``, which the loop only calls after
``plan`` in the same step, drafts it. The policy still learns from the ``k`` it asked for.

``propose`` may write scratch entries into the target cache past its committed length
(self-speculative drafters draft through the target's own layers); it returns that cache so
the verify pass, which overwrites the scratch, does not force a copy.

Two optional host-side hooks, for drafters that keep state across calls: ``observe(prompts,
outputs)`` is called by ``generate`` after every batch with that batch's prompts and outputs
(token lists), and ``params()`` is asked again before the next batch (the suffix drafter's
global cache learns this way); ``carry_over(draft_state)`` is called after every batch with
the loop's final drafter state (STAND keeps its n-gram tables this way), ``params()`` again
asked before the next, and ``begin_call()`` at the start of every ``generate`` call;
``stats(draft_state) -> {name: int[B]}`` adds per-row counters to ``GenerationResult.extra``.
A drafter with ``tree_features = True`` gets its ``update`` called with ``tree_features=``
too: the verify pass's features at every block position (index 0 the root, ``i + 1`` node
``i``; rejected nodes included), not only along the accepted path.

Adding a drafter: one module with a frozen config dataclass (its options), the drafter class
and a build function registered with ``@DRAFTERS.register(name, config=...)``, imported in
``specjax/drafters/__init__.py`` (docs/design.md walks through an example).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from specjax.cache import KVCache
from specjax.errors import DrafterError
from specjax.features import FeatureSpec, Features
from specjax.registry import Registry
from specjax.tree import DraftTree, TreeError, TreeSpec, parse_tree


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a drafter may read at the start of a step.

    Attributes:
      seq: ``int32[B, L]`` every token of each row so far: prompt, committed output and the
        pending token (the newest, not yet in the target cache).
      seq_len: ``int32[B]`` valid tokens in ``seq``; the pending token is ``seq[b, seq_len-1]``.
      target_cache: the target KV cache; its committed length is ``seq_len - 1``.
      keys: ``uint32[B, 2]`` fresh raw PRNG keys for this step, one per row.
      live: ``bool[B]`` rows still generating.
      temperature, top_k, top_p: sampling parameters (traced scalars).
      left: ``int32[B]`` tokens each row may still write (its budget less what it wrote), or
        None where unknown (a drafter driven by hand).
      want_q: (static) keep each drafted token's draft distribution in the tree's ``q`` even
        when greedy: the policy reads the divergence between the target's and the draft's
        distributions (``dsde``).
    """

    seq: jax.Array
    seq_len: jax.Array
    target_cache: KVCache
    keys: jax.Array
    live: jax.Array
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array
    left: jax.Array | None = None
    want_q: bool = dataclasses.field(default=False, metadata={"static": True})

    @property
    def pending(self) -> jax.Array:
        return jnp.take_along_axis(self.seq, (self.seq_len - 1)[:, None], axis=1)[:, 0]


class Drafter(Protocol):
    name: str
    max_k: int  # maximum draft length (tree depth)
    deterministic: bool  # proposals are a function of the context (q = one-hot)
    tree: TreeSpec | None  # None: a chain of max_k tokens
    features: FeatureSpec  # target features it reads (FeatureSpec() for none)
    # optional: prefill_features, what ``init`` reads if not ``features``

    def params(self) -> Any: ...

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len: int,
             features: Features) -> Any: ...

    def propose(self, params, target, state, ctx: StepContext, k: jax.Array, greedy: bool,
                stop: Callable | None = None) -> tuple[DraftTree, Any, KVCache]: ...

    def update(self, params, state, ctx: StepContext, n_acc: jax.Array, tree: DraftTree,
               path: jax.Array, features: Features) -> Any: ...


DRAFTERS = Registry("drafter", DrafterError)


def skip_as_update(self, params, target, state, ctx: StepContext, features: Features):
    """A ``skip`` for drafters whose ``update`` with nothing accepted is all the bookkeeping a
    step needs (Medusa, Hydra: the state takes the committed token's features; ``ngram``,
    Token Recycling: the committed token is recorded); assign it as the class's ``skip``.
    ``update`` gets an empty chain of ``max_k`` tokens and a path of -1 (nothing accepted)."""
    B, K = ctx.seq_len.shape[0], self.max_k
    n0 = jnp.zeros((B,), jnp.int32)
    tree = DraftTree.chain(jnp.zeros((B, K), jnp.int32), n0)
    return self.update(params, state, ctx, n0, tree, jnp.full((B, K), -1, jnp.int32), features)


def planned_k(drafter, params, target, state, ctx: StepContext, k, greedy: bool):
    """``(k, state)`` after the drafter's optional ``plan``: at most what it found per row
    (``k`` and ``state`` as they are for a drafter without one). Call ``propose`` after it."""
    plan = getattr(drafter, "plan", None)
    if not callable(plan):
        return k, state
    bound, state = plan(params, target, state, ctx, k, greedy)
    return jnp.minimum(k, bound), state


def tree_spec(drafter) -> TreeSpec:
    """The drafter's static tree shape (a chain of ``max_k`` tokens unless it drafts trees)."""
    t = getattr(drafter, "tree", None)
    return t if t is not None else TreeSpec.chain(drafter.max_k)


def drafter_features(drafter) -> FeatureSpec:
    return getattr(drafter, "features", None) or FeatureSpec()


def drafter_prefill_features(drafter) -> FeatureSpec:
    """The features ``init`` reads from the prefill: the drafter's optional
    ``prefill_features``, else its ``features`` (a drafter that fills its state from the
    prompt's text can spare the prefill the logits of every prompt position)."""
    spec = getattr(drafter, "prefill_features", None)
    return drafter_features(drafter) if spec is None else spec


def tree_option(value, k: int) -> TreeSpec | None:
    """Normalises a ``tree`` option (a :class:`TreeSpec`, a :func:`specjax.tree.parse_tree`
    string with ``k`` as the default depth, or None) to None for a chain of ``k`` tokens,
    else a TreeSpec."""
    if value is None:
        return None
    try:
        spec = value if isinstance(value, TreeSpec) else parse_tree(value, k=k)
    except TreeError as e:
        raise DrafterError(str(e)) from None
    return None if spec.kind == "chain" and spec.depth == k else spec


def tree_field(default_k: int):
    """The ``tree`` option of a drafter config: None (a chain of ``k``), a TreeSpec, or a
    string (``chain``, ``topk[:width=W]``, ``dynamic[:width=W,nodes=N]``,
    ``fixed:<choices>[:iid]``, ``levels:<w1>.<w2>..[:iid]``; ``depth=`` defaults to ``k``)."""
    def parse(value: str, args: dict):
        k = args.get("k", default_k)
        try:
            k = int(k)
        except (TypeError, ValueError):
            raise DrafterError(f"k must be an integer, got {k!r}") from None
        return tree_option(value, k) or TreeSpec.chain(k)

    return dataclasses.field(default=None, metadata={
        "parse": parse, "help": "chain (default) | topk[:width=W] | dynamic[:width=W,nodes=N]"
        " | fixed:<choices>[:iid] | levels:<w1>.<w2>..[:iid]"})


def learns_across_calls(drafter) -> bool:
    """Whether ``drafter`` keeps what it saw in one ``generate`` call for the next (a suffix
    cache or datastore that learns every output, STAND tables carried over): its optional
    ``learns_across_calls()`` hook. A benchmark that decodes a prompt twice with such a
    drafter would draft the second run from the first run's answer."""
    hook = getattr(drafter, "learns_across_calls", None)
    return bool(hook()) if callable(hook) else False


def check_k(k) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DrafterError(f"k (the maximum draft length) must be an integer >= 1, got {k!r}")
    return k


def tokenizer_digest(tokenizer) -> str | None:
    """A short hash of a tokenizer's vocabulary and rules (None without a tokenizer): what a
    drafter's saved tables (suffix cache, STAND tables) record to refuse another tokenizer."""
    if tokenizer is None:
        return None
    backend = getattr(tokenizer, "backend", tokenizer)
    try:
        text = backend.to_str()
    except Exception:  # a tokenizer without a serialisation: its vocabulary
        text = json.dumps(sorted(backend.get_vocab().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def target_ids(target_lm) -> tuple[int, str | None]:
    """(vocabulary size, tokenizer digest) of a loaded target (``LoadedModel`` or ``Llama``)."""
    model = getattr(target_lm, "model", target_lm)
    return model.cfg.vocab_size, tokenizer_digest(getattr(target_lm, "tokenizer", None))


def available() -> list[str]:
    return DRAFTERS.names()


def make(name: str, target_lm, **kwargs) -> Drafter:
    """Builds drafter ``name`` for the loaded target (``specjax.LoadedModel`` or ``Llama``);
    keyword arguments are its config's options (strings are converted by the field types)."""
    return DRAFTERS.build(name, kwargs, target_lm)
