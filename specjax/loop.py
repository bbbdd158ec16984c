"""The decode loop: prefill, then one ``lax.while_loop``, keyed on one static loop object.

:class:`DecodeLoop` is a frozen, hashable description of a generation program: the target's
graph, the drafter (None for plain decoding), the policy, the verifier, greedy or sampling,
and the EOS ids. It is the static argument of the two compiled programs (prefill and loop);
everything else (weights, prompts, budgets, sampling parameters) is an array, so a new token
budget does not recompile.

Plain and speculative decoding share the state (:class:`LoopState`), the prefill, the stopping
rules and the metrics; plain decoding keeps its own loop body (one token per row per step),
which measures faster than the speculative body with nothing drafted.

A speculative step, per row: the policy picks a draft length (tree depth) ``k``; the drafter
proposes a :class:`specjax.tree.DraftTree` of at most ``k`` levels (a chain is the one-branch
tree), possibly cut short by the policy's mid-draft stop hook; the target scores
``[pending, node_0 .. node_{N-1}]`` in ONE forward under the ancestor mask, with positions
``length + depth`` (block size bucketed to what the live rows drafted, so drafting nothing
costs a plain decoding step), computing the target features the drafter declared; the
verifier accepts a root-to-leaf path plus one correction/bonus token; the accepted path's cache
entries are committed: chains by advancing per-row lengths, trees by gathering the path into
contiguous slots (rejected entries stay as scratch past the length and are overwritten later).

Batched rows stay exactly as if decoded alone (card C10): each row has its own committed
length, positions ``length + arange``, and a mask that shows only its own committed prefix and
its own block; nothing is re-padded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.buckets import verify_buckets
from specjax.cache import KVCache
from specjax.drafters._tree import run_if
from specjax.drafters.base import (StepContext, drafter_features, drafter_prefill_features,
                                   planned_k, tree_spec)
from specjax.features import (
    NO_FEATURES,
    Features,
    forward_kwargs,
    from_output,
    pad_tokens,
    take_tokens,
)
from specjax.rng import Stream, fold
from specjax.sampling import greedy_token, process_logits
from specjax.tree import DraftTree, ancestor_mask, tree_positions
from specjax.verifiers.base import SamplingArrays, sampling_rule, target_probs


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Metrics:
    """Per-row counters.

    forwards: target forwards (prefill included); drafted / accepted: drafted tokens and
    accepted drafted tokens that were emitted (an EOS inside an accepted run truncates it);
    drafted_at / accepted_at ``[B, K]``: the same by draft position (``K = 0`` for plain
    decoding); idle: the row's idle steps (no row drafted: a plain forward and the drafter's
    ``skip``). Every forward emits one token plus its accepted drafts, except a final step cut
    at EOS, which emits no correction token: ``new_tokens`` is ``forwards + accepted`` or one
    less.
    """

    forwards: jax.Array
    drafted: jax.Array
    accepted: jax.Array
    drafted_at: jax.Array
    accepted_at: jax.Array
    idle: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LoopState:
    """Loop state (all arrays, batch-major).

    Attributes:
      cache: target KV cache; its committed length is ``seq_len - 1`` for live rows.
      draft_state / policy_state: the drafter's and the policy's state pytrees (``()`` for
        plain decoding).
      seq: ``int32[B, Ls]`` prompt + output tokens; ``seq[b, seq_len[b] - 1]`` is the pending
        token (the newest, not yet in the cache).
      seq_len, prompt_len, max_new: ``int32[B]``; ``max_new`` is the row's token budget.
      done: ``bool[B]`` the row stopped (EOS, budget or full cache).
      keys: ``uint32[B, 2]`` per-row raw PRNG keys (a row samples the same alone or batched).
      step: ``int32[]`` loop iterations so far.
      metrics: :class:`Metrics`.
    """

    cache: KVCache
    draft_state: Any
    policy_state: Any
    seq: jax.Array
    seq_len: jax.Array
    prompt_len: jax.Array
    max_new: jax.Array
    done: jax.Array
    keys: jax.Array
    step: jax.Array
    metrics: Metrics


def _is_eos(tok, eos_ids: tuple[int, ...]):
    if not eos_ids:
        return jnp.zeros(tok.shape, bool)
    return jnp.any(tok[..., None] == jnp.asarray(eos_ids, jnp.int32), axis=-1)


def _sample(logits, key_data, greedy: bool, sampling: SamplingArrays):
    """One token per row from ``logits[B, V]`` with the row's (already folded) key."""
    if greedy:
        return greedy_token(logits)
    lp = process_logits(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    return jax.vmap(lambda k, lg: jax.random.categorical(jax.random.wrap_key_data(k), lg))(
        key_data, lp).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class DecodeLoop:
    """One generation program (static, hashable): see the module docstring.

    Attributes:
      graphdef: the target's ``nnx`` graph (its weights are passed as arrays).
      drafter: a drafter, or None for plain decoding.
      policy: the speculation-length policy (None for plain decoding).
      verifier: the acceptance rule (None for plain decoding).
      greedy: argmax decoding; else sampling with the run's sampling arrays.
      eos_ids: token ids that end a row (kept in the output).
      cache_sharding: on a mesh, the ``NamedSharding`` of every layer's K and V cache (the
        sharding table's ``(batch, kv_heads, sequence, -)``); None on one device.
      kernel_mesh: on a mesh, where the Pallas kernels' operands lie
        (:func:`specjax.sharding.kernel_mesh`): tree attention's and exact numerics' kernels
        run inside ``shard_map`` (:mod:`specjax.pallas_kernels.placement`); None on one
        device.
      idle_skip: in a step where every row has ``k = 0`` (the policy's, or the bound of the
        drafter's ``plan`` where it found nothing to draft), a drafter with a ``skip``
        method is neither asked to propose nor updated: the step costs a plain decoding
        step plus ``skip`` (the drafter records the committed token, catching up later).
        False runs ``propose`` and ``update`` in every step (same outputs; for A/B
        measurements and tests; ``SPECJAX_IDLE_STEPS=off``). A policy with ``backs_off =
        False`` (``fixed``) gets no idle steps compiled (compile time) unless the drafter
        has a ``plan``.
      verify_buckets: ``"all"``: the verify forward is compiled for each block size of
        :func:`specjax.buckets.verify_buckets` and a step runs the smallest that holds its
        longest draft; ``"max"``: one block of every node (one target forward compiled instead
        of several: faster compiles, slower steps when drafts are short; the test suite's
        setting, ``SPECJAX_VERIFY_BUCKETS``).
      exact: the target runs exact numerics: the engine compiles the loop's programs with
        :data:`specjax.models.numerics.EXACT_COMPILER_OPTIONS` (XLA keeps no float32
        intermediates where the program rounds to bfloat16). ``prefill_jit`` and ``run_jit``
        called directly compile without them (XLA's defaults).
    """

    graphdef: Any
    drafter: Any = None
    policy: Any = None
    verifier: Any = None
    greedy: bool = True
    eos_ids: tuple[int, ...] = ()
    cache_sharding: Any = None
    kernel_mesh: Any = None
    idle_skip: bool = True
    verify_buckets: str = "all"
    exact: bool = False

    @property
    def speculative(self) -> bool:
        return self.drafter is not None

    @property
    def K(self) -> int:
        """Maximum draft depth (0 for plain decoding)."""
        return tree_spec(self.drafter).depth if self.speculative else 0

    @property
    def features(self):
        return drafter_features(self.drafter) if self.speculative else NO_FEATURES

    # ------------------------------------------------------------------ prefill

    def prefill(self, params, draft_params, tokens, lengths, max_new, keys,
                sampling: SamplingArrays, cache_len: int) -> LoopState:
        """Runs the prompts ``tokens[B, P]`` (right-padded, ``lengths[B]`` real tokens) through
        the target, picks each row's first new token and sets up the drafter and policy."""
        with self._kernel_sharding():
            return self._prefill(params, draft_params, tokens, lengths, max_new, keys,
                                 sampling, cache_len)

    @contextlib.contextmanager
    def _kernel_sharding(self):
        """On a mesh, the Pallas kernels (tree attention's, exact numerics' batch-invariant
        ones) run inside ``shard_map`` where the sharding table puts their operands
        (:func:`specjax.pallas_kernels.placement.sharded`)."""
        from specjax.pallas_kernels import placement

        with placement.sharded(self.kernel_mesh):
            yield

    def _prefill(self, params, draft_params, tokens, lengths, max_new, keys,
                 sampling: SamplingArrays, cache_len: int) -> LoopState:
        target = nnx.merge(self.graphdef, params)
        B, P = tokens.shape
        K = self.K
        fs = drafter_prefill_features(self.drafter) if self.speculative else NO_FEATURES
        cache = target.init_cache(B, cache_len)
        if self.cache_sharding is not None:
            cache = cache.constrain(self.cache_sharding)
        positions = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
        last = (lengths - 1)[:, None]
        out = target(tokens, positions, cache, logits_index=None if fs.all_logits else last,
                     prefix_empty=True, **forward_kwargs(fs))
        cache = out.cache.with_lengths(lengths)
        logits = (jnp.take_along_axis(out.logits, last[..., None], axis=1) if fs.all_logits
                  else out.logits)[:, 0]
        first = _sample(logits, fold(keys, 0), self.greedy, sampling)
        live = max_new > 0
        seq = jnp.zeros((B, cache_len + K + 2), jnp.int32).at[:, :P].set(tokens)
        seq = seq.at[jnp.arange(B), lengths].set(jnp.where(live, first, 0))
        n_out = live.astype(jnp.int32)
        done = (~live) | (_is_eos(first, self.eos_ids) & live) | (n_out >= max_new) | (
            lengths >= cache_len)
        z = jnp.zeros((B,), jnp.int32)
        metrics = Metrics(forwards=n_out, drafted=z, accepted=z,
                          drafted_at=jnp.zeros((B, K), jnp.int32),
                          accepted_at=jnp.zeros((B, K), jnp.int32), idle=z)
        dstate, pstate = (), ()
        if self.speculative:
            dstate = self.drafter.init(draft_params, target, tokens, lengths, cache_len,
                                       from_output(fs, out))
            pstate = self.policy.init(B)
        return LoopState(cache=cache, draft_state=dstate, policy_state=pstate, seq=seq,
                         seq_len=lengths + n_out, prompt_len=lengths, max_new=max_new,
                         done=done, keys=keys, step=jnp.zeros((), jnp.int32), metrics=metrics)

    # ------------------------------------------------------------------ loop

    def run(self, params, draft_params, state: LoopState, sampling: SamplingArrays,
            max_steps=None) -> LoopState:
        """Decodes until every row is done (or, when ``max_steps`` is given, until
        ``state.step`` reaches it: a hook to inspect the state after any step; the loop
        resumes from the returned state)."""
        target = nnx.merge(self.graphdef, params)

        def cond(s: LoopState):
            go = jnp.any(~s.done)
            if max_steps is not None:
                go = go & (s.step < max_steps)
            return go

        if self.speculative:
            body = functools.partial(self._spec_step, target, draft_params, sampling)
        else:
            body = functools.partial(self._plain_step, target, sampling)
        with self._kernel_sharding():
            return jax.lax.while_loop(cond, body, state)

    @staticmethod
    def _done(s: LoopState, cache, seq_len, emitted_eos, live):
        """The stopping rule of both bodies: EOS emitted, budget reached or cache full."""
        return s.done | (live & (emitted_eos | (seq_len - s.prompt_len >= s.max_new) |
                                 (cache.lengths >= cache.max_len)))

    def _plain_step(self, target, sampling, s: LoopState) -> LoopState:
        """Plain decoding: one token per row."""
        B = s.seq.shape[0]
        live = ~s.done
        pending = jnp.take_along_axis(s.seq, (s.seq_len - 1)[:, None], axis=1)
        o = target(pending, s.cache.lengths[:, None], s.cache)
        cache = o.cache.advance(live.astype(jnp.int32))
        nxt = _sample(o.logits[:, 0], fold(s.keys, s.seq_len - s.prompt_len), self.greedy,
                      sampling)
        idx = jnp.where(live, s.seq_len, s.seq.shape[1])  # out of range: dropped
        seq = s.seq.at[jnp.arange(B), idx].set(nxt, mode="drop")
        seq_len = s.seq_len + live
        done = self._done(s, cache, seq_len, _is_eos(nxt, self.eos_ids), live)
        mt = s.metrics
        metrics = dataclasses.replace(mt, forwards=mt.forwards + live)
        return dataclasses.replace(s, cache=cache, seq=seq, seq_len=seq_len, done=done,
                                   step=s.step + 1, metrics=metrics)

    def _context(self, s: LoopState, sampling: SamplingArrays) -> StepContext:
        return StepContext(seq=s.seq, seq_len=s.seq_len, target_cache=s.cache,
                           keys=fold(s.keys, s.step + 1), live=~s.done,
                           temperature=sampling.temperature, top_k=sampling.top_k,
                           top_p=sampling.top_p, left=s.max_new - (s.seq_len - s.prompt_len),
                           want_q="kld" in getattr(self.policy, "signals", ()))

    def _spec_step(self, target, dparams, sampling, s: LoopState) -> LoopState:
        """The policy picks each row's ``k``; then a draft-and-verify step, or, when no row
        drafts and the drafter can skip (``idle_skip``), an idle step."""
        ctx = self._context(s, sampling)
        n, n_out = s.cache.lengths, s.seq_len - s.prompt_len
        k = self.policy.decide(s.policy_state, ctx)
        k = jnp.minimum(jnp.minimum(k, s.cache.max_len - n - 1), s.max_new - n_out - 1)
        k = jnp.where(ctx.live, jnp.clip(k, 0, self.K), 0).astype(jnp.int32)
        pk = k  # what the policy asked for: its update learns from that
        plan = getattr(self.drafter, "plan", None)
        if callable(plan):  # the drafter looks first and may draft less (nothing found)
            k, dstate = planned_k(self.drafter, dparams, target, s.draft_state, ctx, k,
                                  self.greedy)
            k = jnp.where(ctx.live, jnp.maximum(k, 0), 0).astype(jnp.int32)
            s = dataclasses.replace(s, draft_state=dstate)
        if not (self.idle_skip and callable(getattr(self.drafter, "skip", None))
                and (getattr(self.policy, "backs_off", True) or callable(plan))):
            return self._draft_verify(target, dparams, sampling, s, k, pk)
        # zero-or-one-trip loops rather than lax.cond: the state (the target cache among it)
        # is carried in place, where a conditional would copy it in and out of the branch
        drafting = jnp.any(k > 0)
        _, s = run_if(drafting, lambda st: (
            (), self._draft_verify(target, dparams, sampling, st, k, pk)), (), s)
        _, s = run_if(~drafting, lambda st: (
            (), self._idle_step(target, dparams, sampling, st, k, pk)), (), s)
        return s

    def _idle_step(self, target, dparams, sampling, s: LoopState, k, pk) -> LoopState:
        """A step in which no row drafts: one plain forward of the pending tokens (with the
        features the drafter reads), the verifier's correction token at the root (the same
        rule and key as a draft-and-verify step with nothing drafted, so sampled rows draw
        the same token either way), and the drafter's ``skip`` instead of ``propose`` and
        ``update``."""
        drafter, policy, fs = self.drafter, self.policy, self.features
        ctx = self._context(s, sampling)
        spec = tree_spec(drafter)
        N, D = spec.num_nodes, spec.depth
        B = s.seq.shape[0]
        live = ctx.live
        zero = jnp.zeros((B,), jnp.int32)
        o = target(ctx.pending[:, None], s.cache.lengths[:, None], s.cache,
                   **forward_kwargs(fs))
        vout = self.verifier.target_output(o.logits, sampling, self.greedy)
        vout = jnp.pad(vout, [(0, 0), (0, N)] + [(0, 0)] * (vout.ndim - 2))
        tree = _empty_tree(lambda: drafter.propose(dparams, target, s.draft_state, ctx, k,
                                                   self.greedy, None))
        _, _, nxt = self.verifier.accept(
            fold(ctx.keys, int(Stream.VERIFY)), tree, tree.valid, zero, vout, depth=D,
            chain=getattr(drafter, "tree", None) is None, greedy=self.greedy,
            rule=sampling_rule(drafter))
        cache = o.cache.advance(live.astype(jnp.int32))
        idx = jnp.where(live, s.seq_len, s.seq.shape[1])  # out of range: dropped
        seq = s.seq.at[jnp.arange(B), idx].set(nxt, mode="drop")
        seq_len = s.seq_len + live
        done = self._done(s, cache, seq_len, _is_eos(nxt, self.eos_ids), live)
        after = dataclasses.replace(ctx, seq=seq, seq_len=seq_len, target_cache=cache)
        dstate = drafter.skip(dparams, target, s.draft_state, after, from_output(fs, o))
        if "kld" in getattr(policy, "signals", ()):
            pstate = policy.update(s.policy_state, pk, zero, zero,
                                   kld=jnp.zeros((B, N), jnp.float32))
        else:
            pstate = policy.update(s.policy_state, pk, zero, zero)
        mt = s.metrics
        return dataclasses.replace(
            s, cache=cache, draft_state=dstate, policy_state=pstate, seq=seq, seq_len=seq_len,
            done=done, step=s.step + 1,
            metrics=dataclasses.replace(mt, forwards=mt.forwards + live,
                                        idle=mt.idle + live))

    def _draft_verify(self, target, dparams, sampling, s: LoopState, k, pk) -> LoopState:
        """Drafts up to ``k[b]`` tokens per row and verifies them; the policy learns with the
        ``pk`` it asked for (``k`` is lower where the drafter's ``plan`` found less)."""
        drafter, policy, verifier = self.drafter, self.policy, self.verifier
        greedy, K, fs = self.greedy, self.K, self.features
        S = s.cache.max_len
        B, Ls = s.seq.shape
        spec = tree_spec(drafter)
        chain = getattr(drafter, "tree", None) is None  # drafted as a chain: prefix commit
        N, D = spec.num_nodes, spec.depth
        buckets = verify_buckets(N) if self.verify_buckets == "all" else (N + 1,)
        node_ids = jnp.arange(N, dtype=jnp.int32)
        path_ids = jnp.arange(D + 1, dtype=jnp.int32)
        live = ~s.done
        n = s.cache.lengths  # committed = position of the pending token
        ctx = self._context(s, sampling)
        step_keys = ctx.keys
        want_kld = ctx.want_q
        n_out = s.seq_len - s.prompt_len
        stop = None
        if policy.stops_mid_draft:
            stop = functools.partial(policy.stop, s.policy_state)
        tree, dstate, cache = drafter.propose(dparams, target, s.draft_state, ctx, k, greedy,
                                              stop)
        # a node is verified if drafted, within the row's depth and its verify slot fits
        valid = (tree.valid & (tree.depth <= k[:, None]) & live[:, None]
                 & (node_ids[None] + 1 < (S - n)[:, None]))
        n_nodes = jnp.sum(valid, axis=1).astype(jnp.int32)
        n_draft = jnp.max(jnp.where(valid, tree.depth, 0), axis=1).astype(jnp.int32)
        block = jnp.concatenate([ctx.pending[:, None], tree.tokens], axis=1)  # [B, N+1]
        if chain:
            pos = n[:, None] + jnp.arange(N + 1, dtype=jnp.int32)[None]
            mask = None
        else:
            pos = tree_positions(tree.depth, n)
            mask = ancestor_mask(tree.parent, D)
        need = jnp.max(jnp.where(valid, node_ids[None] + 2, 1))
        branch = jnp.searchsorted(jnp.asarray(buckets, jnp.int32), need, side="left")

        def make_branch(T):
            def run(cache):
                am = None if mask is None else mask[:, :T, :T]
                o = target(block[:, :T], pos[:, :T], cache, attn_mask=am,
                           **forward_kwargs(fs))
                res = verifier.target_output(o.logits, sampling, greedy)
                res = jnp.pad(res, [(0, 0), (0, N + 1 - T)] + [(0, 0)] * (res.ndim - 2))
                kld = (chain_kld(o.logits, tree.q, sampling, greedy, N) if want_kld
                       else jnp.zeros((B, 0), jnp.float32))
                return (res, pad_tokens(from_output(fs, o), N + 1), kld), o.cache

            return run

        # one zero-or-one-trip loop per block size, not lax.switch: the forward writes the
        # cache in place as a plain step's does. Under a switch a branch that wrote the cache
        # copied every layer's buffer in and out, and one that left the write to its caller
        # read the cache in ways that cost more than the write (each layer's tail gathered
        # from the block redoing its rotary embedding). 2026-12-05, batch 4, float32: a
        # 2-token block's step 1.40 plain steps under the switch, 1.14 in place
        # (scripts/step_cost_vs_plain.py; docs/benchmarks_notes.md)
        runs = [make_branch(T) for T in buckets]
        if len(runs) == 1:  # one block size (verify_buckets="max"): no loop to choose it
            out, cache = runs[0](cache)
        else:
            out = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                               jax.eval_shape(runs[-1], cache)[0])
            for i, run in enumerate(runs):
                out, cache = run_if(branch == i, run, out, cache)
        vout, feats, kld = out
        n_acc, path, nxt = verifier.accept(
            fold(step_keys, int(Stream.VERIFY)), tree, valid, n_draft, vout, depth=D,
            chain=chain, greedy=greedy, rule=sampling_rule(drafter))
        n_acc = jnp.where(live, n_acc, 0)
        path_tok = jnp.take_along_axis(tree.tokens, jnp.maximum(path, 0), axis=1)  # [B, D]
        drafts = jnp.concatenate([path_tok, jnp.zeros((B, 1), jnp.int32)], axis=1)
        emitted = jnp.where(path_ids[None] < n_acc[:, None], drafts,
                            jnp.where(path_ids[None] == n_acc[:, None], nxt[:, None], 0))
        eos = _is_eos(emitted, self.eos_ids) & (path_ids[None] <= n_acc[:, None])
        first_eos = jnp.min(jnp.where(eos, path_ids[None], D + 1), axis=1)
        m = jnp.minimum(jnp.minimum(n_acc + 1, s.max_new - n_out), first_eos + 1)
        m = jnp.where(live, m, 0)
        idx = s.seq_len[:, None] + path_ids[None]
        idx = jnp.where(path_ids[None] < m[:, None], idx, Ls)  # out of range: dropped
        seq = s.seq.at[jnp.arange(B)[:, None], idx].set(emitted, mode="drop")
        seq_len = s.seq_len + m
        commit = jnp.where(live, n_acc + 1, 0)
        # block index of the root and of the accepted nodes, in path order
        block_path = jnp.concatenate([jnp.zeros((B, 1), jnp.int32), path + 1], axis=1)
        if chain:
            cache = cache.advance(commit)
        else:  # every layer
            cache = cache.commit_path(block_path, commit)
        done = self._done(s, cache, seq_len, first_eos < m, live)
        after = dataclasses.replace(ctx, seq=seq, seq_len=seq_len, target_cache=cache)
        path_feats = take_tokens(feats, block_path) if not fs.empty else Features()
        if getattr(drafter, "tree_features", False):  # also every verified node's features
            dstate = drafter.update(dparams, dstate, after, n_acc, tree, path, path_feats,
                                    tree_features=feats)
        else:
            dstate = drafter.update(dparams, dstate, after, n_acc, tree, path, path_feats)
        if want_kld:  # KL(target || draft) of each drafted position, for the policy
            pstate = policy.update(s.policy_state, pk, n_draft, n_acc, kld=kld)
        else:
            pstate = policy.update(s.policy_state, pk, n_draft, n_acc)
        acc_out = jnp.minimum(n_acc, m)  # accepted drafts that were emitted (EOS truncates)
        mt = s.metrics
        metrics = Metrics(
            forwards=mt.forwards + live,
            drafted=mt.drafted + n_nodes,
            accepted=mt.accepted + acc_out,
            drafted_at=mt.drafted_at + (path_ids[None, :K] < n_draft[:, None]),
            accepted_at=mt.accepted_at + (path_ids[None, :K] < acc_out[:, None]),
            idle=mt.idle,
        )
        return LoopState(cache=cache, draft_state=dstate, policy_state=pstate, seq=seq,
                         seq_len=seq_len, prompt_len=s.prompt_len, max_new=s.max_new,
                         done=done, keys=s.keys, step=s.step + 1, metrics=metrics)


