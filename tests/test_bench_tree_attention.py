"""scripts/bench_tree_attention.py on CPU at tiny sizes: its rows, the correctness check that
gates each timing, and the prefix-only and batched modes used on GPUs."""

import json

import pytest
from script_helpers import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_tree_attention")


TINY = ["--nodes", "3", "--lengths", "70", "--repeats", "1", "--warmup", "0", "--copy-mb", "4"]


@pytest.mark.parametrize("part,batch", [("op", 1), ("prefix", 2)])
def test_rows_are_checked_and_timed(bench, tmp_path, part, batch):
    out = tmp_path / "r.json"
    rc = bench.main(TINY + ["--implementations", "xla", "pallas_interpret", "--part", part,
                            "--batch", str(batch), "--output", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["part"] == part and result["shapes"]["batch"] == batch
    rows = result["rows"]
    assert {r["implementation"] for r in rows} == {"xla", "pallas_interpret"}
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    for r in rows:
        assert "error" not in r
        assert r["check_excess_over_rtol"] <= bench.CHECK_TOLERANCES[r["dtype"]][0]
        assert r["median_s"] > 0 and r["bytes"] > 0 and r["batch"] == batch
    # bytes grow with the batch (the prefix K/V of every row is read)
    assert bench.bytes_moved(3, 70, 2, 2, part) > bench.bytes_moved(3, 70, 2, 1, part)


def test_a_wrong_implementation_fails_its_case(bench, tmp_path, monkeypatch, capsys):
    import specjax.pallas_kernels.tree_attention as package

    real = package.tree_attention

    def off_by_a_bit(*args, implementation="xla", **kw):
        out = real(*args, implementation=implementation, **kw)
        return out if implementation == "xla" else out + 0.1

    monkeypatch.setattr(package, "tree_attention", off_by_a_bit)
    out = tmp_path / "r.json"
    rc = bench.main(TINY + ["--implementations", "xla", "pallas_interpret", "--dtypes",
                            "float32", "--output", str(out)])
    assert rc == 1
    rows = {r["implementation"]: r for r in json.loads(out.read_text())["rows"]}
    assert "error" not in rows["xla"] and "median_s" in rows["xla"]
    assert "wrong result" in rows["pallas_interpret"]["error"]
    assert "median_s" not in rows["pallas_interpret"]
    assert "1 case(s) failed" in capsys.readouterr().err


def test_part_prefix_checks_the_prefix_kernel_itself(bench, tmp_path, monkeypatch):
    """--part prefix compares what it times, the prefix partial, with XLA's: a prefix kernel
    off by a bit fails its case."""
    import specjax.pallas_kernels.tree_attention.kernel as kernel

    real = kernel.prefix_partial_pallas

    def off_by_a_bit(*args, **kw):
        part = real(*args, **kw)
        return part._replace(acc=part.acc * 1.01)

    monkeypatch.setattr(kernel, "prefix_partial_pallas", off_by_a_bit)
    out = tmp_path / "r.json"
    rc = bench.main(TINY + ["--implementations", "xla", "pallas_interpret", "--dtypes",
                            "float32", "--part", "prefix", "--output", str(out)])
    assert rc == 1
    rows = {r["implementation"]: r for r in json.loads(out.read_text())["rows"]}
    assert "error" not in rows["xla"]
    assert "wrong result" in rows["pallas_interpret"]["error"]


def test_normalised_prefix_is_split_independent(bench):
    """acc / l does not depend on the running max a partial is kept relative to."""
    import numpy as np

    from specjax.pallas_kernels.tree_attention.reference import Partial

    acc = np.array([[2.0, 4.0], [0.0, 0.0]])
    part = Partial(acc=acc, m=np.array([1.0, -np.inf]), l=np.array([2.0, 0.0]))
    shifted = Partial(acc=acc * np.exp(-1.0), m=np.array([2.0, -np.inf]),
                      l=np.array([2.0 * np.exp(-1.0), 0.0]))
    np.testing.assert_allclose(bench.normalised_prefix(part), [[1.0, 2.0], [0.0, 0.0]])
    np.testing.assert_allclose(bench.normalised_prefix(shifted), bench.normalised_prefix(part))
