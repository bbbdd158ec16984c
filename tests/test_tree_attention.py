"""Tree attention (pallas_kernels/tree_attention): one shared suite run against every backend.

Every backend is checked against the dense oracle (prefix and tree concatenated, one masked
softmax, float32 at highest precision) on seeded random shapes. Cache slots past each row's
length and tree entries that no query sees hold NaN/inf, so any out-of-range read fails.
Tolerances are keyed to the input dtype, fixed here, and never relaxed to make a test pass.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.pallas_kernels.tree_attention import (IMPLEMENTATIONS, tree_attention,
                                                    tree_attention_dense)
from specjax.pallas_kernels.tree_attention import api, kernel

TOLERANCES = {  # dtype -> (atol, rtol); fixed up front
    jnp.dtype(jnp.float32): (2e-5, 2e-5),
    jnp.dtype(jnp.bfloat16): (2e-2, 2e-2),
}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    batch: int
    nodes: int  # T
    heads: int  # H
    kv_heads: int  # KVH
    head_dim: int
    cache: int  # S
    width: int  # W (tree block entries, >= nodes)
    lengths: tuple[int, ...]
    block_k: int
    num_splits: int
    scale: float | None = None
    hidden_nodes: int = 0  # trailing padding nodes whose mask row and column are all False


# Head dim 64 and block_k 64 so that every case also fits the Mosaic GPU kernel (wgmma tiles).
CASES = (
    # GQA (2 query heads per kv head); a partial prefix, an empty one, a full cache; S = 150 is
    # not a multiple of block_k; W > T (the extra entries are never visible); 2 K-splits (row
    # 0's second split lies past its length; row 2's first split accumulates two blocks).
    Case("gqa_mixed_lengths", batch=3, nodes=5, heads=4, kv_heads=2, head_dim=64, cache=150,
         width=7, lengths=(75, 0, 150), block_k=64, num_splits=2, hidden_nodes=1),
    # Multi-query (KVH = 1), a single-node tree, full cache and a short prefix, custom scale.
    Case("mqa_single_node", batch=2, nodes=1, heads=4, kv_heads=1, head_dim=64, cache=100,
         width=1, lengths=(100, 3), block_k=64, num_splits=3, scale=0.3),
    # Plain multi-head (H = KVH); T not a multiple of any tile; a cache shorter than block_k.
    Case("mha_short_cache", batch=2, nodes=6, heads=2, kv_heads=2, head_dim=64, cache=40,
         width=6, lengths=(17, 40), block_k=64, num_splits=1),
    # Several whole blocks and a partial one with S a multiple of 8 (the Mosaic GPU kernel
    # reads such a cache in place, without the copy S = 150 or 100 needs); 2 splits of 2
    # blocks; one length ends exactly on a block boundary.
    Case("gqa_in_place_tail", batch=2, nodes=3, heads=6, kv_heads=3, head_dim=64, cache=200,
         width=3, lengths=(200, 128), block_k=64, num_splits=2),
)


def random_parents(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random tree in topological order: parent[0] = -1 (root), parent[i] < i."""
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)], np.int32)


