"""The bench journal: finished groups on disk, so a long benchmark can stop and resume."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from specjax.errors import BenchError


class Journal:
    """An append-only JSONL record of finished groups, so a long benchmark can stop (time
    limit, Ctrl-C, end of a session) and continue later where it left off.

    Line 1 is a header with everything that must match for the runs to be comparable (model,
    methods and their arguments, prompts, budgets); each further line is one finished group
    (every method's runs on one batch of prompts). A line cut short by a crash is ignored.
    Where the header records the resolved configs (``configs``: every method's drafter,
    ``k``, policy and verifier with the defaults filled in, and since 2026-12-07 the policy's
    and verifier's options, every one as resolved: see :func:`_comparable`) and they match, the
    arguments that produced them may differ: pinning a default (``policy=fixed``) keeps a
    journal going after that default changes.
    """

    def __init__(self, path: str | os.PathLike, header: dict):
        self.path = Path(path)
        self.header = header

    def load(self) -> list[dict]:
        self.header = json.loads(json.dumps(self.header))  # tuples -> lists, as read back
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w") as f:
                f.write(json.dumps({"header": self.header}) + "\n")
            return []
        old, records = read_journal(self.path)
        old, new = _comparable(old, self.header)
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if diff == ["method_args"] and old.get("configs") is not None:
            # the same resolved configs (what the runs used, defaults included) spelled with
            # other arguments: e.g. a default made explicit before the default changed
            diff = []
        if diff:
            detail = "; ".join(f"{k}: journal {old.get(k)!r}, now {new.get(k)!r}"
                               for k in diff)
            raise BenchError(f"{self.path} was written by a different benchmark ({detail}); "
                             "use a new --journal file or the same settings")
        return records

    def append(self, record: dict):
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


_CHANGED_KEYS = ("policy_options", "verifier_options")  # recorded since 2026-12-07
_SETTINGS_KEYS = ("policy_settings", "verifier_settings")  # since 2026-12-07, later


def _comparable(old: dict, new: dict) -> tuple[dict, dict]:
    """The journal's header ``old`` and the run's ``new`` as they compare. Per method, where
    the journal recorded every resolved option (``policy_settings``, ``verifier_settings``),
    those are compared and the options that differ from class defaults are left out on both
    sides: a default pinned after its class default changed resolves to the same settings
    and keeps the journal going. A journal that recorded only the changed options
    (``policy_options``, ``verifier_options``, the forty-eighth session) compares those, and
    one from before either compares neither, as it did when it was written (neither can tell
    a changed class default apart). An option added to a class after the journal began is
    left out where the run leaves it at its default (not among the changed options), and a
    description's path to the shipped heads is cut to ``specjax/heads/shipped/...``
    (:func:`_checkout_free`), so the journal continues from another checkout."""
    oc, nc = old.get("configs"), new.get("configs")
    if not isinstance(oc, dict) or not isinstance(nc, dict):
        return old, new

    def kept(m: str) -> tuple[str, ...]:
        o = oc.get(m)
        if not isinstance(o, dict):  # a method the journal lacks: the configs differ anyway
            return _CHANGED_KEYS + _SETTINGS_KEYS
        if any(k in o for k in _SETTINGS_KEYS):
            return _SETTINGS_KEYS
        return _CHANGED_KEYS if any(k in o for k in _CHANGED_KEYS) else ()

    def strip(configs: dict, new_side: bool) -> dict:
        out = {}
        for m, cfg in configs.items():
            if not isinstance(cfg, dict):
                out[m] = cfg
                continue
            o = oc.get(m)
            if new_side and isinstance(o, dict):
                # an option added to a class since the journal began, left at its default
                # (absent from the changed options), is taken to be the old behaviour
                cfg = dict(cfg)
                for k, changed in zip(_SETTINGS_KEYS, _CHANGED_KEYS):
                    if isinstance(cfg.get(k), dict) and isinstance(o.get(k), dict):
                        cfg[k] = {f: v for f, v in cfg[k].items()
                                  if f in o[k] or f in (cfg.get(changed) or {})}
            out[m] = {k: _checkout_free(v) if k == "description" else v
                      for k, v in cfg.items()
                      if k not in _CHANGED_KEYS + _SETTINGS_KEYS or k in kept(m)}
        return out

    return ({**old, "configs": strip(oc, False)}, {**new, "configs": strip(nc, True)})


_SHIPPED = re.compile(r"\S*?([/\\])specjax\1heads\1shipped\1")


def _checkout_free(text):
    """A drafter's description with the checkout's path to its shipped heads cut to
    ``specjax/heads/shipped/...``: a journal continues from a fresh clone or a worktree of a
    fixed commit (README: one table to one engine) as from the checkout that started it."""
    if not isinstance(text, str):
        return text
    return _SHIPPED.sub(lambda mt: "specjax/heads/shipped/", text)


def read_journal(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """A journal file's header and its finished groups, without checking the header against
    a run (a last line cut short by a crash is left out).

    Raises:
      BenchError: naming the file, when line 1 is not a header or a line is malformed.
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    try:
        header = json.loads(lines[0])["header"]
    except (ValueError, KeyError, IndexError):
        raise BenchError(f"{path}: not a specjax bench journal (line 1 is not a "
                         "header)") from None
    out = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            out.append(json.loads(line))
        except ValueError:
            if n == len(lines):  # the last line, cut short by a crash: redo that group
                break
            raise BenchError(f"{path}:{n}: malformed journal line") from None
    return header, out


def _method_config(path: Path, header: dict, method: str) -> dict:
    configs = header.get("configs") or {}
    if method not in configs:
        raise BenchError(f"{path}: no method {method!r}; it holds "
                         f"{', '.join(configs) or 'none'}")
    return configs[method]


def first_token_counts(path: str | os.PathLike, method: str):
    """``method``'s (a bench label, e.g. ``medusa@chain``) first drafted tokens and how many
    the target accepted, summed over the per-category groups of the journal at ``path`` (a
    ``--batch-sizes`` sweep runs other batch sizes): ``(record, description)``, a
    :class:`specjax.heads.measured.AcceptanceRecord` and what the journal says of the method's
    drafter (it names the head, :func:`specjax.heads.measured.check_same_head`). A tree's
    first level is not a chain's first token, and a lossy verifier accepts by another rule: a
    label that drafted a tree or ran one is an error, as is one the journal does not hold or
    whose runs drafted nothing."""
    from specjax.heads.measured import AcceptanceRecord

    path = Path(path)
    try:
        header, groups = read_journal(path)
    except OSError as e:
        raise BenchError(f"{path}: not a readable bench journal: {e}") from None
    conf = _method_config(path, header, method)
    if conf.get("tree"):
        raise BenchError(f"{path}: {method!r} drafted a tree ({conf['tree']}); a record "
                         f"holds a chain's first-token acceptance")
    if conf.get("exact") is False:
        raise BenchError(f"{path}: {method!r} ran a lossy verifier ({conf.get('verifier')}); "
                         f"a record holds what the exact rule accepts")
    drafted = accepted = 0
    try:
        for g in groups:
            if g.get("sweep"):
                continue
            for run in g.get("runs", []):
                if run.get("method") == method and run.get("drafted_at"):
                    drafted += int(run["drafted_at"][0])
                    accepted += int((run.get("accepted_at") or [0])[0])
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        raise BenchError(f"{path}: a malformed run of {method!r}: {e!r}") from None
    if drafted == 0:
        raise BenchError(f"{path}: {method!r} drafted no token in its runs")
    return AcceptanceRecord(
        temperature=float(header.get("temperature") or 0.0), accepted=accepted,
        drafted=drafted, batch_size=int(header.get("batch_size") or 1),
        prompts=str(header.get("prompts") or ""), n_prompts=int(header.get("n_prompts") or 0),
        method=method, method_args=dict((header.get("method_args") or {}).get(method) or {}),
        source=path.name), str(conf.get("description", ""))


def prompts_digest(items: list[dict]) -> str:
    import hashlib

    h = hashlib.sha1()
    for it in items:
        h.update(json.dumps([str(it["id"]), it["category"], it["prompt"]]).encode())
    return h.hexdigest()


def warm_snapshots(drafter, path: str | os.PathLike, questions: dict, encode,
                   ids: list[str]) -> dict:
    """``{question id: snapshot}``: what a drafter that learns across calls (suffix cache,
    datastore) had learnt by each question of ``ids`` in a benchmark journal, the answers of
    the groups recorded before it learnt in journal order (a question the journal lacks: all
    of them). ``questions`` maps ids to prompt items, ``encode`` a prompt to its tokens. The
    drafter is left as it was.

    Raises:
      BenchError: naming the question, when the journal has one ``questions`` lacks.
    """
    _, groups = read_journal(path)
    done = []  # (prompt tokens, answer) in journal order
    position = {}  # question id -> its index in ``done``
    for g in groups:
        r = next(r for r in g["runs"] if r["method"] == "ar")
        for pid, toks in zip(r["prompt_ids"], r["tokens"]):
            position[str(pid)] = len(done)
            q = questions.get(str(pid))
            if q is None:
                raise BenchError(f"{path}: journal question {pid} is not among the prompts")
            done.append((encode(q["prompt"]), toks))
    before = drafter.snapshot()
    out = {}
    for i in ids:
        drafter.restore(before)
        prev = done[:position.get(i, len(done))]
        if prev:
            drafter.observe([p for p, _ in prev], [t for _, t in prev])
        out[i] = drafter.snapshot()
    drafter.restore(before)
    return out
