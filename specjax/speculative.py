"""The speculative decoding loop: draft -> verify -> commit in one ``lax.while_loop``.

Per step, per row: the policy picks a draft length (tree depth) ``k``; the drafter proposes a
:class:`specjax.tree.DraftTree` of at most ``k`` levels (a chain is the one-branch tree); the
target scores ``[pending, node_0 .. node_{N-1}]`` in ONE forward under the ancestor mask, with
positions ``length + depth`` (block size bucketed to what the live rows drafted, so drafting
nothing costs a plain decoding step); the verifier accepts a root-to-leaf path plus one
correction/bonus token; the accepted path's cache entries are committed: chains by advancing
per-row lengths, trees by gathering the path into contiguous slots (rejected entries stay as
scratch past the length and are overwritten later).

Batched rows stay exactly as if decoded alone (card C10): each row has its own committed
length, positions ``length + arange``, and a mask that shows only its own committed prefix and
its own block; nothing is re-padded.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache
from specjax.drafters.base import StepContext, tree_spec
from specjax.sampling import process_logits
from specjax.tree import ancestor_mask, tree_positions
from specjax.verify import greedy_tree_verify, greedy_verify, sampling_tree_verify, sampling_verify


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecMetrics:
    """Per-row counters.

    forwards: target forwards (prefill included); drafted / accepted: drafted tokens and
    accepted drafted tokens that were emitted (an EOS inside an accepted run truncates it);
    drafted_at / accepted_at ``[B, K]``: the same by draft position. Every forward emits one
    token plus its accepted drafts, except a final step cut at EOS, which emits no correction
    token: ``new_tokens`` is ``forwards + accepted`` or one less.
    """

    forwards: jax.Array
    drafted: jax.Array
    accepted: jax.Array
    drafted_at: jax.Array
    accepted_at: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecState:
    """Loop state (see module docstring).

    cache: target KV cache (committed length = ``seq_len - 1`` for live rows).
    dstate / pstate: drafter and policy state pytrees.
    seq: ``int32[B, Ls]`` prompt + output tokens; ``seq[b, seq_len-1]`` is the pending token.
    seq_len, prompt_len, max_new: ``int32[B]``. done: ``bool[B]``. keys: ``uint32[B, 2]``.
    """

    cache: KVCache
    dstate: Any
    pstate: Any
    seq: jax.Array
    seq_len: jax.Array
    prompt_len: jax.Array
    max_new: jax.Array
    done: jax.Array
    keys: jax.Array
    step: jax.Array
    metrics: SpecMetrics


def verify_buckets(K: int) -> tuple[int, ...]:
    """Block sizes the verify forward is compiled for: 1, 2, 4, ... and K + 1."""
    out, b = [], 1
    while b < K + 1:
        out.append(b)
        b *= 2
    out.append(K + 1)
    return tuple(out)


def _is_eos(tok, eos_ids):
    if not eos_ids:
        return jnp.zeros(tok.shape, bool)
    return jnp.any(tok[..., None] == jnp.asarray(eos_ids, jnp.int32), axis=-1)


def spec_prefill(target, drafter, dparams, policy, tokens, lengths, max_new, keys, greedy,
                 temperature, top_k, top_p, eos_ids, cache_len, K):
    B, P = tokens.shape
    cache = target.init_cache(B, cache_len)
    positions = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
    out = target(tokens, positions, cache, logits_index=(lengths - 1)[:, None],
                 prefix_empty=True)
    cache = out.cache.with_lengths(lengths)
    logits = out.logits[:, 0]
    if greedy:
        first = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    else:
        lp = process_logits(logits, temperature, top_k, top_p)
        k0 = jax.vmap(lambda k: jax.random.fold_in(jax.random.wrap_key_data(k), 0))(keys)
        first = jax.vmap(jax.random.categorical)(k0, lp).astype(jnp.int32)
    Ls = cache_len + K + 2
    live = max_new > 0
    seq = jnp.zeros((B, Ls), jnp.int32).at[:, :P].set(tokens)
    seq = seq.at[jnp.arange(B), lengths].set(jnp.where(live, first, 0))
    seq_len = lengths + live.astype(jnp.int32)
    n_out = live.astype(jnp.int32)
    done = (~live) | (_is_eos(first, eos_ids) & live) | (n_out >= max_new) | (
        lengths >= cache_len)
    dstate = drafter.init(dparams, target, tokens, lengths, cache_len)
    z = jnp.zeros((B,), jnp.int32)
    metrics = SpecMetrics(forwards=n_out, drafted=z, accepted=z,
                          drafted_at=jnp.zeros((B, K), jnp.int32),
                          accepted_at=jnp.zeros((B, K), jnp.int32))
    return SpecState(cache=cache, dstate=dstate, pstate=policy.init(B), seq=seq,
                     seq_len=seq_len, prompt_len=lengths, max_new=max_new, done=done, keys=keys,
                     step=jnp.zeros((), jnp.int32), metrics=metrics)


def spec_loop(target, drafter, dparams, policy, state: SpecState, greedy, temperature, top_k,
              top_p, eos_ids, K, max_steps=None):
    """Runs draft -> verify -> commit steps until every row is done (or, when ``max_steps``
    is given, until ``state.step`` reaches it: a debugging/testing hook to inspect the state
    after any step; the loop resumes from the returned state)."""
    S = state.cache.max_len
    B, Ls = state.seq.shape
    spec = tree_spec(drafter)
    chain = getattr(drafter, "tree", None) is None  # drafted as a chain: prefix commit
    N, D = spec.num_nodes, spec.depth
    assert D == K, (D, K)
    buckets = verify_buckets(N)
    ar_n = jnp.arange(N, dtype=jnp.int32)
    ar = jnp.arange(D + 1, dtype=jnp.int32)
    if drafter.deterministic or spec.kind in ("topk", "dynamic"):
        rule = "det"
    else:
        rule = spec.sibling

    def cond(s: SpecState):
        go = jnp.any(~s.done)
        if max_steps is not None:
            go = go & (s.step < max_steps)
        return go

    def body(s: SpecState):
        live = ~s.done
        n = s.cache.lengths  # committed = position of the pending token
        step_keys = jax.vmap(lambda k: jax.random.key_data(
            jax.random.fold_in(jax.random.wrap_key_data(k), s.step + 1)))(s.keys)
        ctx = StepContext(seq=s.seq, seq_len=s.seq_len, target_cache=s.cache, keys=step_keys,
                          live=live, temperature=temperature, top_k=top_k, top_p=top_p)
        n_out = s.seq_len - s.prompt_len
        k = policy.decide(s.pstate, ctx)
        k = jnp.minimum(jnp.minimum(k, S - n - 1), s.max_new - n_out - 1)
        k = jnp.where(live, jnp.clip(k, 0, K), 0).astype(jnp.int32)
        tree, dstate, cache = drafter.propose(dparams, target, s.dstate, ctx, k, greedy)
        # a node is verified if drafted, within the row's depth and its verify slot fits
        valid = (tree.valid & (tree.depth <= k[:, None]) & live[:, None]
                 & (ar_n[None] + 1 < (S - n)[:, None]))
        n_nodes = jnp.sum(valid, axis=1).astype(jnp.int32)
        nd = jnp.max(jnp.where(valid, tree.depth, 0), axis=1).astype(jnp.int32)  # depth drafted
        block = jnp.concatenate([ctx.pending[:, None], tree.tokens], axis=1)  # [B, N+1]
        if chain:
            pos = n[:, None] + jnp.arange(N + 1, dtype=jnp.int32)[None]
            mask = None
        else:
            pos = tree_positions(tree.depth, n)
            mask = ancestor_mask(tree.parent, D)
        need = jnp.max(jnp.where(valid, ar_n[None] + 2, 1))
        branch = jnp.searchsorted(jnp.asarray(buckets, jnp.int32), need, side="left")

        def make_branch(T):
            def run(cache):
                am = None if mask is None else mask[:, :T, :T]
                # the cache is only read in here: writing it inside lax.switch would make
                # XLA copy every layer's cache in and out of the branch on every step
                o = target(block[:, :T], pos[:, :T], cache, attn_mask=am,
                           defer_cache_write=True)
                if greedy:
                    a = jnp.argmax(o.logits, axis=-1).astype(jnp.int32)
                    res = jnp.zeros((B, N + 1), jnp.int32).at[:, :T].set(a)
                else:
                    p = jnp.exp(process_logits(o.logits, temperature, top_k, top_p))
                    res = jnp.zeros((B, N + 1, p.shape[-1]), jnp.float32).at[:, :T].set(p)
                pad = ((0, 0), (0, N + 1 - T), (0, 0), (0, 0))
                nk, nv = (tuple(jnp.pad(a, pad) for a in kv) for kv in o.new_kv)
                return res, nk, nv

            return run

        vout, new_k, new_v = jax.lax.switch(branch, [make_branch(T) for T in buckets], cache)
        cache = cache.write(new_k, new_v, cache.lengths)  # padding lands in scratch
        vkeys = jax.vmap(lambda k: jax.random.key_data(
            jax.random.fold_in(jax.random.wrap_key_data(k), 7)))(step_keys)
        if chain:
            if greedy:
                n_acc, nxt = greedy_verify(tree.tokens, nd, vout)
            else:
                n_acc, nxt = sampling_verify(vkeys, tree.tokens, nd, vout,
                                             None if rule == "det" else tree.q)
            path = jnp.where(ar[None, :D] < n_acc[:, None], ar[None, :D], -1)
        elif greedy:
            n_acc, path, nxt = greedy_tree_verify(tree.tokens, tree.parent, valid, vout, D)
        else:
            n_acc, path, nxt = sampling_tree_verify(vkeys, tree.tokens, tree.parent, tree.depth,
                                                    valid, vout, tree.q, D, rule)
        n_acc = jnp.where(live, n_acc, 0)
        path_tok = jnp.take_along_axis(tree.tokens, jnp.maximum(path, 0), axis=1)  # [B, D]
        drafts = jnp.concatenate([path_tok, jnp.zeros((B, 1), jnp.int32)], axis=1)
        emitted = jnp.where(ar[None] < n_acc[:, None], drafts,
                            jnp.where(ar[None] == n_acc[:, None], nxt[:, None], 0))
        eos = _is_eos(emitted, eos_ids) & (ar[None] <= n_acc[:, None])
        first_eos = jnp.min(jnp.where(eos, ar[None], D + 1), axis=1)
        m = jnp.minimum(jnp.minimum(n_acc + 1, s.max_new - n_out), first_eos + 1)
        m = jnp.where(live, m, 0)
        idx = s.seq_len[:, None] + ar[None]
        idx = jnp.where(ar[None] < m[:, None], idx, Ls)  # out of range: dropped
        seq = s.seq.at[jnp.arange(B)[:, None], idx].set(emitted, mode="drop")
        seq_len = s.seq_len + m
        commit = jnp.where(live, n_acc + 1, 0)
        if chain:
            cache = cache.advance(commit)
        else:  # the root and the accepted nodes (block index = node + 1), every layer
            block_path = jnp.concatenate([jnp.zeros((B, 1), jnp.int32), path + 1], axis=1)
            cache = cache.commit_path(block_path, commit)
        n_out = seq_len - s.prompt_len
        done = s.done | (live & ((first_eos < m) | (n_out >= s.max_new) |
                                 (cache.lengths >= S)))
        after = dataclasses.replace(ctx, seq=seq, seq_len=seq_len, target_cache=cache)
        dstate = drafter.update(dparams, dstate, after, n_acc, tree, path)
        pstate = policy.update(s.pstate, k, nd, n_acc)
        lv = live.astype(jnp.int32)
        acc_out = jnp.minimum(n_acc, m)  # accepted drafts that were emitted (EOS truncates)
        mt = s.metrics
        metrics = SpecMetrics(
            forwards=mt.forwards + lv,
            drafted=mt.drafted + n_nodes,
            accepted=mt.accepted + acc_out,
            drafted_at=mt.drafted_at + (ar[None, :K] < nd[:, None]),
            accepted_at=mt.accepted_at + (ar[None, :K] < acc_out[:, None]),
        )
        return SpecState(cache=cache, dstate=dstate, pstate=pstate, seq=seq, seq_len=seq_len,
                         prompt_len=s.prompt_len, max_new=s.max_new, done=done, keys=s.keys,
                         step=s.step + 1, metrics=metrics)

    return jax.lax.while_loop(cond, body, state)


@functools.partial(jax.jit, static_argnames=("graphdef", "drafter", "policy", "greedy",
                                             "eos_ids", "cache_len", "K"))
def spec_prefill_jit(params, dparams, tokens, lengths, max_new, keys, temperature, top_k, top_p,
                     *, graphdef, drafter, policy, greedy, eos_ids, cache_len, K):
    target = nnx.merge(graphdef, params)
    return spec_prefill(target, drafter, dparams, policy, tokens, lengths, max_new, keys,
                        greedy, temperature, top_k, top_p, eos_ids, cache_len, K)


@functools.partial(jax.jit, static_argnames=("graphdef", "drafter", "policy", "greedy",
                                             "eos_ids", "K"), donate_argnames=("state",))
def spec_loop_jit(params, dparams, state, temperature, top_k, top_p, max_steps=None, *,
                  graphdef, drafter, policy, greedy, eos_ids, K):
    target = nnx.merge(graphdef, params)
    return spec_loop(target, drafter, dparams, policy, state, greedy, temperature, top_k, top_p,
                     eos_ids, K, max_steps)
