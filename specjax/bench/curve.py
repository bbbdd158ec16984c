"""``specjax bench --verify-curve``: the cost of verifying k tokens against k = 1.

:func:`verify_curve` times a lone jitted target forward over k tokens on a filled cache;
:func:`verify_curve_in_loop` (``--in-loop``) times whole steps of the speculative loop with
k - 1 drafted tokens (drafted by :class:`_JunkDrafter`). Both give the JSON layout the
adaptive policy reads as its cost curve.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from specjax.buckets import PROBE_CACHE
from specjax.errors import BenchError
from specjax.sampling import greedy_token


def verify_curve(lm, ks=(1, 2, 4, 8, 16, 32, 64), batches=(1, 4, 16), prefix: int = 256,
                 repeats: int = 7, progress: Callable | None = None,
                 cache_len: int | None = None) -> dict:
    """Time of one target forward over k new tokens (per batch size), relative to k = 1.

    The forward runs as in verification: a block of k tokens on top of a ``prefix``-token
    committed cache of ``cache_len`` positions (default ``prefix + max(ks)``; attention reads
    the whole static cache, masked, so its size is part of the price:
    scripts/verify_cost_vs_cache.py), cache donated (updated in place) as inside the decode
    loop.
    """
    S = prefix + max(ks) if cache_len is None else cache_len
    if S < prefix + max(ks):
        raise BenchError(f"cache_len {S} cannot hold the {prefix}-token prefix and a "
                         f"{max(ks)}-token block")
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    model = getattr(lm, "model", lm)  # a LoadedModel or a bare Llama
    graphdef, params = nnx.split(model)

    @functools.partial(jax.jit, donate_argnames=("cache",))
    def fwd(params, tokens, positions, cache):
        m = nnx.merge(graphdef, params)
        o = m(tokens, positions, cache)
        return greedy_token(o.logits), o.cache

    def prepare(B, k):
        """Compiles and warms the block of ``k`` tokens at batch ``B``; returns a timer of
        one forward (the cache stays donated from call to call)."""
        state = {"cache": model.init_cache(B, S).with_lengths(
            jnp.full((B,), prefix, jnp.int32))}
        toks = jnp.zeros((B, k), jnp.int32)
        pos = prefix + jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32)[None], (B, k))

        def one() -> float:
            t0 = time.perf_counter()
            a, state["cache"] = fwd(params, toks, pos, state["cache"])
            jax.block_until_ready(a)
            return time.perf_counter() - t0

        for _ in range(2):  # compile + warm-up
            one()
        return one

    out = {"ks": list(ks), "batches": list(batches), "prefix": prefix, "cache_len": S,
           "seconds": {}, "relative": {}, "interleaved": True}
    for B in batches:
        # the block sizes timed in rounds, in reverse order every other round: on a VM whose
        # speed drifts, timing each size's repeats back to back gave curves that were not
        # even monotone (a 4-token block at 1.93 one-token forwards, an 8-token one at 1.53)
        timers = {k: prepare(B, k) for k in ks}
        ts = {k: [] for k in ks}
        for r in range(repeats):
            for k in (ks if r % 2 == 0 else ks[::-1]):
                ts[k].append(timers[k]())
        secs = [float(np.median(ts[k])) for k in ks]
        if progress:
            progress(len(ks))
        out["seconds"][str(B)] = secs
        out["relative"][str(B)] = [x / secs[0] for x in secs]
    return out


def _fill_curve(out: dict, ks, batches, time_one, progress) -> dict:
    """Fills ``out["seconds"]`` and ``out["relative"]`` (to the first k) per batch size with
    ``time_one(B, k)`` seconds."""
    for B in batches:
        secs = []
        for k in ks:
            secs.append(time_one(B, k))
            if progress:
                progress(1)
        out["seconds"][str(B)] = secs
        out["relative"][str(B)] = [s / secs[0] for s in secs]
    return out


@dataclasses.dataclass(frozen=True)
class _JunkDrafter:
    """Drafts ``n`` copies of one token every step (fewer when the engine asks for fewer; 0:
    a plain step inside the loop), the in-loop curve's probe: the target verifies an
    ``n + 1``-token block and, as the junk is almost never accepted, each step yields one
    token. ``max_k`` sets the engine's verify buckets, whatever ``n``."""

    max_k: int
    n: int
    token: int = 0
    name: str = "junk"
    deterministic: bool = True
    tree: None = None

    def __post_init__(self):
        if not 0 <= self.n <= self.max_k:
            raise BenchError(f"the junk drafter drafts 0..max_k ({self.max_k}) tokens, "
                             f"got {self.n}")

    def params(self):
        return None

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        return ()

    def propose(self, params, target, state, ctx, k, greedy, stop=None):
        import jax.numpy as jnp

        from specjax.tree import DraftTree

        B = ctx.seq.shape[0]
        return (DraftTree.chain(jnp.full((B, self.max_k), self.token, jnp.int32),
                                jnp.minimum(k, self.n)), state, ctx.target_cache)

    def update(self, params, state, ctx, n_acc, tree, path, features):
        return state