def ancestor_mask(parent: np.ndarray) -> np.ndarray:
    """mask[i, j] = j is i or an ancestor of i."""
    n = len(parent)
    mask = np.zeros((n, n), bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parent[j]
    return mask


def make_inputs(case: Case, dtype, seed: int = 0) -> tuple[jax.Array, ...]:
    """Seeded inputs with NaN/inf poisoned into every entry that no query may read."""
    rng = np.random.default_rng(seed)
    b, t, w, s = case.batch, case.nodes, case.width, case.cache
    kvh, dh = case.kv_heads, case.head_dim
    normal = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    q = normal(b, t, case.heads, dh)
    k_cache, v_cache = normal(b, s, kvh, dh), normal(b, s, kvh, dh)
    k_tree, v_tree = normal(b, w, kvh, dh), normal(b, w, kvh, dh)
    lengths = np.asarray(case.lengths, np.int32)
    tree_mask = np.zeros((b, t, w), bool)
    real = t - case.hidden_nodes
    for row in range(b):
        tree_mask[row, :real, :real] = ancestor_mask(random_parents(rng, real))
    for row in range(b):
        k_cache[row, lengths[row]:] = np.nan
        v_cache[row, lengths[row]:] = np.inf if row % 2 else np.nan
    hidden = ~tree_mask.any(axis=1)  # [B, W]: entries no query sees
    k_tree[hidden] = np.nan
    v_tree[hidden] = np.nan
    cast = lambda x: jnp.asarray(x).astype(dtype)  # noqa: E731
    return (cast(q), cast(k_cache), cast(v_cache), jnp.asarray(lengths), cast(k_tree),
            cast(v_tree), jnp.asarray(tree_mask))


_dense = jax.jit(tree_attention_dense, static_argnames=("scale",))
_tpu_interpret = jax.jit(functools.partial(kernel.tree_attention_pallas, mode="tpu_interpret"),
                         static_argnames=("scale", "block_k", "num_splits"))


def _smollm2_shapes(dtype, nodes=64, cache=2048, width=64):
    """Abstract inputs at SmolLM2-135M head shapes (H=9, KVH=3, Dh=64), batch 1."""
    b, h, kvh, dh = 1, 9, 3, 64
    shapes = [((b, nodes, h, dh), dtype), ((b, cache, kvh, dh), dtype),
              ((b, cache, kvh, dh), dtype), ((b,), jnp.int32), ((b, width, kvh, dh), dtype),
              ((b, width, kvh, dh), dtype), ((b, nodes, width), jnp.bool_)]
    return [jax.ShapeDtypeStruct(shape, dt) for shape, dt in shapes]


class TreeAttentionTestBase:
    """The shared suite; subclasses set IMPLEMENTATION (and may override ``attend``)."""

    IMPLEMENTATION: str = "xla"
    DTYPES = (jnp.float32, jnp.bfloat16)  # input dtypes the backend runs itself

    def attend(self, *args, scale=None, block_k=64, num_splits=1):
        return tree_attention(*args, scale=scale, implementation=self.IMPLEMENTATION,
                              block_k=block_k, num_splits=num_splits)

    def run_case(self, case: Case, dtype, seed: int = 0):
        if jnp.dtype(dtype) not in map(jnp.dtype, self.DTYPES):
            pytest.skip(f"{self.IMPLEMENTATION} hands {jnp.dtype(dtype)} to 'xla'")
        args = make_inputs(case, dtype, seed)
        out = self.attend(*args, scale=case.scale, block_k=case.block_k,
                          num_splits=case.num_splits)
        return args, out

    @pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
    @pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
    def test_matches_dense_oracle(self, case, dtype):
        args, out = self.run_case(case, dtype)
        assert out.shape == args[0].shape and out.dtype == jnp.dtype(dtype)
        expected = _dense(*args, scale=case.scale)
        atol, rtol = TOLERANCES[jnp.dtype(dtype)]
        np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), np.asarray(expected),
                                   atol=atol, rtol=rtol)

    def test_query_that_sees_nothing_returns_zeros(self):
        case = CASES[0]  # row 1 has an empty prefix; its last node sees no tree entry
        args, out = self.run_case(case, self.DTYPES[0])
        assert not bool(args[-1][1, -1].any()) and int(args[3][1]) == 0
        np.testing.assert_array_equal(np.asarray(out[1, -1].astype(jnp.float32)), 0.0)
        assert np.isfinite(np.asarray(out.astype(jnp.float32))).all()

    def test_deterministic(self):
        case = CASES[0]
        args = make_inputs(case, self.DTYPES[0], seed=1)
        kw = dict(scale=case.scale, block_k=case.block_k, num_splits=case.num_splits)
        first, second = self.attend(*args, **kw), self.attend(*args, **kw)
        np.testing.assert_array_equal(np.asarray(first.astype(jnp.float32)),
                                      np.asarray(second.astype(jnp.float32)))

    def test_under_jit_with_traced_lengths(self):
        case = CASES[0]
        dtype = self.DTYPES[0]
        args = make_inputs(case, dtype, seed=2)
        fn = jax.jit(functools.partial(self.attend, block_k=case.block_k,
                                       num_splits=case.num_splits))
        atol, rtol = TOLERANCES[jnp.dtype(dtype)]
        np.testing.assert_allclose(np.asarray(fn(*args).astype(jnp.float32)),
                                   np.asarray(_dense(*args)), atol=atol, rtol=rtol)


class TestXla(TreeAttentionTestBase):
    IMPLEMENTATION = "xla"


class TestPallasInterpret(TreeAttentionTestBase):
    IMPLEMENTATION = "pallas_interpret"


class TestMosaicTpuKernelInTpuInterpreter(TreeAttentionTestBase):
    """The Mosaic TPU variant (scalar prefetch, TPU compiler params) run by the TPU
    interpreter on CPU: checks its semantics, not its compilation. The extra tests of the base
    already ran on the same kernel under "pallas_interpret"."""

    IMPLEMENTATION = "pallas_mosaic_tpu"
    test_deterministic = None
    test_under_jit_with_traced_lengths = None

    # A subset of the oracle cases (the full set runs on the same kernel under
    # "pallas_interpret"; the TPU interpreter is slower).
    @pytest.mark.parametrize("case,dtype", [(CASES[0], jnp.float32), (CASES[0], jnp.bfloat16),
                                            (CASES[2], jnp.float32)],
                             ids=["gqa_mixed_lengths-f32", "gqa_mixed_lengths-bf16",
                                  "mha_short_cache-f32"])
    def test_matches_dense_oracle(self, case, dtype):
        super().test_matches_dense_oracle(case, dtype)

    def attend(self, *args, scale=None, block_k=64, num_splits=1):
        return _tpu_interpret(*args, scale=scale, block_k=block_k, num_splits=num_splits)

    def test_lowers_for_tpu(self):
        """Pallas -> Mosaic TPU lowering (block-shape rules included) at SmolLM2 head shapes,
        exported for the TPU platform from this machine; Mosaic's own compilation is not run."""
        for dtype in (jnp.float32, jnp.bfloat16):
            fn = jax.jit(functools.partial(kernel.tree_attention_pallas, block_k=256,
                                           num_splits=2, mode="tpu"))
            exported = jax.export.export(fn, platforms=["tpu"])(*_smollm2_shapes(dtype))
            assert "tpu_custom_call" in exported.mlir_module()


