"""The batch-invariant attention part (pallas_kernels/invariant_attention, issue 22): correct
against its reference and exact numerics' XLA form, and a query's bits independent of the
other queries and rows in the call and of the cache's length, in the Pallas interpreter and
the TPU interpreter on CPU; lowered for TPU and for Triton from this machine; the Mosaic GPU
variant in its interpreter and exported for CUDA. The model-level checks (verify blocks,
trees, batches with the kernels) are in tests/numerics_checks.py."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.numerics import _product_attention
from specjax.pallas_kernels.invariant_attention import (MODES, attention_part_reference,
                                                        block_sizes, invariant_attention_part)

B, T, H, KVH, HD, S = 3, 9, 4, 2, 16, 64
# the TPU interpreter runs on the CPU backend only; on a GPU the Triton kernel runs instead
MODES_HERE = (["interpret"] + (["tpu_interpret"] if jax.default_backend() == "cpu" else [])
              + (["triton"] if jax.default_backend() == "gpu" else []))


def _case(dtype, seed=0, s=S, hd=HD):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((B, T, H, hd)), dtype)
    k = jnp.asarray(rng.standard_normal((B, KVH, s, hd)), dtype)
    v = jnp.asarray(rng.standard_normal((B, KVH, s, hd)), dtype)
    L = np.array([5, 20, 40])
    pre = np.arange(s)[None, None] < (L[:, None, None] + np.arange(T)[None, :, None] - 2)
    pre[0, 0] = False  # a query whose product part sees nothing
    m_t = np.asarray(rng.standard_normal((B, T, KVH, H // KVH)), np.float32)
    m_t[0, 0] = -np.inf  # ... nor its tail: zeros
    m_t[1, 3] = 50.0  # a tail whose max dominates
    return q, k, v, jnp.asarray(pre), jnp.asarray(m_t)


@functools.lru_cache(maxsize=None)
def _compiled(mode, dtype, blocks=None):
    return jax.jit(functools.partial(invariant_attention_part, dtype=dtype, mode=mode,
                                     blocks=blocks))


@pytest.mark.parametrize("mode", MODES_HERE)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_matches_reference_and_exact_xla(mode, dtype):
    q, k, v, pre, m_t = _case(dtype)
    got = _compiled(mode, dtype)(q, k, v, pre, m_t)
    ref = jax.jit(attention_part_reference, static_argnums=5)(q, k, v, pre, m_t, dtype)
    xla = jax.jit(_product_attention, static_argnums=5)(q, k, v, pre, m_t, dtype)
    for a, b, c, name in zip(got, ref, xla, ("out", "l", "m")):
        assert a.shape == b.shape == c.shape and a.dtype == jnp.float32, name
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-5, rtol=1e-5)
    out, l, m = (np.asarray(a) for a in got)
    assert not out[0, 0].any() and not l[0, :, :, 0].any() and not m[0, :, :, 0].any()
    assert (m[1, :, :, 3] == 50.0).all()


@pytest.mark.parametrize("mode", MODES_HERE)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_queries_do_not_depend_on_the_call(mode, dtype):
    """Each query alone (one token of one row), the tokens reversed, and the whole call over a
    cache four times as long whose extra slots hold NaN: the same bits."""
    q, k, v, pre, m_t = _case(dtype, seed=1)
    f = _compiled(mode, dtype)
    full = [np.asarray(a) for a in f(q, k, v, pre, m_t)]
    for b, t in [(0, 0), (1, 3), (1, 8), (2, 0), (2, 5)]:
        one = [np.asarray(a) for a in f(q[b:b + 1, t:t + 1], k[b:b + 1], v[b:b + 1],
                                        pre[b:b + 1, t:t + 1], m_t[b:b + 1, t:t + 1])]
        assert np.array_equal(one[0][0, 0], full[0][b, t]), (b, t)
        assert np.array_equal(one[1][0, ..., 0], full[1][b, ..., t]), (b, t)
        assert np.array_equal(one[2][0, ..., 0], full[2][b, ..., t]), (b, t)
    rev = [np.asarray(a) for a in f(q[:, ::-1], k, v, pre[:, ::-1], m_t[:, ::-1])]
    assert np.array_equal(rev[0][:, ::-1], full[0])
    assert np.array_equal(rev[1][..., ::-1], full[1])
    grow = ((0, 0), (0, 0), (0, 3 * S), (0, 0))
    nan_v = jnp.pad(v, grow, constant_values=jnp.nan)
    longer = [np.asarray(a) for a in f(q, jnp.pad(k, grow), nan_v,
                                       jnp.pad(pre, ((0, 0), (0, 0), (0, 3 * S))), m_t)]
    for a, b in zip(longer, full):
        assert np.array_equal(a, b)


def test_the_check_sees_a_changed_order():
    """Another block of cache slots changes the bits (the equalities above can fail)."""
    q, k, v, pre, m_t = _case(jnp.float32, seed=2, s=256)
    pre = jnp.ones_like(pre)
    a = _compiled("interpret", jnp.float32, (8, 64))(q, k, v, pre, m_t)
    b = _compiled("interpret", jnp.float32, (8, 8))(q, k, v, pre, m_t)
    np.testing.assert_allclose(np.asarray(a[0]), np.asarray(b[0]), atol=1e-4, rtol=1e-4)
    assert not all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def test_blocks_follow_the_backend_only():
    assert block_sizes(jnp.bfloat16, "triton") == (16, 64)
    assert block_sizes(jnp.float32, "tpu") == (8, 128)
    assert block_sizes(jnp.bfloat16, "tpu") == (16, 128)
    assert {block_sizes(jnp.float32, m)[1] for m in MODES} <= {64, 128}
    with pytest.raises(ValueError, match="mode must be one of"):
        block_sizes(jnp.float32, "cuda")


@pytest.mark.parametrize("args,match", [
    (dict(k=(3, 2, 64, 8)), "k_all and v_all must be"),
    (dict(q=(3, 9, 3, 16)), "3 query heads for 2 kv heads"),
    (dict(pre=(3, 9, 32)), "pre must be"),
    (dict(m_t=(3, 9, 2, 1)), "m_t"),
], ids=["head-dim", "heads", "pre", "m_t"])
def test_bad_shapes_raise(args, match):
    shapes = {"q": (B, T, H, HD), "k": (B, KVH, S, HD), "pre": (B, T, S),
              "m_t": (B, T, KVH, H // KVH), **args}
    with pytest.raises(ValueError, match=match):
        invariant_attention_part(jnp.ones(shapes["q"]), jnp.ones(shapes["k"]),
                                 jnp.ones(shapes["k"]), jnp.ones(shapes["pre"], bool),
                                 jnp.zeros(shapes["m_t"]), jnp.float32, mode="interpret")


def _smollm2_args(dtype, t=5, s=512):  # 9 query heads, 3 kv heads, head dim 64
    return (jax.ShapeDtypeStruct((2, t, 9, 64), dtype), jax.ShapeDtypeStruct((2, 3, s, 64), dtype),
            jax.ShapeDtypeStruct((2, 3, s, 64), dtype), jax.ShapeDtypeStruct((2, t, s), bool),
            jax.ShapeDtypeStruct((2, t, 3, 3), jnp.float32))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_lowers_for_tpu(dtype):
    fn = jax.jit(functools.partial(invariant_attention_part, dtype=dtype, mode="tpu"))
    exported = jax.export.export(fn, platforms=["tpu"])(*_smollm2_args(dtype))
    assert "tpu_custom_call" in exported.mlir_module()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_lowers_for_triton(dtype):
    fn = jax.jit(functools.partial(invariant_attention_part, dtype=dtype, mode="triton"))
    lowered = fn.trace(*_smollm2_args(dtype)).lower(lowering_platforms=("cuda",))
    assert "triton" in lowered.as_text()


def _mosaic_gpu_interpreter():
    try:  # not exported publicly in JAX 0.10.2
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # noqa: F401
    except ImportError:
        pytest.skip("this JAX has no Mosaic GPU interpreter")


def test_mosaic_gpu_kernel_in_the_interpreter():
    """The Mosaic GPU kernel (mosaic_gpu.py) under the Mosaic GPU interpreter, bfloat16, head
    dim 64: the reference's values; each query alone, the tokens reversed and a cache four
    times as long with NaN values in the new slots give the same bits; a query that sees
    nothing gives zeros. Its block products are jnp dots there (the interpreter's wgmma takes
    no transposed or register operand): the wgmma path is checked by the export below."""
    _mosaic_gpu_interpreter()
    dtype = jnp.bfloat16
    q, k, v, pre, m_t = _case(dtype, seed=4, s=128, hd=64)
    f = _compiled("mosaic_gpu_interpret", dtype)
    full = [np.asarray(a) for a in f(q, k, v, pre, m_t)]
    ref = attention_part_reference(q, k, v, pre, m_t, dtype)
    for a, b in zip(full, ref):
        np.testing.assert_allclose(a, np.asarray(b), atol=2e-3, rtol=2e-3)
    assert not full[0][0, 0].any() and not full[1][0, :, :, 0].any()
    assert (full[2][1, :, :, 3] == 50.0).all()
    for b, t in [(0, 0), (1, 3), (2, 8)]:
        one = [np.asarray(a) for a in f(q[b:b + 1, t:t + 1], k[b:b + 1], v[b:b + 1],
                                        pre[b:b + 1, t:t + 1], m_t[b:b + 1, t:t + 1])]
        assert np.array_equal(one[0][0, 0], full[0][b, t]), (b, t)
        assert np.array_equal(one[1][0, ..., 0], full[1][b, ..., t]), (b, t)
    rev = [np.asarray(a) for a in f(q[:, ::-1], k, v, pre[:, ::-1], m_t[:, ::-1])]
    assert np.array_equal(rev[0][:, ::-1], full[0])
    grow = ((0, 0), (0, 0), (0, 384), (0, 0))
    longer = [np.asarray(a) for a in f(q, jnp.pad(k, grow),
                                       jnp.pad(v, grow, constant_values=jnp.nan),
                                       jnp.pad(pre, ((0, 0), (0, 0), (0, 384))), m_t)]
    for a, b in zip(longer, full):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("t,s", [(1, 512), (5, 512), (30, 1024), (3, 200)])
def test_mosaic_gpu_kernel_lowers_for_cuda(t, s):
    """The real (wgmma) kernel through the whole Pallas -> Mosaic GPU lowering, exported for
    CUDA at SmolLM2's heads (a decode step, a verify block, a longer block over a longer
    cache, and a cache that is not a multiple of the block: padded)."""
    fn = jax.jit(functools.partial(invariant_attention_part, dtype=jnp.bfloat16,
                                   mode="mosaic_gpu"))
    exported = jax.export.export(fn, platforms=["cuda"])(*_smollm2_args(jnp.bfloat16, t, s))
    assert "mosaic_gpu" in exported.mlir_module()


def test_mosaic_gpu_kernel_lowers_for_cuda_at_head_dim_128():
    """Head dim 128 (Llama-3 8B's): its buffers fit a Hopper SM; exported for CUDA."""
    fn = jax.jit(functools.partial(invariant_attention_part, dtype=jnp.bfloat16,
                                   mode="mosaic_gpu"))
    args = (jax.ShapeDtypeStruct((1, 5, 32, 128), jnp.bfloat16),
            jax.ShapeDtypeStruct((1, 8, 512, 128), jnp.bfloat16),
            jax.ShapeDtypeStruct((1, 8, 512, 128), jnp.bfloat16),
            jax.ShapeDtypeStruct((1, 5, 512), bool), jax.ShapeDtypeStruct((1, 5, 8, 4),
                                                                          jnp.float32))
    assert "mosaic_gpu" in jax.export.export(fn, platforms=["cuda"])(*args).mlir_module()


def test_mosaic_gpu_mode_falls_back_and_refuses():
    """float32 and head dims other than 64 and 128 go to the portable kernel (the
    interpreter's bits); other blocks are refused; unknown modes named."""
    q, k, v, pre, m_t = _case(jnp.float32, seed=5)  # head dim 16
    a = _compiled("mosaic_gpu_interpret", jnp.float32)(q, k, v, pre, m_t)
    b = _compiled("interpret", jnp.float32)(q, k, v, pre, m_t)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
    q, k, v, pre, m_t = _case(jnp.bfloat16, seed=5, hd=256)  # over its shared memory
    a = _compiled("mosaic_gpu_interpret", jnp.bfloat16)(q, k, v, pre, m_t)
    b = _compiled("interpret", jnp.bfloat16)(q, k, v, pre, m_t)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
    q, k, v, pre, m_t = _case(jnp.bfloat16, seed=5, hd=64)
    with pytest.raises(ValueError, match="blocks are fixed"):
        invariant_attention_part(q, k, v, pre, m_t, jnp.bfloat16, mode="mosaic_gpu",
                                 blocks=(16, 64))
    with pytest.raises(ValueError, match="mode must be one of"):
        invariant_attention_part(q, k, v, pre, m_t, jnp.bfloat16, mode="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")
def test_mosaic_gpu_kernel_on_gpu():
    """On a GPU (wgmma): the reference's values, a query alone its batched bits, a longer cache
    with NaN scratch the same bits."""
    dtype = jnp.bfloat16
    q, k, v, pre, m_t = _case(dtype, seed=6, s=256, hd=64)
    f = _compiled("mosaic_gpu", dtype)
    full = [np.asarray(a) for a in f(q, k, v, pre, m_t)]
    for a, b in zip(full, attention_part_reference(q, k, v, pre, m_t, dtype)):
        np.testing.assert_allclose(a, np.asarray(b), atol=2e-2, rtol=2e-2)
    one = [np.asarray(a) for a in f(q[1:2, 3:4], k[1:2], v[1:2], pre[1:2, 3:4],
                                    m_t[1:2, 3:4])]
    assert np.array_equal(one[0][0, 0], full[0][1, 3])
    grow = ((0, 0), (0, 0), (0, 256), (0, 0))
    longer = f(q, jnp.pad(k, grow), jnp.pad(v, grow, constant_values=jnp.nan),
               jnp.pad(pre, ((0, 0), (0, 0), (0, 256))), m_t)
    assert all(np.array_equal(np.asarray(x), y) for x, y in zip(longer, full))
