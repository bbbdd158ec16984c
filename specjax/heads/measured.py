"""What a head was measured to do, recorded in its ``config.json``: the first-token acceptance
of its chain drafts, one record per temperature
(``"measured_acceptance"``, a list). The cost-aware ``adaptive`` policy starts from it above
batch 1 (:func:`specjax.methods.build`): there a one-token draft pays only when its first
token is accepted often enough for its price, and starting from the even prior (0.5) made the
shipped Medusa-1 and Hydra++ heads probe each batch on machines where, at the acceptance
they reach, no draft pays.

Measured by ``specjax head measure-acceptance DIR`` (:mod:`specjax.bench.acceptance`: one
token drafted at every step over a prompt set) or counted from a journal by
:func:`specjax.bench.journal.first_token_counts` (``specjax head record-acceptance JOURNAL
--method LABEL --head DIR``); read by :func:`acceptance_for`. A record names the journal or
command, prompts and options it was counted from.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path, PurePath

from specjax.atomic import replacing
from specjax.errors import CheckpointError

KEY = "measured_acceptance"


@dataclasses.dataclass(frozen=True)
class AcceptanceRecord:
    """First drafted tokens ``accepted`` of ``drafted`` at ``temperature`` (0: greedy), over
    ``n_prompts`` prompts of ``prompts`` at ``batch_size``, with ``method_args``."""

    temperature: float
    accepted: int
    drafted: int
    batch_size: int = 1
    prompts: str = ""
    n_prompts: int = 0
    method: str = ""
    method_args: dict = dataclasses.field(default_factory=dict)
    source: str = ""

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "rate": round(self.rate, 4)}


def _check(rec: dict, where: str) -> AcceptanceRecord:
    fields = {f.name for f in dataclasses.fields(AcceptanceRecord)}
    if not isinstance(rec, dict):
        raise CheckpointError(f"{where} must be an object, got {type(rec).__name__}")
    missing = sorted({"temperature", "accepted", "drafted"} - set(rec))
    if missing:
        raise CheckpointError(f"{where} lacks {', '.join(missing)}")
    try:
        out = AcceptanceRecord(**{k: v for k, v in rec.items() if k in fields})
        t, a, d = float(out.temperature), int(out.accepted), int(out.drafted)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: {e}") from None
    if not (t >= 0 and d > 0 and 0 <= a <= d):
        raise CheckpointError(f"{where}: needs temperature >= 0 and 0 <= accepted <= drafted "
                              f"with drafted > 0, got {t}, {a}, {d}")
    return dataclasses.replace(out, temperature=t, accepted=a, drafted=d)


def head_config(head_dir: str | Path) -> dict:
    """``head_dir/config.json`` as a dict; unreadable or not an object: an error naming it."""
    conf_f = Path(head_dir) / "config.json"
    try:
        conf = json.loads(conf_f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{conf_f}: unreadable head config: {e}") from None
    if not isinstance(conf, dict):
        raise CheckpointError(f"{conf_f}: a head config must be a JSON object")
    return conf


def read_records(head_dir: str | Path) -> list[AcceptanceRecord]:
    """The acceptance records of ``head_dir/config.json`` (none: ``[]``); a malformed one is
    an error naming the file and the record."""
    return _records_in(head_config(head_dir), Path(head_dir) / "config.json")


def _records_in(conf: dict, conf_f: Path) -> list[AcceptanceRecord]:
    recs = conf.get(KEY, [])
    if not isinstance(recs, list):
        raise CheckpointError(f"{conf_f}: {KEY!r} must be a list of records")
    return [_check(r, f"{conf_f}: {KEY}[{i}]") for i, r in enumerate(recs)]


def acceptance_for(head_dir: str | Path | None,
                   temperature: float | None) -> AcceptanceRecord | None:
    """The record a run at ``temperature`` starts from: greedy (0) the greedy record; sampled
    the record of the nearest positive temperature (the lower one on a tie; a greedy record
    is not used when sampling: the sampling rule accepts by another test). A record at
    another temperature is only a start: the rows' own counts move it once they draft. None
    where the head has no fitting record, or ``temperature`` is None (unknown)."""
    if head_dir is None or temperature is None:
        return None
    recs = read_records(head_dir)
    if temperature == 0:
        fits = [r for r in recs if r.temperature == 0]
    else:
        fits = sorted((r for r in recs if r.temperature > 0),
                      key=lambda r: (abs(r.temperature - temperature), r.temperature))
    return fits[0] if fits else None


def check_same_head(head_dir: str | Path, description: str, what: str) -> None:
    """Raises unless ``description`` (what a journal recorded of a drafter, e.g. ``medusa heads
    /x/run1/head (step 1575)``) names ``head_dir``: a path ending in the same directory and
    its parent (every ``specjax train`` run writes ``OUT/head``; the journal's absolute path
    may be another checkout's), and, where both say, the same training step."""
    head = Path(head_dir).resolve()
    paths = [PurePath(t.rstrip(",")) for t in description.split()
             if "/" in t or "\\" in t]
    if not paths:
        raise CheckpointError(f"{what} ran {description or 'no recorded head'!r}: no head "
                              f"directory named, so it cannot be matched to {head_dir}")
    n = min(2, len(paths[-1].parts))
    if paths[-1].parts[-n:] != head.parts[-n:]:
        raise CheckpointError(f"{what} ran {description!r}, not the head in {head_dir}")
    step = re.search(r"\(step (\d+)\)", description)
    conf = head_config(head)
    try:
        own = (conf.get("meta") or {}).get("step")
        own = None if own is None else int(own)
    except (ValueError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{head / 'config.json'}: unreadable training step: "
                              f"{e!r}") from None
    if step and own is not None and int(step.group(1)) != own:
        raise CheckpointError(f"{what} ran {description!r}, step {step.group(1)}; the head in "
                              f"{head_dir} is step {own}")


def record(head_dir: str | Path, rec: AcceptanceRecord) -> AcceptanceRecord | None:
    """Writes ``rec`` into ``head_dir/config.json`` (atomically, keeping the file's
    permissions), replacing a record at the same temperature (returned; None if there was
    none) and keeping every other key."""
    conf_f = Path(head_dir) / "config.json"
    conf = head_config(head_dir)
    old = _records_in(conf, conf_f)  # a malformed file is an error before anything is written
    replaced = next((r for r in old if r.temperature == rec.temperature), None)
    kept = [r.to_dict() for r in old if r.temperature != rec.temperature]
    conf[KEY] = sorted(kept + [rec.to_dict()], key=lambda r: r["temperature"])
    try:
        mode = conf_f.stat().st_mode & 0o777
        with replacing(conf_f) as tmp:
            tmp.write_text(json.dumps(conf, indent=2) + "\n")
            os.chmod(tmp, mode)
    except OSError as e:
        raise CheckpointError(f"{conf_f}: cannot write the record: {e}") from None
    return replaced
