"""Decoding and training on a device mesh (issue 25): data-parallel rows give exactly the
single-device output; a data-parallel train step equals the single-device one within float
tolerance. The mesh runs need 8 simulated CPU devices, so they run in a subprocess
(tests/mesh_check.py) and the rest of the suite keeps one device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specjax.errors import ConfigError
from specjax.mesh import data_parallel, make_mesh, parse_mesh_spec

CHECK = Path(__file__).with_name("mesh_check.py")
TRAIN_CHECK = Path(__file__).with_name("mesh_train_check.py")


def _run(*flags, script=CHECK):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True,
                       env=env, timeout=1800, cwd=Path(__file__).parent)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_data_parallel_decoding_is_identical_quick():
    assert _run("--quick") == {"mismatch": []}


@pytest.mark.long
def test_data_parallel_decoding_is_identical_every_method():
    assert _run() == {"mismatch": []}


def test_data_parallel_training_equals_one_device_and_resumes_on_another_mesh():
    assert _run(script=TRAIN_CHECK) == {"mismatch": []}


def test_mesh_specs_and_errors():
    assert parse_mesh_spec("data=4, model=1") == {"data": 4, "model": 1}
    with pytest.raises(ConfigError, match="AXIS=SIZE"):
        parse_mesh_spec("data:4")
    with pytest.raises(ConfigError, match="axes must be among data, model"):
        parse_mesh_spec("rows=2")
    with pytest.raises(ConfigError, match="given twice"):
        parse_mesh_spec("data=2,data=2")
    with pytest.raises(ConfigError, match=r"needs 16 devices; 1 are visible .*"
                       "device_count=16"):
        make_mesh("data=16")
    m = make_mesh("data=1")
    assert data_parallel(m, 3)[0] == 3
    with pytest.raises(ConfigError, match="must be a jax.sharding.Mesh"):
        data_parallel({"data": 2}, 2)