class TestMosaicGpuKernelInGpuInterpreter(TreeAttentionTestBase):
    """The Mosaic GPU kernel run by the Mosaic GPU interpreter on CPU (TMA copies, barriers,
    the length-bounded double-buffered loop, masking, the V-tail zeroing, the stores). The
    interpreter has no rule for register layouts and no transposed or register wgmma operand,
    so in this mode the two matmuls are jnp dots and layout casts are skipped: it checks the
    kernel's logic, not its lowering (see test_lowers_for_cuda) or its speed."""

    IMPLEMENTATION = "pallas_mosaic_gpu"
    DTYPES = (jnp.bfloat16,)
    test_deterministic = None
    test_under_jit_with_traced_lengths = None

    def attend(self, *args, scale=None, block_k=64, num_splits=1):
        try:  # not exported publicly in JAX 0.10.2
            from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams
        except ImportError:
            pytest.skip("this JAX has no Mosaic GPU interpreter")
        return api._mosaic_gpu()(*args, scale=scale, block_k=block_k, num_splits=num_splits,
                                 interpret=InterpretGPUParams())

    # 2048: whole blocks only; 200: a partial block, S a multiple of 8 (cache read in place);
    # 150: S not a multiple of 8 (the TMA descriptor tiles S by 8, which failed on an H100
    # before the kernel passed such caches as whole blocks plus a tail; this export reproduces
    # that error); 40 and 36: shorter than one block (the tail buffer stands in for the cache).
    @pytest.mark.parametrize("cache", [2048, 200, 150, 40, 36])
    def test_lowers_for_cuda(self, cache):
        """The real (non-interpreted) kernel goes through the whole Mosaic GPU lowering (wgmma,
        TMA descriptors, mbarriers) when exported for CUDA from this machine; PTX compilation
        and running need a GPU."""
        fn = jax.jit(functools.partial(api._mosaic_gpu(), block_k=64, num_splits=8))
        exported = jax.export.export(fn, platforms=["cuda"])(
            *_smollm2_shapes(jnp.bfloat16, cache=cache))
        assert "mosaic_gpu" in exported.mlir_module()


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="needs a TPU")
class TestMosaicTpu(TreeAttentionTestBase):
    IMPLEMENTATION = "pallas_mosaic_tpu"


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")
class TestMosaicGpu(TreeAttentionTestBase):
    IMPLEMENTATION = "pallas_mosaic_gpu"
    DTYPES = (jnp.bfloat16,)  # float32 goes to "xla" (wgmma would run it in tf32)


class TestApi:
    def _args(self, dtype=jnp.float32):
        return make_inputs(CASES[1], dtype)

    def test_implementations_listed(self):
        assert IMPLEMENTATIONS == ("xla", "pallas_interpret", "pallas_mosaic_gpu",
                                   "pallas_mosaic_tpu")

    def test_unknown_implementation_raises_with_valid_names(self):
        with pytest.raises(ValueError, match="pallas_interpret.*pallas_mosaic_gpu"):
            tree_attention(*self._args(), implementation="triton")

    @pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU fallback behaviour")
    @pytest.mark.parametrize("name", ["pallas_mosaic_gpu", "pallas_mosaic_tpu"])
    def test_unavailable_backend_falls_back_to_xla_with_warning(self, name):
        args = self._args()
        with pytest.warns(UserWarning, match=f"{name}.*falling back to 'xla'"):
            out = tree_attention(*args, implementation=name)
        np.testing.assert_array_equal(np.asarray(out),
                                      np.asarray(tree_attention(*args, implementation="xla")))

    @pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU default")
    def test_default_on_cpu_is_xla_without_warning(self):
        assert api.default_implementation() == "xla"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tree_attention(*self._args())

    def test_gpu_kernel_dtype_fallback(self, monkeypatch):
        monkeypatch.setattr(api.jax, "default_backend", lambda: "gpu")
        assert api.default_implementation() == "pallas_mosaic_gpu"
        assert api.resolve_implementation(None, jnp.bfloat16) == "pallas_mosaic_gpu"
        with pytest.warns(UserWarning, match="float32.*falling back to 'xla'"):
            assert api.resolve_implementation(None, jnp.float32) == "xla"
        with pytest.warns(UserWarning, match="head dim.*falling back to 'xla'"):
            assert api.resolve_implementation(None, jnp.bfloat16, head_dim=48) == "xla"

    def test_bad_shapes_raise(self):
        q, kc, vc, lengths, kt, vt, mask = self._args()
        with pytest.raises(ValueError, match="tree_mask"):
            tree_attention(q, kc, vc, lengths, kt, vt, mask[:, :, :0])
        two_kv_heads = jnp.concatenate([kc, kc], axis=2)
        with pytest.raises(ValueError, match="multiple of kv heads"):
            tree_attention(q[:, :, :3], two_kv_heads, two_kv_heads, lengths, kt, vt, mask)
