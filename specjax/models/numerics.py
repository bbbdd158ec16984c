"""Invariant ("exact") numerics: the logits of a token do not depend on how many other tokens
share its forward.

Speculative decoding verifies k drafted tokens in one forward; plain decoding runs one token
per forward; a batch runs many rows at once. In ``fast`` numerics these forwards reduce in
different orders (XLA picks a kernel by shape: a one-row product is a matrix-vector kernel, a
few rows another kernel, some row counts a third; attention over a verify block splits its
keys at the block start; a norm's sum is vectorised by shape), so the logits differ in the last
bits and, in bfloat16 or int8, now and then the argmax. ``exact`` numerics fix every order:

* **products** (:func:`row_plan`): XLA:CPU's batched matrix products sum every row in the same
  order for all row counts of one *class*; a one-row product and some row counts (measured:
  25-32, 49-64, 81-96, ... on this project's CPU) use other kernels. ``exact`` pads the rows of
  every float product to the nearest row count of the reference class. The classes are not
  assumed: :func:`row_count_invariant` measures them once per process on the running machine
  (a row count is accepted when every row of its product is bit-identical to that row
  computed in a two-row product). int8 products (``w8a8``) accumulate in int32 and are exact
  in any order, so they need no padding.
* **sums** (:func:`fixed_sum`): RMSNorm's mean and the softmax denominators are explicit
  pairwise trees of element-wise adds over fixed halves of the axis, independent of the other
  dimensions.
* **attention** (:func:`exact_attention`): a query at position ``p`` reads its keys in two
  fixed parts: the positions ``<= p - tail`` through one product over the whole cache row
  (padded to the reference row class; the same slots hold the same keys whether the query is
  decoded alone or verified in a block), and its last ``tail`` positions gathered in position
  order (a tree node's ancestors sit at scattered scratch slots, a decoded path at contiguous
  ones: gathered by rank both become the same list) and reduced by fixed element-wise trees.
* **prefill** (``prefix_empty``): a prefill only has to agree with other prefills (alone or
  batched, any padded prompt or cache length): nothing computes a prompt position through
  another kind of forward. Its products take the faster invariant form for many rows
  (:func:`specjax.models.llama.prefill_matmul`: XLA's own product padded to that product's
  class, kind ``"plain"``, in float32) and its attention sends every key through the product
  over the cache row (``exact_attention(..., prefill=True)``, no tail): on a 2-core CPU a
  768-token float32 prefill costs 1.86 s against fast numerics' 1.72 s (2.77 s in the
  decoding forms; docs/numerics.md).
* **rounding** (:data:`EXACT_COMPILER_OPTIONS`): every element-wise result is rounded to the
  compute dtype where the program says so. XLA may otherwise keep a bfloat16 intermediate in
  float32 inside a fusion (``xla_allow_excess_precision``, on by default), and which values
  stay wide depends on how the program was fused, which depends on its shapes: on an H100 a
  bfloat16 verify block of two tokens at batch 1 differed from one-token decoding in every
  layer's residual stream, keys and values (MLPs and attention alike) until the option was
  off (2026-11-28; batch 3 and 8 happened to fuse alike). Exact programs are compiled with
  it off, on every platform.

* **kernels** (opt-in, for GPUs and TPUs): with ``exact_products="pallas"``
  (:func:`exact_products`) the products and attention's cache-row part run batch-invariant
  Pallas kernels instead (:mod:`specjax.pallas_kernels.invariant_matmul`,
  :mod:`specjax.pallas_kernels.invariant_attention`): their tiles and summation orders depend
  on the shapes of the weights and heads only, so nothing is probed (docs/numerics.md).

What is by construction and what is measured: the trees, the int8 products and the gathered
tail are order-fixed by construction; that a float product's row is the same in every row
count of its class is a property of the platform's kernels, checked per process by the probe
and by the tests (``tests/test_numerics.py``) on the real model's shapes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from specjax import atomic
from specjax.cache import slots_of

NUMERICS = ("fast", "exact")

# XLA options of every program that runs a model in exact numerics (see the module doc,
# "rounding"): no float32 intermediates kept where the program rounds to bfloat16
EXACT_COMPILER_OPTIONS = {"xla_allow_excess_precision": False}


def compiler_options(exact: bool) -> dict | None:
    """The ``compiler_options`` of a program that runs a model in ``exact`` (True) or
    ``fast`` numerics (``jax.jit(..., compiler_options=)``, ``Lowered.compile(...)``)."""
    return dict(EXACT_COMPILER_OPTIONS) if exact else None

# positions at the end of every query's key list that exact attention reads by rank
# (element-wise, in position order); trees deeper than this are still correct but lose the
# invariance guarantee
EXACT_TAIL = 32
# how far past a row count the search for a reference-class row count may go
_MAX_PAD = 32
# the largest chunk tried when products must be split (row_plan)
_MAX_CHUNK = 64


# how an exact forward makes its products invariant (Llama.set_numerics)
PRODUCTS = ("xla", "pallas")
PRODUCTS_ENV = "SPECJAX_EXACT_PRODUCTS"


def exact_products(name: str | None = None) -> str:
    """The exact numerics' product kernel: ``name``, or ``$SPECJAX_EXACT_PRODUCTS`` when None,
    or ``"xla"`` (the backend's products padded to a measured row class, :func:`row_plan`).
    ``"pallas"``: the batch-invariant kernels (:mod:`specjax.pallas_kernels.invariant_matmul`,
    :mod:`specjax.pallas_kernels.invariant_attention`; Triton on GPU, Mosaic on TPU, the
    Pallas interpreter on CPU, where they are for tests only and warn: far slower than XLA)."""
    name = (os.environ.get(PRODUCTS_ENV, "") or "xla") if name is None else name
    if name not in PRODUCTS:
        raise ValueError(f"exact products must be one of {', '.join(PRODUCTS)}, got {name!r}"
                         + (f" (from ${PRODUCTS_ENV})" if name == os.environ.get(PRODUCTS_ENV)
                            else ""))
    if name == "pallas" and jax.default_backend() not in ("gpu", "tpu"):
        _warn_interpreted()
    return name


@functools.cache
def _warn_interpreted() -> None:
    warnings.warn(f"exact_products='pallas' on the {jax.default_backend()} backend runs the "
                  "Pallas kernels in their interpreter: correct, but 3-17x slower than XLA's "
                  "products in float32 and far slower in bfloat16 (it is meant for GPUs and "
                  "TPUs; 'xla' is the CPU's invariant path)", InvariantKernelWarning,
                  stacklevel=3)


class InvariantKernelWarning(UserWarning):
    """The batch-invariant Pallas kernels run interpreted (on a CPU): slow."""


def check_numerics(name: str) -> str:
    if name not in NUMERICS:
        raise ValueError(f"numerics must be one of {', '.join(NUMERICS)}, got {name!r}")
    return name


def fixed_sum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Sum over ``axis`` as a fixed pairwise tree of element-wise adds: halves while the
    length is even, then the remaining slices left to right. The order depends only on the
    axis length, never on the other dimensions or on the backend's reduction strategy."""
    axis = axis % x.ndim
    while x.shape[axis] > 1 and x.shape[axis] % 2 == 0:
        h = x.shape[axis] // 2
        x = (jax.lax.slice_in_dim(x, 0, h, axis=axis)
             + jax.lax.slice_in_dim(x, h, 2 * h, axis=axis))
    acc = jax.lax.index_in_dim(x, 0, axis=axis, keepdims=False)
    for i in range(1, x.shape[axis]):
        acc = acc + jax.lax.index_in_dim(x, i, axis=axis, keepdims=False)
    return acc


def cache_axis_sum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Sum over a cache axis whose length depends on the batch (a row's cache is as long as
    its batch's longest prompt needs): :func:`fixed_sum` over the axis zero-padded to the next
    power of two. Halving a power-of-two axis pairs entry ``i`` with ``i + n/2``, so zeros
    appended past a shorter power of two only add exact zeros until the axis is that short:
    the sum of a row is the same bits in a cache of any length, where :func:`fixed_sum`'s
    order depends on the length (896 halves to 7 slices, 256 to 1)."""
    axis = axis % x.ndim
    n = x.shape[axis]
    p = 1 << max(n - 1, 0).bit_length()
    if p != n:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, p - n)
        x = jnp.pad(x, pad)
    return fixed_sum(x, axis)


def rms_norm_exact(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    xf = x.astype(jnp.float32)
    ms = fixed_sum(xf * xf, -1)[..., None] / jnp.float32(x.shape[-1])
    y = xf * jax.lax.rsqrt(ms + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


# ----------------------------------------------------------------------------- row classes

@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _linear_program(x, w, product, extra, out_dtype):
    return product(x, w, *extra, out_dtype)


@functools.partial(jax.jit, static_argnums=2)
def _score_program(q, k, out_dtype):
    return jnp.einsum("btkgd,bksd->bkgts", q, k, preferred_element_type=out_dtype)


def not_before(x: jax.Array, dep: jax.Array) -> jax.Array:
    """``x`` as it is, made to depend on ``dep`` (plus zero times ``dep``'s first element), so
    that XLA cannot compute what reads ``x`` before ``dep``. A layer's reads of a cache it
    does not write (a verify forward that defers its cache write, ``Llama(...,
    defer_cache_write=True)``) depend on nothing the layer computes, and XLA:CPU scheduled
    all 30 layers' transposed value copies first, each in a buffer of its own: in a
    float32 verify forward at batch 4 (1,024 positions, 2-core CPU, 2026-12-05) they took
    82 ms, against 12 ms when each layer's copy comes after its queries and reuses one
    buffer. An optimisation barrier does not order them: XLA:CPU drops barriers before it
    schedules. ``dep`` must be finite (a NaN would spread to all of ``x``)."""
    z = jax.lax.stop_gradient(dep.reshape(-1)[0]) * 0
    return x + z.astype(x.dtype)


def value_product(p, v, out_dtype):
    """``p [B, KVH, G, T, S]`` times the cache's values ``v [B, KVH, S, Dh]``:
    ``[B, T, KVH, G, Dh]``. The values are transposed to ``[B, KVH, Dh, S]`` first, behind an
    optimisation barrier so that XLA cannot fold the transpose into the product: read as
    they lie (the positions, which the product sums over, before the head dimension),
    XLA:CPU's kernel summed a batch of two rows in another order than one row alone
    (2026-12-03); over the transposed copy, the form XLA itself chose when the cache was
    ``[B, S, KVH, Dh]``, every row comes out alike."""
    vt = jax.lax.optimization_barrier(jnp.swapaxes(not_before(v, p), 2, 3))
    return jnp.einsum("bkgts,bkds->btkgd", p, vt, preferred_element_type=out_dtype)


@functools.partial(jax.jit, static_argnums=2)
def _value_program(p, v, out_dtype):
    return value_product(p, v, out_dtype)


# The probes' programs are module-level jits: the two-row reference program of a shape
# compiles once per process, not once per row count tried (row_plan tries up to _MAX_PAD).

def _probe_linear(m: int, shape, dtype, out_dtype, product) -> bool:
    """``"linear"`` (``shape = (out, in, chunks)``, ``product(x, w, chunks, out_dtype)``) and
    ``"plain"`` (``shape = (out, in)``, ``product(x, w, out_dtype)``)."""
    o, i, *extra = shape
    extra = tuple(extra)
    rng = np.random.default_rng(m)
    w = jnp.asarray(rng.standard_normal((o, i)) / math.sqrt(i), dtype)
    x = jnp.asarray(rng.standard_normal((m, i)), dtype)
    y = np.asarray(_linear_program(x, w, product, extra, out_dtype))
    for r in range(m):
        two = _linear_program(jnp.stack([x[r], x[0]]), w, product, extra, out_dtype)
        if not np.array_equal(y[r], np.asarray(two)[0]):
            return False
    return True


def _probe_attention(t: int, shape, dtype, out_dtype, product=None) -> bool:
    g, hd, s = shape  # query heads per key/value head, head dimension, cache length
    rng = np.random.default_rng(t)
    q = jnp.asarray(rng.standard_normal((1, t, 1, g, hd)), dtype)
    k = jnp.asarray(rng.standard_normal((1, 1, s, hd)), dtype)  # the cache: heads first
    p = jnp.asarray(rng.random((1, 1, g, t, s)), dtype)
    f32 = jnp.dtype(jnp.float32)
    s_all = np.asarray(_score_program(q, k, f32))
    o_all = np.asarray(_value_program(p, k, out_dtype))
    for r in range(t):
        j = [r, 0]  # the reference: a two-token product (for t = 1 too)
        s2 = np.asarray(_score_program(q[:, j], k, f32))[:, :, :, 0]
        o2 = np.asarray(_value_program(p[:, :, :, j], k, out_dtype))[:, 0]
        if not (np.array_equal(s_all[:, :, :, r], s2) and np.array_equal(o_all[:, r], o2)):
            return False
    return True


_PROBES = {"linear": _probe_linear, "plain": _probe_linear, "attention": _probe_attention}
# the kinds whose one-row product is a matrix-vector kernel (never in the class)
_ROW_PRODUCTS = ("linear", "plain")

# ------------------------------------------------------------------------- probe answers on disk
# A probe compiles a program per row count and shape: ~100 s for a model's first exact forwards
# on a 2-core CPU, minutes on a GPU. The answers are a property of the machine and the software,
# so they are kept per (device, jax, jaxlib, XLA_FLAGS) under the specjax cache directory and
# reused by every later process. SPECJAX_PROBE_CACHE: auto (default) | refresh (measure again,
# then store) | off (measure, store nothing).

PROBE_FORMAT = "specjax-row-classes-1"
PROBE_ENV = "SPECJAX_PROBE_CACHE"
PROBE_MODES = ("auto", "refresh", "off")


class ProbeCacheWarning(UserWarning):
    """The stored probe answers could not be read or written (the probes run again / are not
    kept): never an error, the answers are measured when missing."""


def probe_mode() -> str:
    m = (os.environ.get(PROBE_ENV) or "auto").strip().lower()
    if m not in PROBE_MODES:
        raise ValueError(f"${PROBE_ENV}={m!r}: must be one of {', '.join(PROBE_MODES)}")
    return m


def probe_key() -> dict:
    """What the answers are valid for: the device, the software that picks the kernels, and
    XLA's flags (which can change the kernels)."""
    import jaxlib

    from specjax.fingerprint import device_description

    return {"format": PROBE_FORMAT, "device": device_description(), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "xla_flags": os.environ.get("XLA_FLAGS", "")}


def probe_cache_path(key: dict | None = None):
    from specjax.fingerprint import cache_root

    key = key or probe_key()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_root() / "numerics" / f"{digest}.json"


def _read_answers(path, key: dict) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key or not isinstance(data.get("answers"), dict):
            raise ValueError("written for another device or version")
        return {k: bool(v) for k, v in data["answers"].items()}
    except (OSError, ValueError, AttributeError) as e:
        warnings.warn(f"exact numerics: ignoring stored probe answers {path} ({e}); the probes "
                      "run again and replace it", ProbeCacheWarning, stacklevel=3)
        return {}


_loaded: dict[str, dict] = {}  # path -> answers read by this process


def _stored_answer(entry: str) -> bool | None:
    if probe_mode() != "auto":
        return None
    key = probe_key()
    path = probe_cache_path(key)
    if str(path) not in _loaded:
        _loaded[str(path)] = _read_answers(path, key)
    return _loaded[str(path)].get(entry)


def _store_answer(entry: str, value: bool) -> None:
    if probe_mode() == "off":
        return
    key = probe_key()
    path = probe_cache_path(key)
    with warnings.catch_warnings():  # a corrupt file was reported when it was read
        warnings.simplefilter("ignore", ProbeCacheWarning)
        answers = _read_answers(path, key)  # merge what other processes stored meanwhile
    answers[entry] = value
    _loaded[str(path)] = answers
    try:
        atomic.write_text(path, json.dumps({"key": key, "answers": answers}, indent=0,
                                           sort_keys=True))
    except OSError as e:
        warnings.warn(f"exact numerics: could not store probe answers in {path} ({e})",
                      ProbeCacheWarning, stacklevel=3)


@functools.lru_cache(maxsize=None)
def row_count_invariant(kind: str, m: int, shape: tuple, dtype_name: str, backend: str,
                        product=None) -> bool:
    """Whether a float product of kind ``kind`` with ``m`` rows gives every row bit-identically
    to the two-row reference program of the same shape, on this backend (measured once per
    machine and software: the answers are stored under the specjax cache directory, see
    ``SPECJAX_PROBE_CACHE`` above; the kernels are chosen by shape, so the probe uses the real
    one).

    Products accumulate and return float32 (``dtype_name`` is the operands' dtype): a
    bfloat16 result would round most order differences away in the probe, not in a model.

    ``"linear"``: ``product`` (:func:`specjax.models.llama.chunked_matmul`, passed in by the
    model so this module imports no model code) of ``m`` rows against an ``(out, in)`` weight
    in ``chunks`` blocks, ``shape = (out, in, chunks)``. ``"plain"``: ``product``
    (:func:`specjax.models.llama.plain_matmul`, XLA's own product, the prefill's) of ``m`` rows
    against an ``(out, in)`` weight, ``shape = (out, in)``. ``"attention"``: the score and
    value products of ``m`` tokens, ``shape = (query heads per key/value head, head dim,
    cache length)``; the reference is a two-token product (one token counts when it has
    several query heads per key/value head: that many rows)."""
    del backend  # part of the cache key: the probe runs on the default backend
    if kind in _ROW_PRODUCTS and m < 2:
        return False
    if kind == "attention" and m * shape[0] < 2:
        return False
    pname = "none" if product is None else f"{product.__module__}.{product.__qualname__}"
    # the attention products read the cache heads first since 2026-12-03: answers stored for
    # the earlier layout's programs are not theirs
    tag = "attention-kvh-first" if kind == "attention" else kind
    entry = f"{tag}|{m}|{','.join(map(str, shape))}|{dtype_name}|{pname}"
    got = _stored_answer(entry)
    if got is not None:
        return got
    with jax.ensure_compile_time_eval():  # called while a forward is traced: run it now
        got = _PROBES[kind](m, tuple(shape), jnp.dtype(dtype_name), jnp.dtype(jnp.float32),
                            product)
    _store_answer(entry, got)
    return got


def row_plan(m: int, kind: str, shape: tuple, dtype, product=None) -> tuple[int, int]:
    """How to run a product of ``m`` rows so that every row comes out as in the reference
    (two-row) program: ``(r, n)``, ``n`` products of ``r`` rows each (``r * n >= m``, rows
    padded). One product of the nearest row count of the class when there is one within
    reach; otherwise (small shapes, where XLA switches kernels for good past some size)
    ``n`` equal products of the largest power-of-two class row count below ``m`` (any class
    row count gives the same bits; powers of two keep the search to a few probes, each a
    compile: the search down through every count cost a tiny test model ~30 s per shape)."""
    name = jnp.dtype(dtype).name
    backend = jax.default_backend()
    lo = max(m, 2) if kind in _ROW_PRODUCTS else max(m, 1)
    shape = tuple(shape)
    for r in range(lo, lo + _MAX_PAD):
        if row_count_invariant(kind, r, shape, name, backend, product):
            return r, 1
    top = min(lo - 1, _MAX_CHUNK)
    for r in ([1 << j for j in range(top.bit_length() - 1, -1, -1)] if top >= 1 else []):
        if row_count_invariant(kind, r, shape, name, backend, product):
            return r, -(-m // r)
    raise RuntimeError(
        f"exact numerics: no row count gives {kind} products {shape} of {name} rows "
        f"identical to the two-row program on the {backend} backend; use numerics='fast' on "
        "this platform")


def pad_rows(x: jax.Array, rows: int, axis: int = 0) -> jax.Array:
    n = x.shape[axis]
    if rows == n:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, rows - n)
    return jnp.pad(x, pad)


# ----------------------------------------------------------------------------- attention

def exact_attention(q, k_all, v_all, lengths, mask, dtype, tail: int = EXACT_TAIL,
                    k_new=None, v_new=None, prefill: bool = False, pallas: bool = False):
    """Softmax attention with a fixed order of every sum (see the module doc).

    Args:
      q: ``[B, T, H, Dh]`` queries (rotary applied).
      k_all, v_all: ``[B, KVH, S, Dh]``: the cache *with the new block written* at
        ``lengths + [0, W)``.
      lengths: ``int32[B]`` committed prefix lengths (always visible).
      mask: ``bool[B, T, W]`` visibility of the window slots ``lengths + [0, W)``; visible
        window slots must be in position order (chains and breadth-first trees are).
      dtype: compute dtype of the value product.
      tail: positions per query read by rank.
      k_new, v_new: optional ``[B, T, KVH, Dh]``: the new block, when ``k_all, v_all`` are
        the cache *without* it (a forward that defers its cache write: the verify step's,
        under a switch over block sizes, where writing a copy of the cache cost every
        layer's buffer per step). Needs a window of the block itself (``W == T``) no longer
        than ``tail``: then every visible window slot is in the tail (a query sees at most
        ``W <= tail`` of them, all ranked after its committed keys), so the window's keys
        and values are gathered from the block, and the product over the cache row reads
        only committed slots (the window slots' stale contents are masked out, as any slot
        no query reads). The result is bit-identical to passing the written cache.
      prefill: static: a prefill into a fresh cache (every row's ``lengths`` is 0, the block
        sits at slots ``[0, T)`` in position order): every visible key goes through the
        product over the cache row, no tail. A prefill's keys only have to come out the same
        in every other prefill (alone or batched, any prompt or cache length), never as a
        verify block's or a decode step's: nothing reads a prompt position through another
        kind of forward. The tail is what makes a verify block agree with one-token
        decoding; a prefill does without it (its gathers and element-wise sums cost 26% of a
        768-token prefill on a 2-core CPU, 2026-12-02).
      pallas: static: the product over the cache row through the batch-invariant Pallas
        kernel (:func:`specjax.pallas_kernels.invariant_attention.invariant_attention_part`,
        the model's ``exact_products="pallas"``) instead of XLA's product with the query
        rows padded to a probed row class (a prefill's too: then nothing is probed).

    Returns:
      ``[B, T, H, Dh]`` in ``dtype``.
    """
    B, T, H, hd = q.shape
    kvh, S = k_all.shape[1], k_all.shape[2]
    G = H // kvh
    R = int(tail)
    scale = 1.0 / math.sqrt(hd)
    neg = jnp.float32(-jnp.inf)
    mask = mask.astype(bool)
    part = _product_attention
    if pallas:
        from specjax.pallas_kernels.invariant_mesh import attention_part as part
    if prefill:
        if k_new is not None:
            raise ValueError("exact_attention: a prefill attends over the written cache "
                             "(no k_new/v_new)")
        # slot s < W is window slot s; slots past the window hold nothing a query reads
        W = mask.shape[2]
        pre = (jnp.pad(mask, ((0, 0), (0, 0), (0, S - W))) if W <= S
               else mask[:, :, :S])  # [B, T, S]
        out, l, _ = part(q, k_all, v_all, pre, jnp.full((B, T, kvh, G), neg, jnp.float32),
                         dtype)
        return _normalise(out, l, dtype)
    # --- ranks: every query's visible keys in position order
    cnt = jnp.cumsum(mask.astype(jnp.int32), axis=-1)  # [B, T, W]
    L = lengths.astype(jnp.int32)
    n_vis = L[:, None] + cnt[..., -1]  # [B, T] keys this query sees (its position + 1)
    split = n_vis - R  # ranks < split: the product part; ranks >= split: the tail
    r = split[..., None] + jnp.arange(R, dtype=jnp.int32)  # [B, T, R] tail ranks
    wr = r - L[:, None, None]  # rank inside the window (negative: committed prefix)
    match = ((cnt[:, :, None, :] - 1) == wr[..., None]) & mask[:, :, None, :]  # [B,T,R,W]
    w_of = jnp.argmax(match, axis=-1)  # [B, T, R] the window index of a window rank
    tail_ok = r >= 0
    if k_new is None:
        slot = jnp.clip(jnp.where(wr < 0, r, L[:, None, None] + w_of), 0, S - 1)
        flat = slot.reshape(B, T * R)
        k_t = slots_of(k_all, flat).reshape(B, T, R, kvh, hd)
        v_t = slots_of(v_all, flat).reshape(B, T, R, kvh, hd)
    else:  # committed ranks from the cache, window ranks from the block
        if mask.shape[2] != T or T > R or k_new.shape[:2] != (B, T):
            raise ValueError(
                f"exact_attention: k_new/v_new need a window of the block itself of at most "
                f"tail = {R} slots; got a window of {mask.shape[2]} for a block of "
                f"{k_new.shape[1]} (mask for {T} queries)")
        in_w = (wr >= 0)[..., None, None]
        flat_c = jnp.clip(r, 0, S - 1).reshape(B, T * R)
        flat_w = w_of.reshape(B, T * R)[:, :, None, None]

        def tail_of(cache_buf, block):  # block [B, T, KVH, Dh], cache_buf [B, KVH, S, Dh]
            from_block = jnp.take_along_axis(block.astype(cache_buf.dtype), flat_w, axis=1)
            # read when the layer gets here, not all layers' first (see not_before)
            from_cache = slots_of(not_before(cache_buf, block), flat_c)
            got = [a.reshape(B, T, R, kvh, hd) for a in (from_block, from_cache)]
            return jnp.where(in_w, *got)

        k_t, v_t = tail_of(k_all, k_new), tail_of(v_all, v_new)
    # --- tail: gathered keys/values, element-wise scores and sums in rank order
    qg = q.reshape(B, T, kvh, G, hd).astype(jnp.float32)
    kt = jnp.transpose(k_t, (0, 1, 3, 2, 4)).astype(jnp.float32)  # [B, T, KVH, R, Dh]
    s_t = fixed_sum(qg[:, :, :, :, None, :] * kt[:, :, :, None, :, :], -1) * scale
    s_t = jnp.where(tail_ok[:, :, None, None, :], s_t, neg)  # [B, T, KVH, G, R]
    # --- the rest: one product over the cache row, rows padded to the reference class
    slots = jnp.arange(S, dtype=jnp.int32)
    # a slot is in the product part when it is visible and its rank is below the split: a
    # committed slot's rank is the slot; a window slot's rank is L + (visible count up to it)
    w_idx = jnp.clip(slots[None, :] - L[:, None], 0, mask.shape[2] - 1)  # [B, S]
    in_win = (slots[None, :] >= L[:, None]) & (slots[None, :] < L[:, None] + mask.shape[2])
    win_vis = jnp.take_along_axis(mask, jnp.broadcast_to(w_idx[:, None, :], (B, T, S)), axis=2)
    win_rank = L[:, None, None] + jnp.take_along_axis(
        cnt, jnp.broadcast_to(w_idx[:, None, :], (B, T, S)), axis=2) - 1
    rank = jnp.where(in_win[:, None, :], win_rank, slots[None, None, :])
    visible = jnp.where(in_win[:, None, :], win_vis, slots[None, None, :] < L[:, None, None])
    pre = visible & (rank < split[..., None])  # [B, T, S]
    m_t = jnp.max(s_t, axis=-1)  # [B, T, KVH, G]
    out, l, m = part(q, k_all, v_all, pre, m_t, dtype)
    p_t = jnp.exp(s_t - jnp.transpose(m, (0, 3, 1, 2))[..., None])  # [B, T, KVH, G, R]
    l = l + jnp.transpose(fixed_sum(p_t, -1), (0, 2, 3, 1))  # [B, KVH, G, T]
    vt = jnp.transpose(v_t, (0, 1, 3, 2, 4)).astype(jnp.float32)  # [B, T, KVH, R, Dh]
    out = out + fixed_sum(p_t[..., None] * vt[:, :, :, None, :, :], -2)  # [B,T,KVH,G,Dh]
    return _normalise(out, l, dtype)


def _normalise(out, l, dtype):
    """``out [B, T, KVH, G, Dh]`` over the softmax denominators ``l [B, KVH, G, T]``, as
    ``[B, T, H, Dh]`` in ``dtype`` (a query that sees nothing: zeros)."""
    B, T, kvh, G, hd = out.shape
    l = jnp.transpose(l, (0, 3, 1, 2))
    l = jnp.where(l == 0.0, 1.0, l)
    return (out / l[..., None]).reshape(B, T, kvh * G, hd).astype(dtype)


def _product_attention(q, k_all, v_all, pre, m_t, dtype):
    """The product part of :func:`exact_attention`: the scores of ``q [B, T, H, Dh]`` against
    the whole cache row ``k_all [B, KVH, S, Dh]`` where ``pre [B, T, S]``, their max with
    ``m_t [B, T, KVH, G]`` (the other part's max), the exponentials, their sums over the row
    (:func:`cache_axis_sum`) and the value product, with the query rows padded to the
    reference class (:func:`row_plan`). Returns ``(out [B, T, KVH, G, Dh], l [B, KVH, G, T],
    m [B, KVH, G, T])``: unnormalised outputs, denominators and maxima, float32."""
    B, T, H, hd = q.shape
    kvh, S = k_all.shape[1], k_all.shape[2]
    G = H // kvh
    scale = 1.0 / math.sqrt(hd)
    neg = jnp.float32(-jnp.inf)
    r_tok, n_chunks = row_plan(T, "attention", (G, hd, S), dtype)
    Tp = r_tok * n_chunks
    # slots no query reads hold finite scratch (specjax.cache.write_block stores no NaN or
    # inf) under exact zero weights: read as they are, not through a masked copy of every
    # layer's values in every forward
    v1 = v_all.astype(dtype)
    k1 = k_all.astype(dtype)

    def product_part(args):
        """Scores, max, exp, sums and the value product of ``r_tok`` queries."""
        qc, prec, mtc = args  # [B, r, KVH, G, Dh], [B, r, S], [B, r, KVH, G]
        s1 = jnp.einsum("btkgd,bksd->bkgts", qc, k1, preferred_element_type=jnp.float32)
        s1 = jnp.where(prec[:, None, None], s1 * scale, neg)  # [B, KVH, G, r, S]
        mc = jnp.maximum(jnp.max(s1, axis=-1), jnp.transpose(mtc, (0, 2, 3, 1)))
        mc = jnp.where(jnp.isneginf(mc), 0.0, mc)  # a query that sees nothing: zeros
        p1 = jnp.exp(s1 - mc[..., None])
        oc = value_product(p1.astype(dtype), v1, jnp.float32)
        return oc, cache_axis_sum(p1, -1), mc  # [B,r,KVH,G,Dh], [B,KVH,G,r], [B,KVH,G,r]

    parts = (pad_rows(q.reshape(B, T, kvh, G, hd), Tp, axis=1), pad_rows(pre, Tp, axis=1),
             pad_rows(m_t, Tp, axis=1))
    if n_chunks == 1:
        out, l, m = product_part(parts)
    else:  # equal-shaped products, one per chunk of queries
        split = [jnp.moveaxis(a.reshape(B, n_chunks, r_tok, *a.shape[2:]), 1, 0)
                 for a in parts]
        oc, lc, mc = jax.lax.map(product_part, tuple(split))
        out = jnp.moveaxis(oc, 0, 1).reshape(B, Tp, kvh, G, hd)
        l = jnp.moveaxis(lc, 0, 3).reshape(B, kvh, G, Tp)
        m = jnp.moveaxis(mc, 0, 3).reshape(B, kvh, G, Tp)
    return out[:, :T], l[..., :T], m[..., :T]
