"""The record every prompt source yields, and the errors of the data sources."""

from __future__ import annotations

import dataclasses
from specjax.errors import DataError  # noqa: F401  (re-exported)


class TruncatedDataWarning(UserWarning):
    """A streamed file ended inside a record: the complete records before it were yielded."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One prompt, or one training document.

    Attributes:
      id: the source's own id (Spec-Bench ``question_id``, HumanEval ``task_id``, a file name,
        ...), kept as the source wrote it (str or int). Prepared TFDS datasets give it back as
        a string.
      prompt: the text a model is asked to continue: the first user turn of multi-turn
        sources, the whole document of text sources.
      category: the source's category (Spec-Bench/MT-Bench), a fixed one for single-task
        sources (``code`` for HumanEval, ``math`` for GSM8K, ``chat`` for ShareGPT, ``text``),
        or None where a JSONL prompt file has none.
      reference: a reference answer to the first turn where the source has one (Spec-Bench
        and MT-Bench ``reference[0]``, HumanEval ``canonical_solution``, GSM8K ``answer``,
        the first assistant reply of a ShareGPT conversation), else None.
      turns: every user turn, ``turns[0] == prompt`` (a single-turn record has one).
    """

    id: str | int
    prompt: str
    category: str | None = None
    reference: str | None = None
    turns: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.turns:
            object.__setattr__(self, "turns", (self.prompt,))
        elif not isinstance(self.turns, tuple):
            object.__setattr__(self, "turns", tuple(self.turns))

    def prompt_dict(self) -> dict:
        """``{"id", "prompt"[, "category"]}``: the items ``specjax generate`` and bench use."""
        d = {"id": self.id, "prompt": self.prompt}
        if self.category is not None:
            d["category"] = self.category
        return d
