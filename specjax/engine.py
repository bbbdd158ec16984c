"""Generation on the host: batching, buckets, compiled programs, results.

``generate`` is the public entry point. It builds the static :class:`specjax.loop.DecodeLoop`
of the run (:func:`make_loop`), pads each batch to its buckets, runs the compiled prefill and
loop (compiled ahead of time and cached, so compile time is reported apart) and turns the
final state into a :class:`GenerationResult`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
import warnings
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.buckets import (  # noqa: F401  (bucket_length re-exported)
    bucket_length, cache_length, prefill_length)
from specjax.distributed import to_host
from specjax.fingerprint import exact_products_of
from specjax.loop import DecodeLoop, LoopState, prefill_jit, run_jit  # noqa: F401
from specjax.models.llama import Llama
from specjax.models.numerics import compiler_options
from specjax.sampling import SamplingParams
from specjax.errors import GenerationError
from specjax.verifiers import SamplingArrays


@dataclasses.dataclass
class GenerationResult:
    """What :func:`generate` returns for a list of prompts (one entry per prompt).

    ``extra`` holds, for speculative runs, per-prompt ``drafted`` / ``accepted`` counts,
    their per-position lists and ``idle_steps`` (steps in which no row of the batch drafted,
    run as plain forwards), and for every run ``method`` (the drafter, policy and verifier
    names) and ``exact`` (False only when a lossy acceptance rule ran: its tokens are not
    plain decoding's).
    """

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

    @property
    def exact(self) -> bool:
        """True unless a lossy acceptance rule produced the tokens."""
        return bool(self.extra.get("exact", True))


# ----------------------------------------------------------------------------- compiled steps

_prefill_jit = prefill_jit  # the two compiled programs (names kept for tests and tools)
_run_jit = run_jit


class _Compiled:
    """Ahead-of-time compiled executables keyed by the loop object, static sizes and argument
    shapes, so compile time is measured apart from run time.

    At most ``max_entries`` programs are kept (default 64, or ``SPECJAX_MAX_COMPILED``): past
    that the least recently used quarter is dropped, with JAX's own caches. XLA:CPU keeps each
    executable's memory mappings, and a process that had compiled ~120 SmolLM2 programs (14
    methods, 7 prompt lengths) died in its next compile ("LLVM ERROR: Unable to allocate
    section memory", 2026-11-26); a dropped program compiles again when next needed, and that
    time is reported as compile time like any other."""

    def __init__(self, max_entries: int | None = None):
        if max_entries is None:
            raw = os.environ.get("SPECJAX_MAX_COMPILED", "64")
            try:
                max_entries = int(raw)
            except ValueError:
                raise GenerationError(f"SPECJAX_MAX_COMPILED must be an integer >= 1, got "
                                      f"{raw!r}") from None
        if max_entries < 1:
            raise GenerationError(f"at least one compiled program must be kept, got "
                                  f"max_entries={max_entries}")
        self.max_entries = max_entries
        self._cache: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.evicted = 0  # programs dropped so far (for tests and diagnostics)

    def get(self, fn, loop: DecodeLoop, args: tuple, statics: dict):
        def sig(x):
            if not hasattr(x, "shape"):
                return x
            return (tuple(x.shape), str(x.dtype), str(getattr(x, "sharding", "")))

        leaves, tree = jax.tree.flatten(args)
        key = (id(fn), loop, tuple(sorted(statics.items())), tree,
               tuple(sig(x) for x in leaves))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key], 0.0
        if len(self._cache) >= self.max_entries:
            keep = max(1, (3 * self.max_entries) // 4) - 1  # room for the new one
            while len(self._cache) > keep:
                self._cache.popitem(last=False)
                self.evicted += 1
            jax.clear_caches()
        t0 = time.perf_counter()
        lowered = fn.lower(loop, *args, **statics)
        opts = compiler_options(getattr(loop, "exact", False))
        compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
        dt = time.perf_counter() - t0
        self._cache[key] = compiled
        return compiled, dt


COMPILED = _Compiled()


def release_compiled() -> None:
    """Drops every compiled program (the engine's AOT cache and JAX's caches). XLA:CPU keeps
    each executable's memory mappings: a process that compiles hundreds of decode loops (a test
    run, a measurement over many precisions) has run out of them inside a later compile."""
    COMPILED._cache.clear()
    jax.clear_caches()


def call_compiled(fn, loop: DecodeLoop, *args, **statics):
    """Calls ``fn(loop, *args, **statics)`` through the AOT cache; returns (result,
    compile_seconds)."""
    compiled, dt = COMPILED.get(fn, loop, args, statics)
    return compiled(*args), dt


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


def make_loop(model: Llama, *, drafter=None, policy=None, verifier=None, greedy: bool = True,
              eos_ids: Sequence[int] = ()) -> DecodeLoop:
    """The static loop object of a run: defaults filled in (fixed policy ``k =
    drafter.max_k``; the exact verifier for greedy or sampling, chain or tree) and checked."""
    from specjax import verifiers
    from specjax.drafters.base import drafter_features
    from specjax.errors import DrafterError, PolicyError
    from specjax.policies.fixed import FixedPolicy

    graphdef, _ = nnx.split(model)
    eos_ids = tuple(int(e) for e in eos_ids)
    if drafter is None:
        if policy is not None:
            raise GenerationError("a policy needs a drafter")
        if verifier not in (None, "exact"):
            raise GenerationError(f"verifier {verifier!r} needs a drafter: plain decoding "
                                  "verifies nothing")
        return DecodeLoop(graphdef=graphdef, greedy=greedy, eos_ids=eos_ids, exact=model.exact)
    policy = policy if policy is not None else FixedPolicy(int(drafter.max_k))
    if policy.max_k != drafter.max_k:
        raise DrafterError(f"policy {policy.name!r} drafts up to {policy.max_k} tokens but the "
                           f"drafter {drafter.name!r} up to {drafter.max_k}: build the policy "
                           "with the drafter's max_k")
    drafter_features(drafter).check(model.cfg.num_layers)
    chain = getattr(drafter, "tree", None) is None
    if "kld" in getattr(policy, "signals", ()) and (drafter.deterministic or not chain):
        raise PolicyError(f"policy {policy.name!r} reads the divergence between the target's "
                          f"and the draft's distributions: it needs a chain drafter with a "
                          f"draft distribution (draft_model, early_exit, layer_skip, eagle, "
                          f"medusa, hydra as chains), not {drafter.name!r}"
                          + ("" if chain else " drafting a tree"))
    verifier = verifiers.resolve(verifier, greedy, chain)
    return DecodeLoop(graphdef=graphdef, drafter=drafter, policy=policy, verifier=verifier,
                      greedy=greedy, eos_ids=eos_ids, verify_buckets=_verify_bucket_mode(),
                      exact=model.exact, idle_skip=_idle_steps_on())


IDLE_ENV = "SPECJAX_IDLE_STEPS"


def _idle_steps_on() -> bool:
    """``$SPECJAX_IDLE_STEPS``: ``on`` (default) or ``off``. Off, a step where no row drafts
    verifies the pending token alone instead of running as an idle step (a plain forward and
    the drafter's ``skip``; ``DecodeLoop.idle_skip``): same outputs, drafts and forwards, to
    time what idle steps save (``scripts/ab_methods.py``'s ``@noidle``)."""
    mode = os.environ.get(IDLE_ENV, "on").strip().lower() or "on"
    if mode not in ("on", "off"):
        raise GenerationError(f"{IDLE_ENV} must be on or off, got {mode!r}")
    return mode == "on"


@contextlib.contextmanager
def idle_steps(on: bool):
    """Loops built inside the block run with idle steps on or off (``SPECJAX_IDLE_STEPS``,
    restored after)."""
    old = os.environ.get(IDLE_ENV)
    os.environ[IDLE_ENV] = "on" if on else "off"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(IDLE_ENV, None)
        else:
            os.environ[IDLE_ENV] = old


def _verify_bucket_mode() -> str:
    """``$SPECJAX_VERIFY_BUCKETS``: ``all`` (default) or ``max`` (see ``DecodeLoop``)."""
    mode = os.environ.get("SPECJAX_VERIFY_BUCKETS", "all").strip().lower() or "all"
    if mode not in ("all", "max"):
        raise GenerationError(f"SPECJAX_VERIFY_BUCKETS must be all or max, got {mode!r}")
    return mode


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
    mesh: jax.sharding.Mesh | None = None,
) -> GenerationResult:
    """Generates continuations of token-id prompts.

    Args:
      model: the target model.
      prompts: list of token-id lists (chat template already applied if wanted).
      max_new_tokens: budget of new tokens per prompt (EOS or a full cache stop earlier). It
        is an array inside the compiled loop: budgets that fit the same cache length share
        one program.
      sampling: :class:`SamplingParams` (default greedy).
      eos_ids: token ids that end a sequence (the EOS token is kept in the output).
      batch_size: prompts decoded together (default: all at once).
      cache_len: static KV-cache length (default :func:`specjax.buckets.cache_length` of the
        batch's longest prompt: its cache bucket + max_new_tokens, rounded up to 64). A prompt
        longer than the cache is an error; generation that reaches the end of the cache stops with
        ``stop_reason == "cache_full"``.
      drafter: a drafter (``specjax.drafters.make(name, lm, ...)``); ``None`` = plain decoding.
      verifier: the acceptance rule: ``None`` / ``"exact"`` (greedy verification when greedy,
        lossless speculative sampling otherwise: both reproduce plain decoding exactly), a
        registered name (``specjax methods`` lists them; lossy ones are reported as such in
        ``result.extra["exact"]``) or a verifier object.
      policy: draft-length policy (default: fixed ``k = drafter.max_k``).
      progress: called with the number of prompts finished after each batch.
      mesh: a ``jax.sharding.Mesh`` (:func:`specjax.mesh.make_mesh`) to decode on: the rows
        of each batch are split over its ``data`` axis (the batch is padded to a multiple of
        it), weights replicated; the loop stays one compiled program and every row gets
        exactly what it gets alone. A ``model`` axis larger than 1 (tensor parallelism) is
        refused for now.
    """
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
    place = None
    if mesh is not None:
        from specjax.mesh import data_parallel

        bs, place = data_parallel(mesh, bs)
    greedy = sampling.greedy
    loop = make_loop(model, drafter=drafter, policy=policy, verifier=verifier, greedy=greedy,
                     eos_ids=eos_ids)
    off = drafting_off(loop)
    if off is not None:  # the policy would never draft: plain decoding is what it runs
        warnings.warn(f"{drafter.name} with policy {loop.policy.name}: {off}; decoding plainly",
                      DraftingOffWarning, stacklevel=2)
        res = generate(model, prompts, max_new_tokens=max_new_tokens, sampling=sampling,
                       eos_ids=eos_ids, batch_size=batch_size, cache_len=cache_len,
                       progress=progress, mesh=mesh)
        n, K = len(res.tokens), int(drafter.max_k)
        res.extra.update(describe_loop(loop))
        res.extra.update({"exact": True, "drafting": f"off: {off}", "drafted": [0] * n,
                          "accepted": [0] * n, "drafted_at": [[0] * K for _ in range(n)],
                          "accepted_at": [[0] * K for _ in range(n)],
                          "idle_steps": [0] * n})
        if getattr(drafter, "observe", None) is not None:  # it learns from outputs all the same
            drafter.observe(prompts, res.tokens)
        return res
    _, params = nnx.split(model)
    if getattr(drafter, "begin_call", None) is not None:
        drafter.begin_call()  # what a drafter carries within one call starts afresh
    # block: a host-to-device copy of what the drafter learnt (a datastore, a suffix cache)
    # would otherwise finish inside the timed prefill
    dparams = jax.block_until_ready(drafter.params()) if drafter is not None else None
    arrays = SamplingArrays(temperature=jnp.float32(sampling.temperature if not greedy else 1.0),
                            top_k=jnp.int32(sampling.top_k), top_p=jnp.float32(sampling.top_p))
    base_key = jax.random.key_data(jax.random.key(sampling.seed))
    if place is not None:  # weights by the sharding table (specjax.sharding)
        from specjax.sharding import cache_sharding, check_plan, kernel_mesh

        check_plan(cfg, mesh)
        loop = dataclasses.replace(loop, cache_sharding=cache_sharding(cfg, mesh, batch=bs),
                                   kernel_mesh=kernel_mesh(cfg, mesh, batch=bs))
        params, dparams = place.weights((params, dparams), cfg)
        arrays = place.replicate(arrays)
    spec = loop.speculative
    res = GenerationResult([], [], [], [], [], 0.0, [])
    res.extra = describe_loop(loop)
    res.extra["numerics"] = getattr(model, "numerics", "fast")
    if (products := exact_products_of(model)) is not None:
        res.extra["exact_products"] = products
    if spec:
        res.extra.update({"drafted": [], "accepted": [], "drafted_at": [], "accepted_at": [],
                          "idle_steps": []})
    observe = getattr(drafter, "observe", None)  # a drafter that learns from outputs
    carry_over = getattr(drafter, "carry_over", None)  # one that keeps its loop state
    # per-row counters of the drafter's and the policy's own (suffix hits, pearl's rounds)
    stats = [(fn, field) for fn, field in (
        (getattr(drafter, "stats", None), "draft_state"),
        (getattr(loop.policy, "stats", None) if spec else None, "policy_state")) if fn]
    for start in range(0, len(prompts), bs):
        if (observe is not None or carry_over is not None) and start > 0:
            # what it learnt from the last batch
            dparams = jax.block_until_ready(drafter.params())
            if place is not None:
                dparams = place.weights(dparams, cfg)
        chunk = prompts[start:start + bs]
        n_real = len(chunk)
        rows = chunk + [chunk[0]] * (bs - n_real)  # pad the batch with dummy rows (budget 0)
        longest = max(len(p) for p in rows)
        P = prefill_length(longest)
        S = cache_len or cache_length(longest, max_new_tokens)
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
        toks, lens_in, max_new_in = jnp.asarray(toks), jnp.asarray(lens), jnp.asarray(max_new)
        if place is not None:
            toks, lens_in, max_new_in, keys = place.rows((toks, lens_in, max_new_in, keys))
        t0 = time.perf_counter()
        state, c1 = call_compiled(_prefill_jit, loop, params, dparams, toks, lens_in,
                                  max_new_in, keys, arrays, cache_len=S)
        t1 = time.perf_counter()
        jax.block_until_ready(state)
        t_prefill = time.perf_counter() - t1 + (t1 - t0 - c1)
        t2 = time.perf_counter()
        state, c2 = call_compiled(_run_jit, loop, params, dparams, state, arrays)
        # to_host: arrays that span hosts (a multi-host mesh) are gathered to every process
        seq, seq_len, lengths = to_host((state.seq, state.seq_len, state.cache.lengths))
        t_decode = time.perf_counter() - t2 - c2
        mt = to_host(state.metrics)
        if spec:
            for i in range(n_real):
                res.extra["drafted"].append(int(mt.drafted[i]))
                res.extra["accepted"].append(int(mt.accepted[i]))
                res.extra["drafted_at"].append(np.asarray(mt.drafted_at[i]).tolist())
                res.extra["accepted_at"].append(np.asarray(mt.accepted_at[i]).tolist())
                res.extra["idle_steps"].append(int(mt.idle[i]))
        for fn, field in stats:
            for name, vals in to_host(fn(getattr(state, field))).items():
                res.extra.setdefault(name, []).extend(int(v) for v in vals[:n_real])
        res.compile_s += c1 + c2
        for i in range(n_real):
            toks_i = seq[i, lens[i]:seq_len[i]].tolist()
            res.tokens.append(toks_i)
            res.prompt_tokens.append(rows[i])
            res.target_forwards.append(int(mt.forwards[i]))
            res.wall_s.append(t_prefill + t_decode)
            res.prefill_s.append(t_prefill)
            if toks_i and toks_i[-1] in loop.eos_ids:
                reason = "eos"
            elif len(toks_i) >= max_new_tokens:
                reason = "max_new_tokens"
            elif lengths[i] >= S:
                reason = "cache_full"
            else:
                reason = "unknown"
            res.stop_reason.append(reason)
        if observe is not None:
            observe(rows[:n_real], res.tokens[-n_real:])
        if carry_over is not None:
            carry_over(state.draft_state)
        if progress is not None:
            progress(n_real)
    return res


class DraftingOffWarning(UserWarning):
    """A speculative run decodes plainly: its policy says it would never draft (see
    :func:`drafting_off`)."""


def drafting_off(loop: DecodeLoop) -> str | None:
    """Why ``loop``'s policy will not draft in any step of a run (its optional
    ``never_drafts()`` hook: a cost-aware policy whose measured costs say that no draft pays
    at the acceptance estimate it starts from, which does not move while nothing is drafted;
    e.g. the EAGLE-3 head at batch 4 and 16 on a 2-core CPU), or None. :func:`generate` then
    runs plain decoding, which is what such a loop would compute at a higher price (every
    step an idle step): the same tokens (greedy) or the same distribution (sampling),
    ``result.extra["drafting"]`` saying so."""
    hook = getattr(loop.policy, "never_drafts", None) if loop.speculative else None
    return hook() if hook is not None else None


def describe_loop(loop: DecodeLoop) -> dict:
    """Names of the loop's components and whether its output is exact."""
    if not loop.speculative:
        return {"method": "ar", "exact": True}
    return {"method": loop.drafter.name, "policy": loop.policy.name,
            "verifier": loop.verifier.name, "exact": bool(loop.verifier.exact)}
