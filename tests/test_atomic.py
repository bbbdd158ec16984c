"""specjax.atomic: a file is replaced whole or not at all."""

import pytest

from specjax import atomic


def test_write_and_replace(tmp_path):
    p = tmp_path / "sub" / "f.json"
    atomic.write_text(p, "one")
    assert p.read_text() == "one"
    atomic.write_bytes(p, b"two", fsync=True)
    assert p.read_bytes() == b"two"
    assert sorted(x.name for x in p.parent.iterdir()) == ["f.json"]


def test_an_error_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.txt"
    atomic.write_text(p, "old")
    with pytest.raises(RuntimeError):
        with atomic.replacing(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]
