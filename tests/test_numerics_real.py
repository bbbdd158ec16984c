"""Invariant ("exact") numerics on the real SmolLM2-135M (issue 22): the real-model checks of
tests/numerics_checks.py in a subprocess with XLA's default CPU options (see
tests/test_numerics.py). A file of its own so that the test processes share the work."""

import pytest

from test_numerics import _pytest


# suite time (75 s on CI's 2 cores): the tiny models' exact numerics run by default
# (tests/test_numerics.py); the real model's under -m long and in the benchmarks, whose every
# speculative row is checked token for token against plain decoding
@pytest.mark.real_model
@pytest.mark.long
def test_exact_numerics_checks_real_model():
    _pytest("real_model and not long")
