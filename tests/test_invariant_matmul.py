"""The batch-invariant product (pallas_kernels/invariant_matmul, issue 22): correct against
its reference and XLA's product, and a row's bits independent of the row count and of the
row's position, in the Pallas interpreter and the TPU interpreter on CPU; lowered for TPU and
for Triton (GPU) from this machine; bad inputs refused. The Mosaic GPU variant in its
interpreter and exported for CUDA. On a GPU the same tests run with the Triton kernel and the
Mosaic GPU one (``scripts/gpu_checks.sh``, step ``invariant_matmul``)."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.pallas_kernels.invariant_matmul import (MODES, Blocks, blocked_matmul_reference,
                                                     choose_blocks, default_mode,
                                                     invariant_matmul)

# SmolLM2-135M's product shapes [out, in]: q/k/v, o, gate/up, down (N = 300 leaves a partial
# output tile; the LM head is the 49,152-row case of the same program)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (300, 576)]
ON_GPU = jax.default_backend() == "gpu"
# the TPU interpreter runs on the CPU backend only; on a GPU the Triton kernel runs instead
CPU_MODES = (["interpret"] + (["tpu_interpret"] if jax.default_backend() == "cpu" else [])
             + (["triton"] if ON_GPU else []))


def _operands(m, n, k, dtype, seed=0):
    kx, kw = jax.random.split(jax.random.PRNGKey(seed))
    return (jax.random.normal(kx, (m, k), jnp.float32).astype(dtype),
            (jax.random.normal(kw, (n, k), jnp.float32) / np.sqrt(k)).astype(dtype))


@functools.lru_cache(maxsize=None)
def _compiled(mode, blocks=None):
    return jax.jit(functools.partial(invariant_matmul, mode=mode, blocks=blocks))


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_matches_reference_and_xla(mode, dtype):
    n, k = 300, 576
    x, w = _operands(19, n, k, dtype)
    got = np.asarray(_compiled(mode)(x, w))
    assert got.shape == (19, n) and got.dtype == np.float32
    ref = np.asarray(blocked_matmul_reference(x, w, choose_blocks(n, k, dtype, mode).block_k))
    xla = np.asarray(x.astype(jnp.float32) @ w.astype(jnp.float32).T)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got, xla, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES[:2] + SHAPES[3:], ids=lambda s: f"{s[0]}x{s[1]}")
def test_rows_do_not_depend_on_row_count_or_position(mode, dtype, shape):
    """Row ``r`` of a 19-row product equals the same row in products of 1, 2, 3, 8 and 17 rows
    and in the reversed product, bit for bit."""
    n, k = shape
    x, w = _operands(19, n, k, dtype, seed=n + k)
    f = _compiled(mode)
    full = np.asarray(f(x, w))
    for m in (1, 2, 3, 8, 17):
        assert np.array_equal(np.asarray(f(x[:m], w)), full[:m]), m
    assert np.array_equal(np.asarray(f(x[::-1], w))[::-1], full)
    one = np.asarray(f(x[11:12], w))  # a row alone, from the middle of the block
    assert np.array_equal(one, full[11:12])


def test_the_check_sees_a_changed_order():
    """The same rows summed in another blocking of the input axis (what a kernel whose blocks
    followed the row count would do) differ in the last bits: the equality above can fail."""
    x, w = _operands(8, 576, 1536, jnp.float32, seed=3)
    a = np.asarray(_compiled("interpret", Blocks(8, 128, 64))(x, w))
    b = np.asarray(_compiled("interpret", Blocks(8, 128, 16))(x, w))
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
    assert not np.array_equal(a, b)


def test_blocks_follow_the_weights_not_the_rows():
    for mode in MODES:
        b = choose_blocks(576, 1536, jnp.bfloat16, mode)
        assert 1536 % b.block_k == 0 and b.block_n <= 576
    assert choose_blocks(960, 576, jnp.float32, "tpu").block_k == 576  # no 128-multiple divides
    assert choose_blocks(960, 576, jnp.float32, "triton") == Blocks(16, 64, 64)
    assert choose_blocks(96, 64, jnp.float32, "interpret") == Blocks(8, 96, 64)
    assert default_mode() == {"gpu": "triton", "tpu": "tpu"}.get(jax.default_backend(),
                                                                  "interpret")


def test_empty_and_single_tile_products():
    x, w = _operands(0, 64, 64, jnp.float32)
    assert _compiled("interpret")(x, w).shape == (0, 64)
    x, w = _operands(3, 40, 32, jnp.float32)
    np.testing.assert_allclose(np.asarray(invariant_matmul(x, w, jnp.bfloat16,
                                                           mode="interpret")).astype(np.float32),
                               np.asarray(x @ w.T), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("bad,match", [
    (lambda: invariant_matmul(jnp.ones((2, 64)), jnp.ones((8, 32))), "not \\[N, 64\\]"),
    (lambda: invariant_matmul(jnp.ones((2, 64)), jnp.ones((8, 64), jnp.bfloat16)), "cast"),
    (lambda: invariant_matmul(jnp.ones((2, 64), jnp.int8), jnp.ones((8, 64), jnp.int8)),
     "integer products"),
    (lambda: invariant_matmul(jnp.ones((2, 3, 64)), jnp.ones((8, 64))), "\\[M, K\\]"),
    (lambda: invariant_matmul(jnp.ones((2, 40)), jnp.ones((8, 40)), mode="interpret"),
     "multiple of 16"),
    (lambda: invariant_matmul(jnp.ones((2, 64)), jnp.ones((8, 64)), mode="cuda"),
     "mode must be one of"),
    (lambda: invariant_matmul(jnp.ones((2, 64)), jnp.ones((8, 64)), mode="interpret",
                              blocks=Blocks(8, 8, 48)), "block_k=48 must divide"),
], ids=["k-mismatch", "dtype-mismatch", "int8", "rank", "k-not-16", "mode", "block_k"])
def test_bad_inputs_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_reference_refuses_bad_blocks():
    with pytest.raises(ValueError, match="must divide"):
        blocked_matmul_reference(jnp.ones((2, 64)), jnp.ones((4, 64)), 48)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_lowers_for_tpu(dtype):
    """Pallas -> Mosaic TPU lowering at SmolLM2's shapes, exported for TPU from this machine
    (Mosaic's own compilation only happens on a TPU)."""
    fn = jax.jit(functools.partial(invariant_matmul, mode="tpu"))
    for n, k in SHAPES[:4]:
        exported = jax.export.export(fn, platforms=["tpu"])(
            jax.ShapeDtypeStruct((5, k), dtype), jax.ShapeDtypeStruct((n, k), dtype))
        assert "tpu_custom_call" in exported.mlir_module()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_lowers_for_triton(dtype):
    """Pallas -> Triton lowering for CUDA at SmolLM2's shapes, from this machine (the Triton
    compiler itself runs only on a GPU). Lowered, not exported: a Triton call has no
    serialization guarantee."""
    fn = jax.jit(functools.partial(invariant_matmul, mode="triton"))
    for n, k in SHAPES[:4]:
        lowered = fn.trace(jax.ShapeDtypeStruct((5, k), dtype),
                           jax.ShapeDtypeStruct((n, k), dtype)).lower(
            lowering_platforms=("cuda",))
        assert "triton" in lowered.as_text()


def _mosaic_gpu_interpreter():
    try:  # not exported publicly in JAX 0.10.2
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # noqa: F401
    except ImportError:
        pytest.skip("this JAX has no Mosaic GPU interpreter")


@pytest.mark.parametrize("shape", SHAPES[:4], ids=lambda s: f"{s[0]}x{s[1]}")
def test_mosaic_gpu_kernel_in_the_interpreter(shape):
    """The Mosaic GPU kernel (mosaic_gpu.py) under the Mosaic GPU interpreter, bfloat16: the
    reference's bits (blocks of 64 in order), and a row's bits the same in products of 1, 3,
    19 and 70 rows (two row tiles) and reversed. The interpreter runs TMA copies, barriers, the
    double-buffered loop and the store; each block's product is a jnp dot there (its wgmma
    takes no transposed operand), so the wgmma path is checked by the CUDA export below and
    on a GPU."""
    _mosaic_gpu_interpreter()
    n, k = shape
    x, w = _operands(70, n, k, jnp.bfloat16, seed=n + k)
    f = _compiled("mosaic_gpu_interpret")
    full = np.asarray(f(x, w))
    assert full.shape == (70, n) and full.dtype == np.float32
    assert np.array_equal(full, np.asarray(blocked_matmul_reference(x, w, 64)))
    for m in (1, 3, 19):
        assert np.array_equal(np.asarray(f(x[:m], w)), full[:m]), m
    assert np.array_equal(np.asarray(f(x[::-1], w))[::-1], full)
    assert np.array_equal(np.asarray(f(x[40:41], w)), full[40:41])  # the second row tile's


@pytest.mark.parametrize("shape", SHAPES[:4] + [(49152, 576)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_mosaic_gpu_kernel_lowers_for_cuda(shape):
    """The real (wgmma) kernel through the whole Pallas -> Mosaic GPU lowering (TMA
    descriptors, swizzled shared memory, wgmma, barriers), exported for CUDA from this
    machine at SmolLM2's shapes, the LM head included (PTX compilation needs a GPU)."""
    n, k = shape
    fn = jax.jit(functools.partial(invariant_matmul, mode="mosaic_gpu"))
    exported = jax.export.export(fn, platforms=["cuda"])(
        jax.ShapeDtypeStruct((5, k), jnp.bfloat16), jax.ShapeDtypeStruct((n, k), jnp.bfloat16))
    assert "mosaic_gpu" in exported.mlir_module()


def test_mosaic_gpu_mode_choices(monkeypatch):
    """Its tile is fixed (64 rows, 128 or 64 columns, blocks of 64); float32 and shapes it
    cannot tile go to the portable kernel; other blocks are refused; the mode comes from
    ``$SPECJAX_INVARIANT_KERNELS`` when none is passed, and is recorded."""
    from specjax.config import tiny_config
    from specjax.fingerprint import exact_products_of
    from specjax.models.loaders import random_model
    from specjax.pallas_kernels.invariant_matmul import MODE_ENV, kernel_mode

    assert choose_blocks(960, 576, jnp.bfloat16, "mosaic_gpu") == Blocks(64, 64, 64)
    assert choose_blocks(3072, 576, jnp.bfloat16, "mosaic_gpu") == Blocks(64, 128, 64)
    assert choose_blocks(960, 576, jnp.float32, "mosaic_gpu") == choose_blocks(
        960, 576, jnp.float32, "triton")
    assert choose_blocks(960, 576, jnp.float32, "mosaic_gpu_interpret") == choose_blocks(
        960, 576, jnp.float32, "interpret")
    x, w = _operands(3, 300, 576, jnp.float32)  # float32: the portable kernel, interpreted
    assert np.array_equal(np.asarray(invariant_matmul(x, w, mode="mosaic_gpu_interpret")),
                          np.asarray(invariant_matmul(x, w, mode="interpret")))
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)  # N = 300: not 64's multiple
    assert np.array_equal(np.asarray(invariant_matmul(xb, wb, mode="mosaic_gpu_interpret")),
                          np.asarray(invariant_matmul(xb, wb, mode="interpret")))
    with pytest.raises(ValueError, match="blocks are fixed"):
        invariant_matmul(xb[:, :576], wb[:256], mode="mosaic_gpu", blocks=Blocks(16, 64, 64))
    monkeypatch.delenv(MODE_ENV, raising=False)
    assert kernel_mode() == default_mode()
    monkeypatch.setenv(MODE_ENV, "cuda")
    with pytest.raises(ValueError, match="SPECJAX_INVARIANT_KERNELS='cuda'"):
        kernel_mode()
    monkeypatch.setenv(MODE_ENV, "mosaic_gpu_interpret")
    assert kernel_mode() == "mosaic_gpu_interpret"
    model = random_model(tiny_config(), seed=0)
    with warnings.catch_warnings():  # the interpreter's warning (once per process)
        warnings.simplefilter("ignore")
        model.set_numerics("exact", products="pallas")
    assert exact_products_of(model) == "pallas:mosaic_gpu_interpret"
    monkeypatch.setenv(MODE_ENV, default_mode())
    assert exact_products_of(model) == "pallas"


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU")
def test_mosaic_gpu_kernel_on_gpu_is_row_invariant():
    """The Mosaic GPU kernel on a GPU (wgmma): at SmolLM2's shapes and the LM head's, rows of
    1, 3, 16 and 70 agree bit for bit with the same rows of a larger product, and the values
    match XLA's product."""
    f = _compiled("mosaic_gpu")
    for n, k in SHAPES[:4] + [(49152, 576)]:
        x, w = _operands(70, n, k, jnp.bfloat16, seed=n)
        full = np.asarray(f(x, w))
        for m in (1, 3, 16):
            assert np.array_equal(np.asarray(f(x[:m], w)), full[:m]), (n, k, m)
        assert np.array_equal(np.asarray(f(x[::-1], w))[::-1], full), (n, k)
        np.testing.assert_allclose(full, np.asarray(x.astype(jnp.float32)
                                                    @ w.astype(jnp.float32).T), atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a GPU")
def test_triton_kernel_on_gpu_is_row_invariant_for_the_lm_head():
    """The LM head's product (49,152 x 576) through the Triton kernel on a GPU: rows of 1, 3 and
    16 agree bit for bit and match XLA's product."""
    x, w = _operands(16, 49152, 576, jnp.bfloat16)
    f = _compiled("triton")
    full = np.asarray(f(x, w))
    for m in (1, 3):
        assert np.array_equal(np.asarray(f(x[:m], w)), full[:m])
    np.testing.assert_allclose(full, np.asarray(x.astype(jnp.float32)
                                                @ w.astype(jnp.float32).T), atol=2e-2)


def test_exact_products_switch(monkeypatch):
    """``exact_products``: the model's choice of product kernel in exact numerics, from the
    argument, else ``$SPECJAX_EXACT_PRODUCTS``, else ``"xla"``; bad names refused naming
    their source."""
    from specjax.config import tiny_config
    from specjax.models import numerics
    from specjax.models.loaders import random_model

    monkeypatch.delenv(numerics.PRODUCTS_ENV, raising=False)
    assert numerics.exact_products() == "xla"
    model = random_model(tiny_config(), seed=0)
    model.set_numerics("exact")
    assert model.exact_products == "xla"
    monkeypatch.setenv(numerics.PRODUCTS_ENV, "pallas")
    assert numerics.exact_products() == "pallas"
    assert numerics.exact_products("xla") == "xla"
    model.set_numerics("exact")
    assert model.exact_products == "pallas"
    monkeypatch.setenv(numerics.PRODUCTS_ENV, "triton")
    with pytest.raises(ValueError, match="SPECJAX_EXACT_PRODUCTS"):
        numerics.exact_products()
    with pytest.raises(ValueError, match="one of xla, pallas"):
        numerics.exact_products("cuda")


def test_bench_script_checks_and_records(tmp_path):
    """scripts/bench_invariant_matmul.py: the rows' identity checked, timings recorded."""
    import json

    from script_helpers import load_script

    out = tmp_path / "b.json"
    bench = load_script("bench_invariant_matmul")
    assert bench.main(["--rows", "1", "3", "--reps", "1", "--shapes", "o", "--dtypes",
                       "float32", "--attention", "--cache", "128", "--output", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["failed_checks"] == 0 and got["mode"] == default_mode()
    assert [(c["shape"], c["rows"]) for c in got["cases"]] == [("o", 1), ("o", 3),
                                                               ("attention", 1), ("attention", 3)]
    assert all(c["rows_identical"] and c["kernel_ms"] > 0 for c in got["cases"])


def test_interpreted_kernels_warn_once(monkeypatch):
    """On a CPU, choosing the Pallas kernels says they run interpreted (once per process)."""
    from specjax.models import numerics

    if jax.default_backend() in ("gpu", "tpu"):
        pytest.skip("the kernels are compiled here")
    numerics._warn_interpreted.cache_clear()
    with pytest.warns(numerics.InvariantKernelWarning, match="interpreter"):
        numerics.exact_products("pallas")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        numerics.exact_products("pallas")  # not again
        numerics.exact_products("xla")


def test_costs_are_keyed_by_the_product_kernels():
    """A model running the Pallas kernels has its own measured costs (they cost differently):
    its fingerprint differs; the default's is unchanged, so costs cached before stay valid."""
    from specjax.config import tiny_config
    from specjax.fingerprint import model_fingerprint
    from specjax.models.loaders import random_model

    model = random_model(tiny_config(), seed=0)
    model.set_numerics("exact", products="xla")
    default = model_fingerprint(model)
    assert set(default) == {"config_sha256", "dtype", "quantization"}
    model.set_numerics("fast", products="xla")
    assert model_fingerprint(model) == default
    model.set_numerics("exact", products="pallas")
    assert model_fingerprint(model) == {**default, "exact_products": "pallas"}
