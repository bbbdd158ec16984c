"""Reading a training corpus: records, the train/validation split, and batches.

A corpus (written by :mod:`specjax.train.corpus`) is a directory holding ``manifest.json``::

    {"format": "specjax-corpus-1", "tokenizer_sha256": "...", "model": "smollm2-135m",
     "shards": ["data-00000.array_record", ...], "num_records": N, "num_tokens": M}

and the ArrayRecord shards it lists. Each record is the UTF-8 bytes of
``json.dumps({"tokens": [int, ...], "loss_mask": [0/1, ...], "source": str, "task": str})``.
Shards are read through grain's ``ArrayRecordDataSource`` (random access by global index).

Everything random here is a hash of ``(seed, stream, record index)`` (splitmix64, computed in
numpy), so it depends on nothing but the seed: no global RNG, no library RNG whose stream may
change between versions.

* split: record ``i`` is a validation record when ``hash(seed, SPLIT, i) < val_fraction``
  (as a fraction of 2**64); at least one record lands on each side.
* shuffle: epoch ``e`` visits the training records sorted by ``hash(seed, SHUFFLE + e, i)``.
* position: ``{"epoch": e, "index": j}``, the next record is the ``j``-th of epoch ``e``'s
  order. A batch that runs past the end of an epoch continues into the next one; saving and
  restoring the position reproduces the batch stream exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from specjax.errors import DataError
from specjax.tokenizer import tokenizer_sha256  # noqa: F401  (re-exported)

FORMAT = "specjax-corpus-1"
MANIFEST = "manifest.json"

_MASK64 = (1 << 64) - 1
_SPLIT_STREAM = 1
_SHUFFLE_STREAM = 1 << 20  # + epoch


# ----------------------------------------------------------------------------- hashing


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on ``uint64`` arrays (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def index_hash(seed: int, stream: int, index: np.ndarray) -> np.ndarray:
    """``uint64[N]``: a well-mixed hash of ``(seed, stream, index[n])``.

    Args:
      seed: the run's seed (any int; taken modulo 2**64).
      stream: which use (split, the shuffle of one epoch).
      index: ``int[N]`` record indices.
    """
    base = _splitmix64(np.array([(seed * 0x9E3779B97F4A7C15 + stream) & _MASK64], np.uint64))
    base = _splitmix64(base + np.uint64(stream & _MASK64))
    return _splitmix64(np.asarray(index, np.uint64) + base[0])


# ----------------------------------------------------------------------------- corpus


@dataclasses.dataclass
class Corpus:
    """An opened corpus: its manifest and random access to its records.

    Attributes:
      path: the corpus directory.
      manifest: ``manifest.json`` as read.
      source: grain ``ArrayRecordDataSource`` over the shards (``source[i]``: bytes).
    """

    path: Path
    manifest: dict
    source: Any

    @classmethod
    def open(cls, path: str | Path, tokenizer_sha256: str | None = None) -> Corpus:
        """Opens the corpus in ``path`` and checks it.

        ``path`` may name several corpora separated by commas (``"data/a,data/b"``): they are
        read as one, the records of the first first. All must share one tokenizer.

        Args:
          path: the corpus directory, or comma-separated directories.
          tokenizer_sha256: the hash (:func:`tokenizer_sha256`) of the model's tokenizer; the
            corpus must have been encoded with the same one. ``None``: not checked.

        Raises:
          DataError: naming the directory or file: missing directory, missing or unreadable
            manifest, another format, another tokenizer, missing or unreadable shards, a
            record count that disagrees with the manifest, an empty corpus.
        """
        parts = [q.strip() for q in str(path).split(",")] if "," in str(path) else None
        if parts is not None:
            if not all(parts):
                raise DataError(f"{path!r}: an empty corpus name in the comma-separated list")
            if len(set(parts)) != len(parts):
                raise DataError(f"{path!r}: a corpus is named twice")
            return cls._concat([cls.open(q, tokenizer_sha256) for q in parts], str(path))
        p = Path(path)
        if not p.is_dir():
            raise DataError(f"{p}: corpus directory not found (build one with "
                            "`specjax train data ...`)")
        mf = p / MANIFEST
        if not mf.is_file():
            raise DataError(f"{mf}: no manifest: {p} is not a corpus directory (build one "
                            "with `specjax train data ...`)")
        try:
            manifest = json.loads(mf.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(f"{mf}: cannot read the manifest ({e})") from None
        if not isinstance(manifest, dict):
            raise DataError(f"{mf}: the manifest must be a JSON object")
        fmt = manifest.get("format")
        if fmt != FORMAT:
            raise DataError(f"{mf}: format {fmt!r} is not {FORMAT!r} (a corpus written by "
                            "another version of the builder; rebuild it)")
        shards = manifest.get("shards")
        if not isinstance(shards, list) or not all(isinstance(s, str) for s in shards):
            raise DataError(f"{mf}: 'shards' must be a list of file names, got {shards!r}")
        n = manifest.get("num_records")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise DataError(f"{mf}: 'num_records' must be an integer >= 0, got {n!r}")
        if n == 0 or not shards:
            raise DataError(f"{p}: the corpus is empty (no records); rebuild it from a "
                            "non-empty source")
        want = manifest.get("tokenizer_sha256")
        if tokenizer_sha256 is not None and want != tokenizer_sha256:
            raise DataError(
                f"{mf}: the corpus was encoded with another tokenizer (tokenizer_sha256 "
                f"{str(want)[:16]}..., model {manifest.get('model')!r}) than the model's "
                f"({tokenizer_sha256[:16]}...); rebuild the corpus with this model")
        paths = []
        for s in shards:
            f = p / s
            if not f.is_file():
                raise DataError(f"{f}: shard listed in {mf} is missing")
            paths.append(str(f))
        try:
            import grain

            source = grain.sources.ArrayRecordDataSource(paths)
        except Exception as e:  # noqa: BLE001 - the reader raises bare RuntimeErrors
            raise DataError(f"{p}: cannot open the shards as ArrayRecord files "
                            f"({type(e).__name__}: {e})") from None
        if len(source) != n:
            raise DataError(f"{p}: the shards hold {len(source)} records, the manifest says "
                            f"{n} (a shard is truncated or the manifest is stale)")
        return cls(p, manifest, source)

    @classmethod
    def _concat(cls, corpora: list[Corpus], name: str) -> Corpus:
        shas = {c.manifest.get("tokenizer_sha256") for c in corpora}
        if len(shas) > 1:
            raise DataError(f"{name}: the corpora were encoded with different tokenizers "
                            f"({', '.join(str(c.path) for c in corpora)}); train on one "
                            "model's corpora only")
        paths = [str(c.path / s) for c in corpora for s in c.manifest["shards"]]
        try:
            import grain

            source = grain.sources.ArrayRecordDataSource(paths)
        except Exception as e:  # noqa: BLE001 - the reader raises bare RuntimeErrors
            raise DataError(f"{name}: cannot open the shards as ArrayRecord files "
                            f"({type(e).__name__}: {e})") from None
        manifest = {
            "format": FORMAT,
            "parts": [str(c.path) for c in corpora],
            "model": corpora[0].manifest.get("model"),
            "tokenizer_sha256": shas.pop(),
            "shards": [f"{c.path.name}/{s}" for c in corpora for s in c.manifest["shards"]],
            "num_records": sum(len(c) for c in corpora),
            "complete": all(c.manifest.get("complete", True) is not False for c in corpora),
        }
        return cls(Path(name), manifest, source)

    def __len__(self) -> int:
        return len(self.source)

    def _decode(self, i: int, raw: bytes) -> dict[str, Any]:
        try:
            rec = json.loads(raw)
            tokens = np.asarray(rec["tokens"], np.int64)
            mask = np.asarray(rec["loss_mask"], np.int64)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
            raise DataError(f"{self.path}: record {i} is not a corpus record "
                            f"({type(e).__name__}: {e})") from None
        if tokens.ndim != 1 or mask.shape != tokens.shape:
            raise DataError(f"{self.path}: record {i}: tokens and loss_mask must be lists of "
                            f"the same length, got {tokens.shape} and {mask.shape}")
        if tokens.size == 0:
            raise DataError(f"{self.path}: record {i} has no tokens")
        if not np.isin(mask, (0, 1)).all():
            raise DataError(f"{self.path}: record {i}: loss_mask must hold 0s and 1s")
        return {"tokens": tokens, "loss_mask": mask, "source": rec.get("source", ""),
                "task": rec.get("task", "")}

    def records(self, indices) -> list[dict[str, Any]]:
        """Decoded records (``tokens``, ``loss_mask`` as ``int64[L]``, ``source``, ``task``).

        Raises:
          DataError: a record that is not JSON of the corpus format.
        """
        idx = [int(i) for i in indices]
        if not idx:
            return []
        try:
            raws = self.source.__getitems__(idx)
        except Exception as e:  # noqa: BLE001
            raise DataError(f"{self.path}: cannot read records {idx[:4]}... "
                            f"({type(e).__name__}: {e})") from None
        return [self._decode(i, r) for i, r in zip(idx, raws)]

    def iter_records(self, chunk: int = 256) -> Iterator[dict[str, Any]]:
        """Every record, decoded, in index order (read ``chunk`` at a time)."""
        for start in range(0, len(self), chunk):
            yield from self.records(range(start, min(start + chunk, len(self))))

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the corpus's contents for a resumed run: the shards, the record
        count and the tokenizer hash (a corpus still being built grows between runs)."""
        return {"shards": list(self.manifest.get("shards", [])), "num_records": len(self),
                "tokenizer_sha256": self.manifest.get("tokenizer_sha256")}

    def split(self, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``(train, val)``: sorted ``int64`` record indices, disjoint, covering the corpus.

        Record ``i`` is held out when its hash with ``seed`` falls below ``val_fraction``; if
        that leaves a side empty the record with the smallest (largest) hash moves over.

        Raises:
          DataError: a corpus of fewer than two records (nothing to hold out).
        """
        n = len(self)
        if n < 2:
            raise DataError(f"{self.path}: {n} record(s): a corpus needs at least 2 records "
                            "(training and validation)")
        idx = np.arange(n, dtype=np.int64)
        h = index_hash(seed, _SPLIT_STREAM, idx)
        u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        is_val = u < val_fraction
        if not is_val.any():
            is_val[np.argmin(h)] = True
        if is_val.all():
            is_val[np.argmax(h)] = False
        return idx[~is_val], idx[is_val]


# ----------------------------------------------------------------------------- batches


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def pad_records(records: list[dict], seq_len: int) -> dict[str, np.ndarray]:
    """Records -> a batch: ``tokens int32[B, T]``, ``loss_mask int32[B, T]`` (right-padded
    with 0) and ``lengths int32[B]`` (tokens kept, at most ``T = seq_len``: a longer record
    keeps its first ``seq_len`` tokens)."""
    B = len(records)
    tokens = np.zeros((B, seq_len), np.int32)
    mask = np.zeros((B, seq_len), np.int32)
    lengths = np.zeros((B,), np.int32)
    for b, r in enumerate(records):
        n = min(len(r["tokens"]), seq_len)
        tokens[b, :n] = r["tokens"][:n]
        mask[b, :n] = r["loss_mask"][:n]
        lengths[b] = n
    return {"tokens": tokens, "loss_mask": mask, "lengths": lengths}


class BatchIterator:
    """Shuffled batches of training records, endlessly, epoch after epoch.

    Args:
      corpus: the opened corpus.
      indices: the record indices to draw from (the training split).
      batch_size: records per batch (``B``).
      seq_len: tokens per row (``T``).
      seed: the run's seed (the shuffle of epoch ``e`` derives from ``(seed, e)``).
      vocab_size: when given, a token id outside ``[0, vocab_size)`` is a :class:`DataError`.
      position: where to start (:attr:`position` of an earlier iterator); default the start.
      report: where the one-time truncation notice goes (default: stderr).
    """

    def __init__(self, corpus: Corpus, indices: np.ndarray, batch_size: int, seq_len: int,
                 seed: int, *, vocab_size: int | None = None,
                 position: Mapping[str, int] | None = None,
                 report: Callable[[str], None] | None = None):
        self.corpus = corpus
        self.indices = np.asarray(indices, np.int64)
        if self.indices.size == 0:
            raise DataError(f"{corpus.path}: no training records to draw batches from")
        self.batch_size = int(batch_size)
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self.vocab_size = vocab_size
        self.report = report or _stderr
        self.truncated = 0  # records longer than seq_len met by this iterator
        self.records_seen = 0
        self.epoch, self.index = 0, 0
        if position is not None:
            self.set_position(position)
        self._order_epoch, self._order = -1, None

    @property
    def position(self) -> dict[str, int]:
        """``{"epoch", "index"}``: the next record is the ``index``-th of epoch ``epoch``."""
        return {"epoch": int(self.epoch), "index": int(self.index)}

    def set_position(self, position: Mapping[str, int]) -> None:
        """Moves to a saved :attr:`position`.

        Raises:
          DataError: a position that does not fit this split (another corpus or split).
        """
        try:
            epoch, index = int(position["epoch"]), int(position["index"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"data position must be {{'epoch': int, 'index': int}}, got "
                            f"{position!r}") from None
        if epoch < 0 or not 0 <= index < self.indices.size:
            raise DataError(f"data position {dict(position)} does not fit the "
                            f"{self.indices.size} training records of {self.corpus.path} "
                            "(was the corpus or val_fraction changed?)")
        self.epoch, self.index = epoch, index

    def order(self, epoch: int) -> np.ndarray:
        """The training record indices in epoch ``epoch``'s order."""
        if epoch != self._order_epoch:
            h = index_hash(self.seed, _SHUFFLE_STREAM + epoch, self.indices)
            self._order = self.indices[np.argsort(h, kind="stable")]
            self._order_epoch = epoch
        return self._order

    def _take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            order = self.order(self.epoch)
            take = min(n - len(out), order.size - self.index)
            out.extend(int(i) for i in order[self.index:self.index + take])
            self.index += take
            if self.index == order.size:
                self.epoch, self.index = self.epoch + 1, 0
        return out

    def _check(self, idx: list[int], records: list[dict]) -> None:
        for i, r in zip(idx, records):
            n = len(r["tokens"])
            if n > self.seq_len:
                if self.truncated == 0:
                    self.report(f"note: corpus record {i} has {n} tokens, more than seq_len="
                                f"{self.seq_len}: it is truncated to its first {self.seq_len}"
                                " (further truncations are counted, not reported: see the "
                                "run summary's truncated_records)")
                self.truncated += 1
            if self.vocab_size is not None:
                t = r["tokens"]
                if t.min() < 0 or t.max() >= self.vocab_size:
                    raise DataError(f"{self.corpus.path}: record {i} holds token ids outside "
                                    f"[0, {self.vocab_size}) (the model's vocabulary)")

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        """The next batch: ``tokens int32[B, T]``, ``loss_mask int32[B, T]``,
        ``lengths int32[B]``."""
        idx = self._take(self.batch_size)
        records = self.corpus.records(idx)
        self._check(idx, records)
        self.records_seen += len(idx)
        return pad_records(records, self.seq_len)


def eval_batches(corpus: Corpus, indices: np.ndarray, batch_size: int, seq_len: int,
                 max_batches: int) -> list[dict[str, np.ndarray]]:
    """The validation batches: the records of ``indices`` in order, ``batch_size`` at a time,
    at most ``max_batches`` batches; the last batch is filled up by wrapping around to the
    first records (every row is a real record, so no batch has an all-zero loss mask).

    Returns:
      A list of batches as :meth:`BatchIterator.__next__` gives them (the same every call).
    """
    idx = np.asarray(indices, np.int64)
    if idx.size == 0:
        return []
    n_batches = min(int(max_batches), -(-idx.size // batch_size))
    want = n_batches * batch_size
    order = np.resize(idx, want)  # repeats from the start to fill the last batch
    out = []
    for b in range(n_batches):
        out.append(pad_records(corpus.records(order[b * batch_size:(b + 1) * batch_size]),
                               seq_len))
    return out
