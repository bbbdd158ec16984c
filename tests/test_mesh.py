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
KERNELS_CHECK = Path(__file__).with_name("mesh_kernels_check.py")


def _run(*flags, script=CHECK):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    r = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True,
                       env=env, timeout=1800, cwd=Path(__file__).parent)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_data_parallel_decoding_is_identical_quick():
    assert _run("--quick") == {"mismatch": []}


@pytest.mark.parametrize("decode", [pytest.param(False, id="ops"),
                                    pytest.param(True, id="decode", marks=pytest.mark.long)])
def test_invariant_kernels_run_per_shard_on_a_mesh(decode):
    """Exact numerics' Pallas kernels inside shard_map (interpret mode): each device's kernel
    sees its shard; one device's bits where the split allows, batch invariance where a
    row-parallel product adds partials (decode: prompt lookup = plain decoding on a
    data=2,model=2 mesh, and = one device)."""
    got = _run(*(["--decode"] if decode else []), script=KERNELS_CHECK)
    assert got["mismatch"] == []
    # the op checks trace 3 products and 1 attention part under the mesh (and 3 more
    # products alone, for the one-device and row-alone comparisons)
    assert got["meshed"]["matmul"] >= 3 and got["meshed"]["attention"] >= 1


@pytest.mark.long
def test_data_parallel_decoding_is_identical_every_method():
    assert _run() == {"mismatch": []}


# suite time: training on meshes runs under -m long (40 s quick on CI's 2 cores); decoding on a
# mesh and two processes stay in the default run
@pytest.mark.parametrize("quick", [pytest.param(True, id="quick", marks=pytest.mark.long),
                                   pytest.param(False, id="full", marks=pytest.mark.long)])
def test_training_on_meshes_equals_one_device_and_resumes_on_another_mesh(quick):
    assert _run(*(["--quick"] if quick else []), script=TRAIN_CHECK) == {"mismatch": []}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("quick", [pytest.param(True, id="quick"),
                                   pytest.param(False, id="full", marks=pytest.mark.long)])
def test_two_processes_decode_like_one_device(quick):
    """Two processes joined by jax.distributed (4 simulated CPU devices each): meshes spanning
    both give one device's tokens, and both processes return the same result (quick: plain
    decoding, greedy; full: prompt lookup and sampling too)."""
    env = dict(os.environ, XLA_FLAGS=os.environ.get("SPECJAX_TEST_XLA_FLAGS", ""))
    addr = f"localhost:{_free_port()}"
    script = Path(__file__).with_name("multihost_check.py")
    flags = ["--quick"] if quick else []
    procs = [subprocess.Popen([sys.executable, str(script), addr, "2", str(i), *flags],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=Path(__file__).parent) for i in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=900)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    assert [o["process"] for o in outs] == [0, 1] and [o["main"] for o in outs] == [True, False]
    assert all(o["devices"] == 8 and o["local"] == 4 for o in outs)
    assert outs[0]["mismatch"] == [] and outs[1]["mismatch"] == []
    assert outs[0]["tokens"] == outs[1]["tokens"] and len(outs[0]["tokens"]) == (2 if quick
                                                                                 else 8)


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


def test_sharding_table_and_launch_arguments():
    from specjax.distributed import initialize
    from specjax.sharding import ShardingTable, plan

    with pytest.raises(ConfigError, match="ShardingTable.heads must be one of data, model"):
        ShardingTable(heads="rows")
    from specjax.config import tiny_config

    p = plan(tiny_config(), make_mesh("data=1"))  # one device: nothing split, nothing to say
    assert all(v == {"axis": None} for v in p.values())
    with pytest.raises(ConfigError, match="together"):
        initialize("localhost:1234", None, None)
    with pytest.raises(ConfigError, match=r"process_id must be in \[0, num_processes\)"):
        initialize("localhost:1234", 2, 2)


def test_one_kernel_placement_for_every_pallas_kernel():
    """The tree-attention kernels and exact numerics' kernels read one placement context: the
    table's KernelMesh, or the one a KV cache's sharding gives."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from specjax.config import tiny_config
    from specjax.pallas_kernels import invariant_mesh, placement
    from specjax.pallas_kernels.tree_attention import api
    from specjax.sharding import cache_sharding, kernel_mesh

    mesh = jax.make_mesh((1, 1), ("data", "model"))
    km = placement.KernelMesh.of_cache(
        NamedSharding(mesh, PartitionSpec("data", "model", None, None)))
    assert (km.rows, km.kv_heads, km.weights) == ("data", "model", ())
    assert km.fits("data", 3) is None  # one device: nothing to split
    assert invariant_mesh.KernelMesh is placement.KernelMesh
    assert placement.current() is None
    with api.sharded(NamedSharding(mesh, PartitionSpec("data"))):
        assert placement.current().rows == "data" and placement.current().kv_heads is None
        assert invariant_mesh.current() is placement.current()
        with api.sharded(None):
            assert placement.current() is None
    assert placement.current() is None
    cfg = tiny_config()
    table = kernel_mesh(cfg, mesh, batch=2)
    spec = tuple(cache_sharding(cfg, mesh, batch=2).spec) + (None,) * 2
    assert (table.rows, table.kv_heads) == spec[:2]
    assert {name for name, *_ in table.weights} >= {"wqkv", "wo", "w_gate_up", "w_down"}
