"""Readers of prompt and text files, each returning a grain dataset of ``Record``s.

Small line-oriented files (JSONL question sets, HumanEval, GSM8K) are parsed when the reader is
called, so a malformed line fails at once with its file and line number, and come back as a
random-access ``grain.MapDataset``. Plain text files are listed when the reader is called and
read lazily, one per element. ShareGPT conversation files (hundreds of megabytes) are parsed
incrementally as a ``grain.IterDataset``.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import re
import warnings
from pathlib import Path
from typing import Any, Iterator

import grain

from specjax.data.records import DataError, Record, TruncatedDataWarning


def _open_text(path: Path):
    """Opens ``path`` (``.gz`` decompressed) as UTF-8 text; a BOM is dropped."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig")
        return path.open(encoding="utf-8-sig")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror or e})") from None


def _existing(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{path}: {what} not found")
    return p


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yields ``(line number, object)`` for each non-blank line of a JSONL (or .jsonl.gz) file.

    Raises:
      DataError: ``FILE:LINE: ...`` for a line that is not a JSON object.
    """
    p = _existing(path, "prompts file")
    try:  # bytes, decoded line by line, so that bad UTF-8 is reported with its line
        fh = gzip.open(p, "rb") if p.suffix == ".gz" else p.open("rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror or e})") from None
    with fh:
        lineno = 0
        while raw := _read(path, fh.readline):
            lineno += 1
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte "
                                f"{e.start} of the line)") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, obj


def _read(path, fn, *args) -> str:
    # no try/except around a generator's yield: a generator closed at interpreter exit
    # would evaluate the except clause after module globals are gone
    try:
        return fn(*args)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as e:
        raise DataError(f"{path}: unreadable ({e})") from None


def _text_field(obj: dict, key: str, where: str) -> str:
    if key not in obj:
        raise DataError(f"{where}: needs a {key!r} field")
    v = obj[key]
    if not isinstance(v, str):
        raise DataError(f"{where}: {key!r} must be a string")
    return v


def _reference(v: Any) -> str | None:
    """Spec-Bench/MT-Bench ``reference``: a list with one entry per turn, or a string."""
    if isinstance(v, list):
        v = v[0] if v else None
    return v if isinstance(v, str) else None


def _question(obj: dict, where: str, lineno: int) -> Record:
    """``{"id", "prompt"}`` or ``{"question_id", "turns": [...]}`` (+ category, reference)."""
    if "prompt" in obj:
        text = obj["prompt"]
        pid = obj.get("id", obj.get("question_id", lineno))
        turns = ()
    elif "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns:
            raise DataError(f"{where}: 'turns' must be a non-empty list")
        if not all(isinstance(t, str) for t in turns):
            raise DataError(f"{where}: every turn must be a string")
        text = turns[0]
        pid = obj.get("question_id", obj.get("id", lineno))
    else:
        raise DataError(f"{where}: needs a 'prompt' or a 'turns' field")
    if not isinstance(text, str):
        raise DataError(f"{where}: the prompt must be a string")
    cat = obj.get("category")
    return Record(id=pid, prompt=text, category=None if cat is None else str(cat),
                  reference=_reference(obj.get("reference")), turns=tuple(turns))


def read_jsonl_prompts(path: str | Path) -> grain.MapDataset:
    """A JSONL prompt file: one ``{"id", "prompt"}`` or ``{"question_id", "turns"}`` a line.

    This is the format of Spec-Bench's and MT-Bench's ``question.jsonl`` (fields
    ``question_id``, ``category``, ``turns``, optional ``reference``) and of
    ``specjax generate --prompts``. The prompt is the first turn; all turns are kept.
    """
    return grain.MapDataset.source(
        [_question(obj, f"{path}:{n}", n) for n, obj in iter_jsonl(path)])


read_spec_bench = read_jsonl_prompts
read_mt_bench = read_jsonl_prompts


def read_humaneval(path: str | Path) -> grain.MapDataset:
    """``HumanEval.jsonl`` or ``.jsonl.gz``: ``task_id``, ``prompt`` (code to complete),
    ``canonical_solution`` (the reference). Category ``code``."""
    out = []
    for n, obj in iter_jsonl(path):
        where = f"{path}:{n}"
        ref = obj.get("canonical_solution")
        if ref is not None and not isinstance(ref, str):
            raise DataError(f"{where}: 'canonical_solution' must be a string")
        out.append(Record(id=_text_field(obj, "task_id", where),
                          prompt=_text_field(obj, "prompt", where), category="code",
                          reference=ref))
    return grain.MapDataset.source(out)


def read_gsm8k(path: str | Path) -> grain.MapDataset:
    """GSM8K JSONL: ``question``, ``answer`` (worked solution ending ``#### N``, the reference).

    Ids are ``gsm8k/I`` with I the record's index in the file (or the line's own ``id``).
    Category ``math``.
    """
    out = []
    for n, obj in iter_jsonl(path):
        where = f"{path}:{n}"
        ans = obj.get("answer")
        if ans is not None and not isinstance(ans, str):
            raise DataError(f"{where}: 'answer' must be a string")
        out.append(Record(id=obj.get("id", f"gsm8k/{len(out)}"),
                          prompt=_text_field(obj, "question", where), category="math",
                          reference=ans))
    return grain.MapDataset.source(out)


def _read_text_file(root: str, rel: str) -> Record:
    path = Path(root) / rel if rel else Path(root)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable text file ({e})") from None
    return Record(id=rel or path.name, prompt=text, category="text")


def read_text(path: str | Path) -> grain.MapDataset:
    """Plain text: one document per file.

    ``path`` is a file (one record) or a folder (every ``*.txt`` file under it, recursively,
    in sorted order). The record's id is the file's path relative to the folder, its prompt
    the whole file, category ``text``. Files are read when their element is read. To split
    documents further (paragraphs, fixed-size windows), map or flat-map the dataset.
    """
    p = _existing(path, "text file or folder")
    if p.is_dir():
        rels = sorted(f.relative_to(p).as_posix() for f in p.rglob("*.txt") if f.is_file())
        if not rels:
            raise DataError(f"{path}: no *.txt files in this folder")
    else:
        rels = [""]
    return grain.MapDataset.source(rels).map(functools.partial(_read_text_file, str(p)))


# --- ShareGPT: an incremental parser over a top-level JSON array --------------------------

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bing", "bard", "model"}


class _Reader:
    """A growing text buffer over a file, with line numbers of buffer positions."""

    def __init__(self, fh, chunk: int, path):
        self.fh, self.chunk, self.path = fh, chunk, path
        self.buf, self.pos, self.eof = "", 0, False
        self._line, self._line_pos = 1, 0  # line number at buf[_line_pos]

    def more(self):
        # grow by at least what is pending, so a long value is rescanned O(log n) times
        data = _read(self.path, self.fh.read, max(self.chunk, len(self.buf) - self.pos))
        if data:
            self.buf += data
        else:
            self.eof = True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file), without consuming it."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < n or self.eof:
                return self.buf[self.pos] if self.pos < n else ""
            self.more()

    def line_at(self, pos: int) -> int:
        if pos >= self._line_pos:
            self._line += self.buf.count("\n", self._line_pos, pos)
            self._line_pos = pos
        return self._line

    def compact(self):
        if self.pos >= self.chunk:
            self.line_at(self.pos)
            self.buf, self._line_pos, self.pos = self.buf[self.pos:], 0, 0


def _maybe_incomplete(e: json.JSONDecodeError, buf: str) -> bool:
    """Whether the decode error may only mean that the value goes on past the buffer."""
    return e.msg.startswith("Unterminated string") or e.pos >= len(buf.rstrip()) - 16


# what may be left of a cut-off literal, or of a number before its first digit
_LITERAL_PREFIX = re.compile(r"t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|-")


def _truncated_at_eof(e: json.JSONDecodeError, buf: str) -> bool:
    """At the end of the file: whether the decode error means the text stops inside a value
    (truncation) rather than that the value is malformed."""
    if e.msg.startswith("Unterminated string"):
        return True
    tail = buf[e.pos:].rstrip()
    if e.msg.startswith("Invalid \\uXXXX escape"):  # e.pos is at the "u"
        return re.fullmatch(r"u[0-9a-fA-F]{0,4}", tail) is not None
    if e.msg.startswith("Expecting value"):  # a literal cut short, or a lone minus
        return tail == "" or _LITERAL_PREFIX.fullmatch(tail) is not None
    if e.msg.startswith("Expecting ',' delimiter") and e.pos and buf[e.pos - 1].isdigit():
        # a number cut after its digits: "1." or "1e" / "1e+" are left unparsed
        return re.fullmatch(r"\.|[eE][-+]?", tail) is not None or tail == ""
    return tail == ""  # cut right where more must follow (a key, a colon, a value)


def iter_json_values(path: str | Path, what: str = "conversations", chunk: int = 1 << 20
                     ) -> Iterator[tuple[int, Any]]:
    """Yields ``(line number, value)`` for each element of a file's top-level JSON array (or
    of a stream of JSON values one after another, as in JSONL), reading ``chunk`` characters
    at a time: memory holds one element, not the file.

    A file that ends inside an element or before the array's closing ``]`` yields every
    complete element and then warns (``TruncatedDataWarning``, naming the file and how many
    ``what`` were read) instead of failing.

    Raises:
      DataError: ``FILE:LINE: ...`` for content that is not valid JSON.
    """
    p = _existing(path, f"{what} file")
    decoder = json.JSONDecoder()
    with _open_text(p) as fh:
        r = _Reader(fh, chunk, path)
        c = r.peek()
        if c == "":
            raise DataError(f"{path}: empty file, expected a JSON array of {what}")
        array = c == "["
        if array:
            r.pos += 1
        n = 0
        while True:
            c = r.peek()
            if array and c == "]":
                return
            if array and n:
                if c == ",":
                    r.pos += 1
                    c = r.peek()
                elif c != "":
                    raise DataError(f"{path}:{r.line_at(r.pos)}: expected ',' or ']' after "
                                    f"element {n} of the array, found {c!r}")
            if c == "":
                if array:
                    warnings.warn(f"{path}: the file ends before the JSON array is closed "
                                  f"(truncated?); read {n} complete {what}",
                                  TruncatedDataWarning, stacklevel=2)
                return
            while True:
                try:
                    value, end = decoder.raw_decode(r.buf, r.pos)
                    break
                except json.JSONDecodeError as e:
                    if not (_truncated_at_eof(e, r.buf) if r.eof
                            else _maybe_incomplete(e, r.buf)):
                        raise DataError(f"{path}:{r.line_at(e.pos)}: invalid JSON in "
                                        f"element {n + 1} ({e.msg})") from None
                    if r.eof:
                        warnings.warn(
                            f"{path}: the file ends inside element {n + 1} (line "
                            f"{r.line_at(r.pos)}; truncated?); read {n} complete {what}",
                            TruncatedDataWarning, stacklevel=2)
                        return
                    r.more()
            lineno = r.line_at(r.pos)
            r.pos = end
            n += 1
            yield lineno, value
            r.compact()


def _check_conversation(obj: Any, where: str) -> dict:
    """A ShareGPT conversation ``{"id", "conversations": [{"from", "value"}, ...]}``
    (OpenAI-style ``"messages": [{"role", "content"}]`` is accepted too)."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: a conversation must be a JSON object")
    turns = obj.get("conversations", obj.get("messages"))
    if not isinstance(turns, list):
        raise DataError(f"{where}: needs a 'conversations' list")
    for i, t in enumerate(turns):
        ok = isinstance(t, dict) and (
            (isinstance(t.get("from"), str) and isinstance(t.get("value"), str))
            or (isinstance(t.get("role"), str) and isinstance(t.get("content"), str)))
        if not ok:
            raise DataError(f"{where}: turn {i} must be {{'from': str, 'value': str}}")
    return obj