def seconds_per_forward(lm, drafter, prompt, batch: int, budgets: tuple[int, int],
                        cache_len: int, repeats: int, policy=None) -> float:
    """Seconds per target forward of the decode loop, greedy, ``batch`` rows of ``prompt``,
    under ``drafter`` (None: plain decoding) with ``policy`` (None: its default).

    Each repeat decodes two token budgets (``budgets``: short, long) with one cache length
    (one compiled program) and takes the difference of their decode times (prefill excluded)
    over the difference of their forwards, so the prefill and the shorter drafts of the last
    steps before a budget cancel; the median over ``repeats``, after a compiling run. The
    in-loop probes (:func:`verify_curve_in_loop`, :mod:`specjax.draft_costs`) time with it.
    """
    import numpy as np

    (ts,) = interleaved_seconds_per_forward(lm, [(drafter, policy)], prompt, batch, budgets,
                                            cache_len, repeats)
    return float(np.median(ts))


def interleaved_seconds_per_forward(lm, runs, prompt, batch: int, budgets: tuple[int, int],
                                    cache_len: int, repeats: int) -> list[list[float]]:
    """:func:`seconds_per_forward` of several ``(drafter, policy)`` runs, one list of
    ``repeats`` times per run: every run compiles first, then each repeat times every run in
    turn, so the drift of a machine's speed over the minutes of a measurement (10-20% between
    processes on the project's 2-core CPU) falls on all of them alike and the ratio of two runs
    within one repeat is steadier than the ratio of their medians; the order reverses every
    other repeat."""
    from specjax.engine import generate
    from specjax.sampling import SamplingParams

    def decode(run, n):
        drafter, policy = run
        r = generate(lm.model, [prompt] * batch, max_new_tokens=n, cache_len=cache_len,
                     sampling=SamplingParams(temperature=0.0), batch_size=batch,
                     drafter=drafter, policy=policy)
        return r.wall_s[0] - r.prefill_s[0], max(r.target_forwards)

    ts: list[list[float]] = [[] for _ in runs]
    for rep in range(repeats + 1):  # the first round compiles
        order = list(enumerate(runs))
        for i, run in (order[::-1] if rep % 2 else order):  # no run always goes first
            (t1, f1), (t2, f2) = decode(run, budgets[0]), decode(run, budgets[1])
            if rep:
                ts[i].append(max(t2 - t1, 1e-9) / max(f2 - f1, 1))
    return ts


