"""Generation: prefill, then one ``lax.while_loop`` inside one ``jax.jit``.

``generate`` is the public entry point. Plain autoregressive decoding is implemented here; the
speculative engine reuses the same prefill, stopping rules, buckets and result types.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.cache import KVCache
from specjax.models.llama import Llama
from specjax.sampling import SamplingParams, process_logits
from specjax.errors import GenerationError  # noqa: F401  (re-exported)


# ----------------------------------------------------------------------------- state


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
    """Loop state of plain decoding (all arrays, batch-major).

    Attributes:
      cache: target KV cache; ``cache.lengths[b]`` = tokens of row b already in the cache.
      last: ``int32[B]`` the newest token of each row, not yet in the cache.
      out: ``int32[B, N]`` generated tokens (N = static output capacity).
      n_out: ``int32[B]`` how many of ``out`` are valid.
      max_new: ``int32[B]`` per-row budget of new tokens.
      done: ``bool[B]`` the row has stopped (EOS, budget or full cache).
      forwards: ``int32[B]`` target forwards that produced this row's tokens (prefill included).
      keys: ``uint32[B, 2]`` per-row PRNG keys (a row samples the same alone or in a batch).
      step: ``int32[]`` loop iterations so far.
    """

    cache: KVCache
    last: jax.Array
    out: jax.Array
    n_out: jax.Array
    max_new: jax.Array
    done: jax.Array
    forwards: jax.Array
    keys: jax.Array
    step: jax.Array


@dataclasses.dataclass
class GenerationResult:
    """What :func:`generate` returns for a list of prompts (one entry per prompt)."""

    tokens: list[list[int]]
    prompt_tokens: list[list[int]]
    target_forwards: list[int]
    wall_s: list[float]  # prefill + decode of the batch the prompt was in
    prefill_s: list[float]
    compile_s: float  # compilation time, kept out of wall_s
    stop_reason: list[str]
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def new_tokens(self) -> list[int]:
        return [len(t) for t in self.tokens]


# ----------------------------------------------------------------------------- helpers


def bucket_length(n: int, minimum: int = 16) -> int:
    """Coarse prompt bucket that sizes the KV cache (so the decode loop, the expensive compile,
    is shared by every prompt in it): powers of two up to 256, then multiples of 256."""
    if n <= minimum:
        return minimum
    if n <= 256:
        return 1 << (n - 1).bit_length()
    return -(-n // 256) * 256


def prefill_length(n: int, minimum: int = 16) -> int:
    """Padded prompt length of the prefill forward, finer than :func:`bucket_length` (padding
    costs prefill compute in proportion; a prefill program compiles quickly): powers of two up
    to 64, multiples of 16 up to 256, of 32 up to 512, then of 128. Never above
    ``bucket_length(n)``."""
    if n <= 64:
        p = max(minimum, 1 << (n - 1).bit_length())
    elif n <= 256:
        p = -(-n // 16) * 16
    elif n <= 512:
        p = -(-n // 32) * 32
    else:
        p = -(-n // 128) * 128
    return min(p, bucket_length(n, minimum))


def _choose(logits, keys, n_out, greedy, temperature, top_k, top_p):
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    lp = process_logits(logits, temperature, top_k, top_p)
    step_keys = jax.vmap(jax.random.fold_in)(keys, n_out)
    return jax.vmap(lambda k, l: jax.random.categorical(k, l))(step_keys, lp).astype(jnp.int32)


def _is_eos(tok, eos_ids: tuple[int, ...]):
    if not eos_ids:
        return jnp.zeros_like(tok, dtype=bool)
    return jnp.any(tok[:, None] == jnp.asarray(eos_ids, jnp.int32)[None, :], axis=-1)


def prefill(model: Llama, tokens, lengths, cache_len: int, max_out: int, max_new, keys,
            greedy: bool, temperature, top_k, top_p, eos_ids: tuple[int, ...]) -> DecodeState:
    """Runs the prompt through the model and picks each row's first new token."""
    B, P = tokens.shape
    cache = model.init_cache(B, cache_len)
    positions = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
    out = model(tokens, positions, cache, logits_index=(lengths - 1)[:, None], prefix_empty=True)
    cache = out.cache.with_lengths(lengths)
    first = _choose(out.logits[:, 0], keys, jnp.zeros((B,), jnp.int32), greedy, temperature,
                    top_k, top_p)
    live = max_new > 0
    buf = jnp.zeros((B, max_out), jnp.int32).at[:, 0].set(jnp.where(live, first, 0))
    n_out = live.astype(jnp.int32)
    done = (~live) | _is_eos(first, eos_ids) | (n_out >= max_new) | (lengths >= cache_len)
    return DecodeState(cache=cache, last=first, out=buf, n_out=n_out, max_new=max_new,
                       done=done, forwards=n_out, keys=keys, step=jnp.zeros((), jnp.int32))


