"""Token documents saved as ``.npz`` files, bound to one vocabulary: the file format and the
checks shared by the suffix cache (:mod:`specjax.drafters.suffix`) and the SSSD datastore
(:mod:`specjax.drafters.sssd`); and the header checks of the table files of Token Recycling
and STAND (:func:`read_tables`).

A file holds ``meta`` (JSON: ``format``, ``version``, ``vocab_size``, ``tokenizer`` and the
owner's own fields), ``tokens`` (int32, every document concatenated) and ``lengths`` (one per
document). ``what`` names the owner in errors ("suffix cache"), ``noun`` its short name
("cache").
"""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path

import numpy as np

from specjax import atomic
from specjax.errors import DrafterError


def shipped_file(directory: Path, suffix: str, header_key: str, vocab_size: int,
                 tokenizer: str | None, what: str) -> Path | None:
    """The first ``directory/*<suffix>`` file (sorted by name) whose JSON header (the array
    ``header_key``) says it was built for this vocabulary and tokenizer, or None (no
    tokenizer digest: nothing matches). A file that cannot be read is skipped with a warning
    naming it (``what``: the owner, "SSSD datastore"), never silently: a broken package
    install should not look like a model without shipped data."""
    if tokenizer is None or not directory.is_dir():
        return None
    for path in sorted(directory.glob(f"*{suffix}")):
        try:
            with np.load(path, allow_pickle=False) as z:
                header = json.loads(bytes(z[header_key]).decode())
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError,
                UnicodeDecodeError, EOFError) as e:
            warnings.warn(f"the shipped {what} {path} cannot be read ({type(e).__name__}: "
                          f"{e}); it is skipped", stacklevel=3)
            continue
        if isinstance(header, dict) and header.get("vocab_size") == vocab_size and \
                header.get("tokenizer") == tokenizer:
            return path
    return None


def check_binding(what: str, where: str, have_vocab: int | None, have_tok: str | None,
                  vocab_size: int, tokenizer: str | None) -> None:
    """Refuses a vocabulary or tokenizer other than the one the documents were built with."""
    if have_vocab is not None and have_vocab != vocab_size:
        raise DrafterError(f"{what} {where} holds token ids of a vocabulary of {have_vocab}, "
                           f"but the target's has {vocab_size}: it was built for another model")
    if have_tok is not None and tokenizer is not None and have_tok != tokenizer:
        raise DrafterError(f"{what} {where} was built with another tokenizer (digest "
                           f"{have_tok}, the target's is {tokenizer}): its token ids mean "
                           f"other text")


def write(path: Path, meta: dict, docs, *, compressed: bool = False) -> Path:
    """Writes ``docs`` (int32 arrays) and ``meta`` to ``path`` atomically."""
    lengths = np.asarray([d.size for d in docs], np.int64)
    tokens = np.concatenate(list(docs)) if len(docs) else np.zeros((0,), np.int32)
    save = np.savez_compressed if compressed else np.savez
    with atomic.replacing(path) as tmp, open(tmp, "wb") as f:
        save(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             tokens=tokens.astype(np.int32), lengths=lengths)
    return path


def read(path: Path, fmt: str, version: int, what: str, noun: str
         ) -> tuple[dict, list[np.ndarray]]:
    """``(meta, documents)`` of a file written by :func:`write`, checked: missing, unreadable,
    another format or version, lengths that do not split the tokens, ids outside the
    vocabulary are errors naming the file."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            tokens = np.asarray(z["tokens"])
            lengths = np.asarray(z["lengths"])
    except FileNotFoundError:
        raise DrafterError(f"{what} file {path} does not exist") from None
    except Exception as e:
        raise DrafterError(f"{what} file {path} is not a readable {noun} "
                           f"({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise DrafterError(f"{path} is not a specjax {what} (format "
                           f"{meta.get('format') if isinstance(meta, dict) else meta!r})")
    if meta.get("version") != version:
        raise DrafterError(f"{what} {path} has format version {meta.get('version')!r}; this "
                           f"specjax reads version {version}")
    if tokens.dtype != np.int32 or tokens.ndim != 1 or lengths.ndim != 1 or \
            int(lengths.sum()) != tokens.size or (lengths.size and lengths.min() < 1):
        raise DrafterError(f"{what} {path} is corrupt: {tokens.size} tokens ({tokens.dtype}) "
                           f"do not split into its {lengths.size} document lengths")
    vocab = meta.get("vocab_size")
    if tokens.size and (tokens.min() < 0 or (vocab is not None and tokens.max() >= vocab)):
        raise DrafterError(f"{what} {path} is corrupt: token ids outside [0, {vocab})")
    docs = np.split(tokens, np.cumsum(lengths)[:-1]) if lengths.size else []
    return meta, docs


def read_tables(path: Path, owner: str, label: str, fmt: str, version: int,
                names: tuple[str, ...], want: dict, tokenizer: str | None,
                meaning: str) -> tuple[dict, dict[str, np.ndarray]]:
    """``(header, arrays)`` of a table file (an ``.npz`` of a JSON ``header`` and the arrays
    ``names``), checked: unreadable, another format or version, another configuration
    (``want``: the header's fields and the values they must have; None: not checked), another
    tokenizer: errors naming the file. ``owner`` prefixes them ("stand"), ``label`` names the
    kind of file ("STAND table file"), ``meaning`` says what another tokenizer's ids would
    mean. The arrays' own checks are the owner's."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode())
            arrays = {k: np.asarray(z[k]) for k in names}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError,
            UnicodeDecodeError, EOFError) as e:
        raise DrafterError(f"{owner}: {path} is not a readable {label} "
                           f"({type(e).__name__}: {e})") from None
    if not isinstance(header, dict) or header.get("format") != fmt or \
            header.get("version") != version:
        got = header if not isinstance(header, dict) else (
            f"{header.get('format')!r} version {header.get('version')!r}")
        raise DrafterError(f"{owner}: {path} is not a {fmt} file of version {version} "
                           f"(found {got})")
    bad = {k: (header.get(k), v) for k, v in want.items()
           if v is not None and header.get(k) != v}
    if bad:
        raise DrafterError(f"{owner}: {path} was written for another configuration: "
                           + ", ".join(f"{k} {a!r} in the file, {b!r} here"
                                       for k, (a, b) in bad.items()))
    if tokenizer and header.get("tokenizer") and header["tokenizer"] != tokenizer:
        raise DrafterError(f"{owner}: {path} was written with another tokenizer "
                           f"({header['tokenizer']} vs {tokenizer}): {meaning}")
    return header, arrays