def _empty_tree(propose) -> DraftTree:
    """The tree ``propose() -> (DraftTree, state, cache)`` returns when no node is drafted,
    without running it: its shapes, every node invalid."""
    shape, _, _ = jax.eval_shape(propose)
    z = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shape)
    return dataclasses.replace(
        z, parent=z.parent - 1, depth=z.depth + 1, valid=jnp.zeros(z.valid.shape, bool),
        slot=None if z.slot is None else z.slot - 1)


def chain_kld(logits, q, sampling: SamplingArrays, greedy: bool, N: int) -> jax.Array:
    """``KL(p_i || q_i)`` for each chain node ``i < N`` verified in this block (0 past it),
    ``float32[B, N]``: ``p_i`` the target's distribution at block position ``i`` (the one
    that scores node ``i``: the plain softmax when greedy, else the processed one), ``q_i``
    the draft distribution node ``i`` was drawn from. ``q`` is clamped at 1e-8 inside the
    log and the divergence at 1e-8 from below (DSDE's convention)."""
    T = logits.shape[1]
    n = min(T - 1, N)
    lg = logits[:, :n].astype(jnp.float32)
    p = jax.nn.softmax(lg, axis=-1) if greedy else target_probs(lg, sampling)
    qn = q[:, :n].astype(jnp.float32)
    logp = jnp.log(jnp.maximum(p, 1e-38))
    kl = jnp.sum(jnp.where(p > 0, p * (logp - jnp.log(jnp.maximum(qn, 1e-8))), 0.0), axis=-1)
    kl = jnp.maximum(kl, 1e-8)
    return jnp.pad(kl, ((0, 0), (0, N - n)))


@functools.partial(jax.jit, static_argnames=("loop", "cache_len"))
def prefill_jit(loop: DecodeLoop, params, draft_params, tokens, lengths, max_new, keys,
                sampling: SamplingArrays, *, cache_len: int) -> LoopState:
    return loop.prefill(params, draft_params, tokens, lengths, max_new, keys, sampling,
                        cache_len)


@functools.partial(jax.jit, static_argnames=("loop",), donate_argnames=("state",))
def run_jit(loop: DecodeLoop, params, draft_params, state: LoopState,
            sampling: SamplingArrays, max_steps=None) -> LoopState:
    return loop.run(params, draft_params, state, sampling, max_steps)