class _ConversationIterator(grain.DatasetIterator):
    """Checkpointable: the state is the number of conversations already returned."""

    def __init__(self, path: str, chunk: int, start: int = 0):
        super().__init__()
        self._path, self._chunk = path, chunk
        self._restart(start)

    def _restart(self, start: int):
        self._gen = iter_json_values(self._path, "conversations", self._chunk)
        self._count = 0
        for _ in range(start):
            next(self)

    def __next__(self) -> dict:
        lineno, obj = next(self._gen)
        self._count += 1
        return _check_conversation(obj, f"{self._path}:{lineno}")

    def get_state(self) -> dict:
        return {"count": self._count}

    def set_state(self, state: dict):
        self._restart(int(state["count"]))


class ConversationDataset(grain.IterDataset):
    """ShareGPT-style conversations (raw dicts), streamed from a JSON array file."""

    def __init__(self, path: str | Path, chunk: int = 1 << 20):
        super().__init__()
        self._path, self._chunk = str(path), chunk

    def __iter__(self) -> _ConversationIterator:
        return _ConversationIterator(self._path, self._chunk)

    def __str__(self) -> str:
        return f"ConversationDataset({self._path})"


def conversation_record(obj: dict, index: int | None = None) -> Record | None:
    """A conversation as a prompt: its first user turn (all user turns in ``turns``) and the
    first assistant reply after it as reference. None if it has no user turn."""
    turns = obj.get("conversations", obj.get("messages"))
    human, reference = [], None
    for t in turns:
        role, text = (t["from"], t["value"]) if "from" in t else (t["role"], t["content"])
        role = role.lower()
        if role in _HUMAN:
            human.append(text)
        elif role in _ASSISTANT and len(human) == 1 and reference is None:
            reference = text
    if not human:
        return None
    pid = obj.get("id", index)
    return Record(id=pid if isinstance(pid, (str, int)) else str(pid), prompt=human[0],
                  category="chat", reference=reference, turns=tuple(human))


def read_sharegpt(path: str | Path, chunk: int = 1 << 20) -> grain.IterDataset:
    """ShareGPT-style chat JSON as prompts, streamed (see ``conversation_record``).

    The file is a JSON array of ``{"id", "conversations": [{"from": "human"|"gpt", "value"}]}``
    (a stream of such objects, one per line, works too). Conversations without a user turn
    are skipped. A truncated file gives its complete conversations, then a
    ``TruncatedDataWarning``. For the raw conversations (training), use
    ``ConversationDataset``.
    """
    return ConversationDataset(path, chunk).map_with_index(_indexed_record).filter(_is_record)


def _indexed_record(index: int, obj: dict) -> Record | None:
    return conversation_record(obj, index)


def _is_record(r: Record | None) -> bool:
    return r is not None