def decode_loop(model: Llama, state: DecodeState, greedy: bool, temperature, top_k, top_p,
                eos_ids: tuple[int, ...]) -> DecodeState:
    """Plain autoregressive decoding: one token per row per iteration, until every row stops."""
    S = state.cache.max_len
    B, N = state.out.shape

    def cond(s: DecodeState):
        return jnp.any(~s.done) & (s.step < N)

    def body(s: DecodeState):
        live = ~s.done
        o = model(s.last[:, None], s.cache.lengths[:, None], s.cache)
        cache = o.cache.advance(live.astype(jnp.int32))
        nxt = _choose(o.logits[:, 0], s.keys, s.n_out, greedy, temperature, top_k, top_p)
        idx = jnp.where(live, s.n_out, N)  # N: out of range, dropped
        buf = s.out.at[jnp.arange(B), idx].set(nxt, mode="drop")
        n_out = s.n_out + live
        done = s.done | _is_eos(nxt, eos_ids) | (n_out >= s.max_new) | (cache.lengths >= S)
        return DecodeState(cache=cache, last=jnp.where(live, nxt, s.last), out=buf, n_out=n_out,
                           max_new=s.max_new, done=done, forwards=s.forwards + live, keys=s.keys,
                           step=s.step + 1)

    return jax.lax.while_loop(cond, body, state)


# ----------------------------------------------------------------------------- compiled steps


@functools.partial(jax.jit, static_argnames=("graphdef", "cache_len", "max_out", "greedy", "eos_ids"))
def _prefill_jit(params, tokens, lengths, max_new, keys, temperature, top_k, top_p, *,
                 graphdef, cache_len, max_out, greedy, eos_ids):
    model = nnx.merge(graphdef, params)
    return prefill(model, tokens, lengths, cache_len, max_out, max_new, keys, greedy,
                   temperature, top_k, top_p, eos_ids)


@functools.partial(jax.jit, static_argnames=("graphdef", "greedy", "eos_ids"),
                   donate_argnames=("state",))
def _decode_jit(params, state, temperature, top_k, top_p, *, graphdef, greedy, eos_ids):
    model = nnx.merge(graphdef, params)
    return decode_loop(model, state, greedy, temperature, top_k, top_p, eos_ids)