def verify_curve_in_loop(lm, ks=(1, 2, 4, 8, 16, 17), batches=(1,), prefix: int = 256,
                         steps: int = 64, repeats: int = 5,
                         progress: Callable | None = None) -> dict:
    """Time of one step of the speculative loop whose verify block holds k tokens (k - 1
    drafted), relative to a step that drafts nothing: what the adaptive policy's cost curve
    stands for, measured where it is paid, with drafting, verification and commit included.

    The probe drafts junk (one fixed token), so each step yields one token. The engine
    drafts less in the last steps before the token budget, so each repeat decodes two budgets
    ``steps`` apart with the same tail (one cache size, one compiled program) and a step's
    time is the difference of their decode times over the difference of their forwards;
    median over ``repeats``, after a compiling run. The drafter's maximum is ``max(ks) - 1``
    (as an engine with ``k = max(ks) - 1``: its verify blocks are 1, 2, 4, ... and max(ks)
    tokens), so give the ks of that engine's buckets to time exactly its block sizes. Same
    JSON layout as :func:`verify_curve`, plus ``in_loop: true``.
    """
    from specjax.buckets import cache_length

    if max(ks) < 2:
        raise BenchError("the in-loop curve needs a k >= 2 (a drafted token)")
    K = max(ks) - 1
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(max(prefix, 1))]
    short, long = K + 2, K + 2 + steps  # token budgets: the same clipped tail
    cache_len = cache_length(len(prompt), long + 1)
    out = {"ks": list(ks), "batches": list(batches), "prefix": prefix, "seconds": {},
           "relative": {}, "in_loop": True, "steps": steps, "engine_k": K}

    def time_one(B, k):  # the engine's default policy asks for max_k every step
        return seconds_per_forward(lm, _JunkDrafter(max_k=K, n=k - 1), prompt, B,
                                   (short, long), cache_len, repeats)

    return _fill_curve(out, ks, batches, time_one, progress)


def step_curve_vs_plain(lm, ks=(1, 2, 4, 8, 16, 17), batches=(4,), prefix: int = 128,
                        repeats: int = 3, steps: int = 24, progress: Callable | None = None,
                        cache_len: int = PROBE_CACHE) -> dict:
    """Time of one step of the speculative loop whose verify block holds k tokens (k - 1
    junk drafts), relative to a step of plain decoding: the price of drafting ``k - 1``
    tokens against not drafting, for a drafter whose steps that draft nothing are idle steps
    (a plain forward: ``DecodeLoop.idle_skip``). ``relative[0]`` is 1 (k = 1: the idle step).
    Above batch 1 a draft-and-verify step costs more than a plain one even for a 1-token
    block (on the project's CPU at batch 4, 1.21 plain steps), which a curve relative to a
    one-token forward leaves out. Plain decoding and every k are timed in turn within each
    repeat (:func:`interleaved_seconds_per_forward`, two budgets ``steps`` apart, one cache
    size), each k's ratio taken within its repeat, the median over ``repeats``. Same JSON
    layout as :func:`verify_curve`, plus ``in_loop: true`` and ``against: "plain"``. The
    KV cache holds ``cache_len`` positions (more if the decoded tokens need them): a plain
    step reads all of it, so the ratios depend on it."""
    import numpy as np

    from specjax.buckets import cache_length

    ks = [int(k) for k in ks]
    if ks[0] != 1 or max(ks) < 2:
        raise BenchError(f"the in-loop step curve needs ks from 1 with a k >= 2, got {ks}")
    K = max(ks) - 1
    vocab = lm.model.cfg.vocab_size
    prompt = [(7 * i + 11) % vocab for i in range(max(prefix, 1))]
    budgets = (K + 2, K + 2 + steps)  # junk drafts: one token a step, the same clipped tail
    cache_len = max(int(cache_len), cache_length(len(prompt), budgets[1] + 1))
    out = {"ks": ks, "batches": list(batches), "prefix": prefix, "seconds": {},
           "relative": {}, "in_loop": True, "against": "plain", "steps": steps,
           "engine_k": K, "repeats": repeats, "cache_len": cache_len}
    runs = [(None, None)] + [(_JunkDrafter(max_k=K, n=k - 1), None) for k in ks[1:]]
    for B in batches:
        plain, *timed = interleaved_seconds_per_forward(lm, runs, prompt, B, budgets,
                                                        cache_len, repeats)
        out["seconds"][str(B)] = [float(np.median(t)) for t in [plain, *timed]]
        out["relative"][str(B)] = [1.0] + [
            float(np.median(np.asarray(t) / np.asarray(plain))) for t in timed]
        if progress:
            progress(len(ks))
    return out
