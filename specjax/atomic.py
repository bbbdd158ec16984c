"""Writing files so that a reader never sees half of one: the content goes to a temporary file
beside the target, which then replaces it in one rename (``os.replace``); on an error the
temporary file is removed and the old file stays. Used by every cache and resumable output
(probe answers, cost curves, the suffix cache, corpus shards and manifests, collected samples).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path beside ``path`` (its directory is created) for the caller to
    write; when the block ends without an error it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> Path:
    """Writes ``data`` to ``path`` atomically (``fsync``: flushed to disk before the rename)."""
    with replacing(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))
