"""Invariant ("exact") numerics (issue 22): the checks in tests/numerics_checks.py, run in a
subprocess with XLA's default CPU backend options.

The rest of the suite compiles with LLVM -O0 (tests/conftest.py: faster compiles); exact
numerics are about the kernels users run, which -O0 changes (an eager op-by-op forward has
differed there), so these checks run as users run. ``-m long`` here runs their long grid too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("numerics_checks.py")


def _pytest(marker: str):
    env = dict(os.environ, XLA_FLAGS="")  # conftest only sets XLA_FLAGS when it is unset
    r = subprocess.run([sys.executable, "-m", "pytest", str(CHECKS), "-q", "-p",
                        "no:cacheprovider", "-m", marker, "-x"], capture_output=True,
                       text=True, env=env, cwd=CHECKS.parent.parent, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert " passed" in r.stdout


def test_exact_numerics_checks():
    _pytest("not long")


@pytest.mark.long
def test_exact_numerics_checks_full_grid():
    _pytest("long")
