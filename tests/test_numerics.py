"""Invariant ("exact") numerics (issue 22): the checks in tests/numerics_checks.py, run in a
subprocess with XLA's default CPU backend options.

The rest of the suite compiles with LLVM -O0 (tests/conftest.py: faster compiles); exact
numerics are about the kernels users run, which -O0 changes (an eager op-by-op forward has
differed there), so these checks run as users run. ``-m long`` here runs their long grid too.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("numerics_checks.py")


def _pytest(marker: str):
    # conftest only sets XLA_FLAGS when it is unset; the probes are measured, not read back
    env = dict(os.environ, XLA_FLAGS="", SPECJAX_PROBE_CACHE="off", SPECJAX_VERIFY_BUCKETS="all")
    r = subprocess.run([sys.executable, "-m", "pytest", str(CHECKS), "-q", "-p",
                        "no:cacheprovider", "-m", marker, "-x"], capture_output=True,
                       text=True, env=env, cwd=CHECKS.parent.parent, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert " passed" in r.stdout


def test_exact_numerics_checks():
    _pytest("not long and not real_model")  # the real model's: tests/test_numerics_real.py


@pytest.mark.long
def test_exact_numerics_checks_full_grid():
    _pytest("long")


# ----------------------------------------------------------------------------- stored probe answers


@pytest.fixture
def probe_store(tmp_path, monkeypatch):
    from specjax.models import numerics

    monkeypatch.setenv("SPECJAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECJAX_PROBE_CACHE", raising=False)

    def fresh():  # a new process: nothing remembered in memory
        numerics.row_count_invariant.cache_clear()
        numerics._loaded.clear()

    fresh()
    yield numerics, fresh
    fresh()


def _ask(numerics, m=3):
    import jax

    from specjax.models.llama import chunked_matmul

    return numerics.row_count_invariant("linear", m, (32, 32, 1), "float32",
                                        jax.default_backend(), chunked_matmul)


def test_probe_answers_are_stored_and_read_back(probe_store, monkeypatch):
    numerics, fresh = probe_store
    got = _ask(numerics)
    path = numerics.probe_cache_path()
    data = json.loads(path.read_text())
    assert data["key"] == numerics.probe_key()
    (entry, value), = data["answers"].items()
    assert entry.startswith("linear|3|32,32,1|float32|") and value == got
    # a later process reads the answer instead of probing: flip it on disk to see that
    data["answers"][entry] = not got
    path.write_text(json.dumps(data))
    fresh()
    assert _ask(numerics) == (not got)
    # refresh measures again and stores the measurement
    monkeypatch.setenv("SPECJAX_PROBE_CACHE", "refresh")
    fresh()
    assert _ask(numerics) == got
    assert json.loads(path.read_text())["answers"][entry] == got


def test_bad_probe_store_is_measured_again_with_a_warning(probe_store):
    numerics, fresh = probe_store
    path = numerics.probe_cache_path()
    path.parent.mkdir(parents=True)
    for bad in ("{not json", json.dumps({"key": {"device": "another"}, "answers": {}})):
        path.write_text(bad)
        fresh()
        with pytest.warns(numerics.ProbeCacheWarning, match="ignoring stored probe answers"):
            got = _ask(numerics)
        assert json.loads(path.read_text())["answers"] == {
            next(iter(json.loads(path.read_text())["answers"])): got}


def test_probe_store_off_and_bad_mode(probe_store, monkeypatch):
    numerics, fresh = probe_store
    monkeypatch.setenv("SPECJAX_PROBE_CACHE", "off")
    _ask(numerics)
    assert not numerics.probe_cache_path().exists()
    monkeypatch.setenv("SPECJAX_PROBE_CACHE", "sometimes")
    fresh()
    with pytest.raises(ValueError, match=r"\$SPECJAX_PROBE_CACHE='sometimes': must be one of "
                                         "auto, refresh, off"):
        _ask(numerics)


# ----------------------------------------------------------------------------- compiler options


def test_exact_programs_compile_without_excess_precision(monkeypatch):
    """The engine compiles an exact loop's programs with EXACT_COMPILER_OPTIONS and a fast
    loop's with XLA's defaults (an H100 kept bfloat16 intermediates in float32 inside fusions
    that differ between a two-token block and one-token decoding: issue 22)."""
    import jax.numpy as jnp

    from specjax import engine
    from specjax.config import tiny_config
    from specjax.models import numerics
    from specjax.models.loaders import random_model

    seen = []

    class Lowered:
        def compile(self, compiler_options=None):
            seen.append(compiler_options)
            return lambda *a: None

    class Fn:
        def lower(self, loop, *args, **statics):
            return Lowered()

    model = random_model(tiny_config(vocab_size=64, num_layers=1), seed=0, dtype=jnp.bfloat16)
    for mode in ("exact", "fast"):
        model.set_numerics(mode)
        loop = engine.make_loop(model)
        assert loop.exact == (mode == "exact")
        engine._Compiled().get(Fn(), loop, (jnp.zeros(3),), {})
    assert seen == [{"xla_allow_excess_precision": False}, None]
    assert numerics.compiler_options(True) == numerics.EXACT_COMPILER_OPTIONS


def test_xla_accepts_the_exact_compiler_options():
    """XLA refuses an option it does not know ("No such compile option"): a jaxlib that
    renamed it fails here, not in a user's run."""
    import jax
    import jax.numpy as jnp

    from specjax.models import numerics

    f = jax.jit(lambda x: (x * 1.5 + 2).sum(), compiler_options=numerics.compiler_options(True))
    assert float(f(jnp.ones(4, jnp.bfloat16))) == 14.0


def test_not_before_keeps_values_and_depends_on_its_dependency():
    """``numerics.not_before(x, dep)`` is ``x`` (equal values, shape and dtype) and, unlike an
    optimisation barrier, stays a data dependency on ``dep`` in the compiled program."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from specjax.models.numerics import not_before

    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 5)), jnp.bfloat16)
    dep = jnp.asarray([[0.25, 3.0]], jnp.float32)
    y = jax.jit(not_before)(x, dep)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(np.asarray(y, np.float32), np.asarray(x, np.float32))
    hlo = jax.jit(not_before).lower(x, dep).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    assert "parameter(1)" in entry and "multiply" in hlo  # dep is read, not folded away