class _Compiled:
    """Ahead-of-time compiled executables keyed by shapes, so compile time is measured apart."""

    def __init__(self):
        self._cache: dict[Any, Any] = {}

    def get(self, fn, args: tuple, kwargs: dict):
        def sig(x):
            return (tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") else x

        leaves, tree = jax.tree.flatten((args, {k: v for k, v in kwargs.items()
                                                if k not in fn_static(fn)}))
        key = (id(fn), tree, tuple(sig(x) for x in leaves),
               tuple((k, kwargs[k]) for k in sorted(fn_static(fn)) if k in kwargs))
        if key in self._cache:
            return self._cache[key], 0.0
        t0 = time.perf_counter()
        compiled = fn.lower(*args, **kwargs).compile()
        dt = time.perf_counter() - t0
        self._cache[key] = compiled
        return compiled, dt


def fn_static(fn) -> tuple[str, ...]:
    if id(fn) not in _STATICS:
        _register_spec_statics()
    return _STATICS.get(id(fn), ())


_STATICS = {
    id(_prefill_jit): ("graphdef", "cache_len", "max_out", "greedy", "eos_ids"),
    id(_decode_jit): ("graphdef", "greedy", "eos_ids"),
}


def _register_spec_statics():
    from specjax.speculative import spec_loop_jit, spec_prefill_jit

    common = ("graphdef", "drafter", "policy", "greedy", "eos_ids", "K")
    _STATICS[id(spec_prefill_jit)] = common + ("cache_len",)
    _STATICS[id(spec_loop_jit)] = common
COMPILED = _Compiled()


def call_compiled(fn, *args, **kwargs):
    """Calls ``fn`` through the AOT cache; returns (result, compile_seconds)."""
    compiled, dt = COMPILED.get(fn, args, kwargs)
    statics = fn_static(fn)
    dyn = {k: v for k, v in kwargs.items() if k not in statics}
    return compiled(*args, **dyn), dt


# ----------------------------------------------------------------------------- public API


def validate_prompts(prompts: Sequence[Sequence[int]], vocab_size: int, limit: int,
                     limit_what: str) -> list[list[int]]:
    if isinstance(prompts, (str, bytes)):
        raise GenerationError("prompts must be token ids (a list of lists of ints), not text; "
                              "encode them with the tokenizer first")
    out = []
    for i, p in enumerate(prompts):
        p = [int(t) for t in p]
        if not p:
            raise GenerationError(f"prompt {i} is empty: at least one token is needed")
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise GenerationError(
                f"prompt {i} has token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}"
            )
        if len(p) > limit:
            raise GenerationError(
                f"prompt {i} has {len(p)} tokens, longer than the {limit_what} ({limit}); "
                "shorten it or raise the limit"
            )
        out.append(p)
    if not out:
        raise GenerationError("no prompts given")
    return out


def generate(
    model: Llama,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int = 128,
    sampling: SamplingParams | None = None,
    eos_ids: Sequence[int] = (),
    batch_size: int | None = None,
    cache_len: int | None = None,
    drafter=None,
    verifier=None,
    policy=None,
    progress: Callable[[int], None] | None = None,
) -> GenerationResult:
    """Generates continuations of token-id prompts.

    Args:
      model: the target model.
      prompts: list of token-id lists (chat template already applied if wanted).
      max_new_tokens: budget of new tokens per prompt (EOS or a full cache stop earlier).
      sampling: :class:`SamplingParams` (default greedy).
      eos_ids: token ids that end a sequence (the EOS token is kept in the output).
      batch_size: prompts decoded together (default: all at once).
      cache_len: static KV-cache length (default: the prompt's cache bucket, see
        :func:`bucket_length`, + max_new_tokens, rounded up to 64). A prompt longer than the
        cache is an error; generation that reaches the end of the cache stops with
        ``stop_reason == "cache_full"``.
      drafter: a drafter (``specjax.drafters.make(name, lm, ...)``); ``None`` = plain decoding.
      verifier: ``None``/``"exact"``: greedy verification when greedy, lossless speculative
        sampling otherwise (both reproduce plain decoding's output distribution exactly).
      policy: draft-length policy (default: fixed ``k = drafter.max_k``).
      progress: called with the number of prompts finished after each batch.
    """
    if verifier not in (None, "exact"):
        raise GenerationError(
            f"unknown verifier {verifier!r}: the exact rule (greedy or lossless speculative "
            "sampling, chosen by the sampling parameters) is the only one available"
        )
    if policy is not None and drafter is None:
        raise GenerationError("a policy needs a drafter")
    sampling = sampling or SamplingParams()
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise GenerationError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    cfg = model.cfg
    if cache_len is not None and (not isinstance(cache_len, int) or cache_len < 2):
        raise GenerationError(f"cache_len must be an integer >= 2, got {cache_len!r}")
    limit = cache_len if cache_len is not None else cfg.max_position_embeddings
    what = "cache" if cache_len is not None else "model's context length"
    prompts = validate_prompts(prompts, cfg.vocab_size, limit, what)
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer))
                                   or isinstance(batch_size, bool) or batch_size < 1):
        raise GenerationError(f"batch_size must be an integer >= 1 (or None: all prompts in "
                              f"one batch), got {batch_size!r}")
    bs = int(batch_size or len(prompts))
    eos_ids = tuple(int(e) for e in eos_ids)
    graphdef, params = nnx.split(model)
    greedy = sampling.greedy
    temp = jnp.float32(sampling.temperature if not greedy else 1.0)
    top_k = jnp.int32(sampling.top_k)
    top_p = jnp.float32(sampling.top_p)
    base_key = jax.random.key_data(jax.random.key(sampling.seed))

    spec = drafter is not None
    if spec:
        from specjax.policies.fixed import FixedPolicy
        from specjax.speculative import spec_loop_jit, spec_prefill_jit

        K = int(drafter.max_k)
        policy = policy if policy is not None else FixedPolicy(K)
        dparams = drafter.params()
    res = GenerationResult([], [], [], [], [], 0.0, [])
    if spec:
        res.extra = {"drafted": [], "accepted": [], "drafted_at": [], "accepted_at": []}
    for start in range(0, len(prompts), bs):
        chunk = prompts[start:start + bs]
        n_real = len(chunk)
        rows = chunk + [chunk[0]] * (bs - n_real)  # pad the batch with dummy rows (budget 0)
        longest = max(len(p) for p in rows)
        P = prefill_length(longest)
        S = cache_len or -(-(bucket_length(longest) + max_new_tokens) // 64) * 64
        S = min(S, max(cfg.max_position_embeddings, P))
        if P > S:  # bucket padding past the cache: pad to the cache exactly
            P = S
        toks = np.zeros((bs, P), np.int32)
        for i, p in enumerate(rows):
            toks[i, :len(p)] = p
        lens = np.array([len(p) for p in rows], np.int32)
        max_new = np.array([max_new_tokens] * n_real + [0] * (bs - n_real), np.int32)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(
            jax.random.wrap_key_data(base_key), jnp.arange(start, start + bs))
        keys = jax.random.key_data(keys)
        t0 = time.perf_counter()
        if spec:
            common = dict(graphdef=graphdef, drafter=drafter, policy=policy, greedy=greedy,
                          eos_ids=eos_ids, K=K)
            state, c1 = call_compiled(
                spec_prefill_jit, params, dparams, jnp.asarray(toks), jnp.asarray(lens),
                jnp.asarray(max_new), keys, temp, top_k, top_p, cache_len=S, **common)
        else:
            state, c1 = call_compiled(
                _prefill_jit, params, jnp.asarray(toks), jnp.asarray(lens),
                jnp.asarray(max_new), keys, temp, top_k, top_p, cache_len=S,
                max_out=max_new_tokens, greedy=greedy, eos_ids=eos_ids, graphdef=graphdef)
        t1 = time.perf_counter()
        jax.block_until_ready(state)
        t_prefill = time.perf_counter() - t1 + (t1 - t0 - c1)
        t2 = time.perf_counter()
        if spec:
            state, c2 = call_compiled(spec_loop_jit, params, dparams, state, temp, top_k, top_p,
                                      **common)
            seq = np.asarray(state.seq)
            seq_len = np.asarray(state.seq_len)
            out = np.zeros((bs, max_new_tokens), np.int32)
            n_out = seq_len - lens
            for i in range(bs):
                out[i, :n_out[i]] = seq[i, lens[i]:seq_len[i]]
            mt = jax.device_get(state.metrics)
            fw = np.asarray(mt.forwards)
        else:
            state, c2 = call_compiled(_decode_jit, params, state, temp, top_k, top_p,
                                      greedy=greedy, eos_ids=eos_ids, graphdef=graphdef)
            out = np.asarray(state.out)
            n_out = np.asarray(state.n_out)
            fw = np.asarray(state.forwards)
        lengths = np.asarray(state.cache.lengths)
        t_decode = time.perf_counter() - t2 - c2
        if spec:
            for i in range(n_real):
                res.extra["drafted"].append(int(mt.drafted[i]))
                res.extra["accepted"].append(int(mt.accepted[i]))
                res.extra["drafted_at"].append(np.asarray(mt.drafted_at[i]).tolist())
                res.extra["accepted_at"].append(np.asarray(mt.accepted_at[i]).tolist())
        res.compile_s += c1 + c2
        for i in range(n_real):
            toks_i = out[i, :n_out[i]].tolist()
            res.tokens.append(toks_i)
            res.prompt_tokens.append(rows[i])
            res.target_forwards.append(int(fw[i]))
            res.wall_s.append(t_prefill + t_decode)
            res.prefill_s.append(t_prefill)
            if toks_i and toks_i[-1] in eos_ids:
                reason = "eos"
            elif len(toks_i) >= max_new_tokens:
                reason = "max_new_tokens"
            elif lengths[i] >= S:
                reason = "cache_full"
            else:
                reason = "unknown"
            res.stop_reason.append(reason)
        if progress is not None:
            progress(n_real)
    return res
