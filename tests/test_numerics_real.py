"""Invariant ("exact") numerics on the real SmolLM2-135M (issue 22): the real-model checks of
tests/numerics_checks.py in a subprocess with XLA's default CPU options (see
tests/test_numerics.py). A file of its own so that the test processes share the work."""

import pytest

from test_numerics import _pytest


@pytest.mark.real_model
def test_exact_numerics_checks_real_model():
    _pytest("real_model and not long")
