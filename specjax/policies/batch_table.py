"""A batch-size-to-k table profiled on this machine (card C8; what vLLM's, SGLang's and
TensorRT-LLM's static speculation tables do).

``specjax bench --batch-sizes 1,4,16 --batch-table FILE`` runs a drafter with the ``fixed``
policy at its maximum ``k`` at each batch size and writes, per batch size ``B``, the ``k`` that
maximises expected tokens per unit step time::

    goodput_B(k) = (1 + a_1 + ... + a_k) / (verify_B(k + 1) + k * d_B)

where ``a_j`` is the measured acceptance of draft position ``j`` (the fraction of steps whose
first ``j`` drafts were all accepted), ``verify_B`` the verify-cost curve of batch ``B`` on this
machine (:mod:`specjax.cost_curves`) and ``d_B`` the drafting cost per token, solved
from the same run: a step of the ``k = K`` run cost ``tau / decode speedup`` plain steps, of
which ``verify_B(K + 1)`` was the verify forward. ``k = 0`` (plain decoding) is a candidate.

The ``batch_table`` policy reads the file (``--method-arg policy=batch_table
table=FILE``): every row drafts the table's ``k`` for the running batch size (the entry of
the largest profiled batch size not above it; the smallest entry below that). The file is
for one model and machine: the policy refuses a table written for another (names the file
and the field), and a table whose ``k`` exceeds the drafter's maximum.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import jax.numpy as jnp

from specjax.errors import PolicyError
from specjax.policies.adaptive import bucketed_cost
from specjax.policies.base import POLICIES, check_max_k, max_k_field

FORMAT = "specjax-batch-table-1"


def goodput_curve(acceptance: list[float | None], verify_cost: tuple[float, ...],
                  step_cost: float) -> tuple[list[float], float]:
    """``(goodput(k) for k = 0..K, d)`` for one batch size (see the module docstring):
    ``acceptance[j]`` of position ``j + 1``, the verify-cost curve ``cost[T - 1]`` and the
    measured cost of a ``k = K`` step relative to a plain step."""
    K = len(acceptance)
    cost = [float(c) for c in bucketed_cost(tuple(verify_cost), K)]
    d = max(0.0, (step_cost - cost[K]) / K) if K else 0.0
    a = [float(x or 0.0) for x in acceptance]
    return [(1.0 + sum(a[:k])) / (cost[k] + k * d) for k in range(K + 1)], d


def make_batch_table(method: str, rows: dict[int, dict], cost_for: Callable[[int, int], tuple],
                     key: dict, extra: dict | None = None) -> dict:
    """The table of ``method`` from its benchmark rows per batch size (``rows[B]`` has
    ``acceptance_by_position``, ``tau`` and ``decode_speedup_vs_ar`` or ``speedup_vs_ar``);
    ``cost_for(K, B)`` gives the verify-cost curve of batch ``B``."""
    entries = {}
    for B, row in sorted(rows.items()):
        acc = row.get("acceptance_by_position")
        speed = row.get("decode_speedup_vs_ar") or row.get("speedup_vs_ar")
        if not acc or not row.get("tau") or not speed:
            raise PolicyError(f"batch table for {method!r}: the batch-{B} row lacks per-position "
                              "acceptance, tau or a speedup (did the method draft?)")
        step = row["tau"] / speed
        curve = cost_for(len(acc), B)
        g, d = goodput_curve(acc, curve, step)
        k = max(range(len(g)), key=lambda i: (g[i], -i))
        entries[str(B)] = {"k": k, "goodput": [round(x, 4) for x in g],
                           "acceptance_by_position": acc, "draft_cost": round(d, 4),
                           "step_cost": round(step, 4),
                           "verify_cost": [round(c, 4) for c in curve[:len(acc) + 1]]}
    return {"format": FORMAT, "method": method, "max_k": max(len(r["acceptance_by_position"])
                                                             for r in rows.values()),
            "key": key, "entries": entries, **(extra or {})}


def table_key(lm) -> dict:
    """What a table is valid for: this machine and this model (shapes, dtype, quantization)."""
    from specjax.fingerprint import device_description, model_fingerprint

    return {"device": device_description(), **model_fingerprint(lm)}


def read_table(path: str) -> dict:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise PolicyError(f"{path}: batch table not found (write one with specjax bench "
                          "--batch-sizes ... --batch-table FILE)") from None
    except (OSError, ValueError) as e:
        raise PolicyError(f"{path}: not a batch table: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PolicyError(f"{path}: not a batch table (format must be {FORMAT!r}, got "
                          f"{data.get('format') if isinstance(data, dict) else data!r})")
    try:
        entries = {int(b): int(e["k"]) for b, e in data["entries"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PolicyError(f"{path}: field 'entries' must map batch sizes to {{'k': int}}: "
                          f"{type(e).__name__}: {e}") from None
    if not entries or any(b < 1 or k < 0 for b, k in entries.items()):
        raise PolicyError(f"{path}: field 'entries' needs batch sizes >= 1 and k >= 0, got "
                          f"{entries}")
    if not isinstance(data.get("key"), dict):
        raise PolicyError(f"{path}: field 'key' (device and model) is missing")
    return data


@POLICIES.register("batch_table", doc="a batch-size-to-k table profiled by specjax bench "
                   "--batch-table (the same k for every row of a batch)")
@dataclasses.dataclass(frozen=True)
class BatchTablePolicy:
    max_k: int = max_k_field()
    table: str = dataclasses.field(default="", metadata={
        "recorded": False,  # a path of this checkout: see specjax.methods.changed_options
        "help": "the table file written by specjax bench --batch-sizes ... --batch-table FILE"})
    entries: tuple[tuple[int, int], ...] = dataclasses.field(default=(), init=False)
    name: str = dataclasses.field(default="batch_table", init=False)
    stops_mid_draft: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        check_max_k(self.name, self.max_k)
        if not self.table:
            raise PolicyError("policy 'batch_table' needs table=FILE (written by specjax bench "
                              "--batch-sizes ... --batch-table FILE)")
        data = read_table(self.table)
        entries = tuple(sorted((int(b), int(e["k"])) for b, e in data["entries"].items()))
        too_long = [(b, k) for b, k in entries if k > self.max_k]
        if too_long:
            raise PolicyError(f"{self.table}: k {too_long[0][1]} for batch {too_long[0][0]} "
                              f"exceeds the drafter's maximum k {self.max_k}")
        object.__setattr__(self, "entries", entries)

    def check_target(self, lm) -> None:
        """Refuses a table profiled for another device or model, naming the field."""
        data = read_table(self.table)
        want = table_key(lm)
        for f, v in want.items():
            if data["key"].get(f) != v:
                raise PolicyError(f"{self.table}: written for another "
                                  f"{'device' if f == 'device' else 'model'} (key.{f} is "
                                  f"{data['key'].get(f)!r}, this run has {v!r}); profile "
                                  "again here with specjax bench --batch-table")

    def k_for(self, batch: int) -> int:
        below = [k for b, k in self.entries if b <= batch]
        return below[-1] if below else self.entries[0][1]

    def init(self, batch: int):
        return jnp.full((batch,), self.k_for(batch), jnp.int32)

    def decide(self, state, ctx):
        return state

    def stop(self, state, step):
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        return state


def write_table(path: str | Path, table: dict[str, Any]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(table, indent=1))
    return p
