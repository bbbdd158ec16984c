"""A head's first-token acceptance measured directly: the head drafts one token at every step
(``policy=fixed``, ``k=1``) over a prompt set, and the accepted share of those tokens is its
record (:mod:`specjax.heads.measured`). ``specjax head measure-acceptance DIR`` runs it after
training, where ``specjax head record-acceptance`` counts a ``specjax bench`` journal instead.

Drafting one token at every step counts the head's acceptance at every step, where a run
under ``adaptive`` counts it only at the steps the policy chose to draft. Exact numerics make
a row's tokens the same at any batch size, and a fixed length makes its drafts the same, so
the counts do not depend on the batch size: it only sets the speed of the measurement.
"""

from __future__ import annotations

import math
from pathlib import Path

from specjax.errors import BenchError, CheckpointError
from specjax.heads.measured import AcceptanceRecord, head_config
from specjax.heads.shipped import FORMATS, ROOT

MEASURE_ARGS = {"policy": "fixed", "k": "1"}  # one drafted token at every step
SOURCE = "specjax head measure-acceptance"


def head_method(head_dir: str | Path) -> str:
    """The drafter that loads the head in ``head_dir``: ``eagle``, ``medusa`` or ``hydra``
    (by its ``config.json``'s ``format``; an EAGLE-3 head in the serving engines' layout is
    an ``eagle`` head)."""
    from specjax.heads.interop import is_engine_layout

    conf_f = Path(head_dir) / "config.json"
    conf = head_config(head_dir)
    fmt = conf.get("format")
    for name in ("eagle", "medusa", "hydra"):
        if fmt in FORMATS[name]:
            return name
    if fmt is None and is_engine_layout(conf):
        return "eagle"
    known = [f for name in ("eagle", "medusa", "hydra") for f in FORMATS[name]]
    raise CheckpointError(f"{conf_f}: format {fmt!r} is not a draft head's (eagle, medusa and "
                          f"hydra heads are {', '.join(known)})")


def check_settings(temperature, max_new_tokens: int, batch_size: int) -> None:
    """Raises :class:`BenchError` naming a setting a measurement cannot run with (checked
    before the model loads)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            temperature >= 0 and math.isfinite(temperature)):
        raise BenchError(f"temperature must be a finite number >= 0, got {temperature!r}")
    for name, v, least in (("max_new_tokens", max_new_tokens, 2), ("batch_size", batch_size, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            why = " (a draft needs room for a token after it)" if least == 2 else ""
            raise BenchError(f"{name} must be an integer >= {least}{why}, got {v!r}")


def refuse_shipped(head_dir: str | Path) -> None:
    """Raises :class:`CheckpointError` for a head shipped with the package: its records are
    counted from the journals in docs/results (a test recounts them)."""
    if Path(head_dir).resolve().is_relative_to(ROOT.resolve()):
        raise CheckpointError(f"{head_dir} is a head shipped with specjax, whose records are "
                              f"counted from the project's journals; copy the directory and "
                              f"measure the copy")


def measure_first_token(lm, head_dir: str | Path, items: list[dict], *, prompts: str,
                        temperature: float = 0.0, max_new_tokens: int = 128,
                        batch_size: int = 4, seed: int = 0,
                        progress: bool = True) -> AcceptanceRecord:
    """Decodes ``items`` (``[{"prompt", ...}]``, chat template applied) with the head in
    ``head_dir`` drafting one token at every step, at ``temperature`` (0: greedy; sampled:
    lossless chain sampling), and counts its drafted tokens and the accepted ones.

    Args:
      lm: the loaded target (its tokenizer encodes the prompts); the head must have been
        trained for it (the drafter's loader checks).
      head_dir: the head directory.
      items: the prompts, as :func:`specjax.bench.prompts.load_prompts` returns them.
      prompts: their spec, written into the record.
      temperature, max_new_tokens, batch_size, seed: the decoding settings.
      progress: a progress bar over the prompts.

    Returns:
      The record (not written: :func:`specjax.heads.measured.record` writes it).

    Raises:
      BenchError: bad settings, or a run that drafted nothing (every prompt ended at once).
      CheckpointError: the head cannot be read or was trained for another target.
    """
    from tqdm import tqdm

    from specjax.engine import generate
    from specjax.methods import build
    from specjax.sampling import SamplingParams

    check_settings(temperature, max_new_tokens, batch_size)
    if not items:
        raise BenchError("no prompts to measure on")
    tok = lm.tokenizer
    if tok is None:
        raise BenchError(f"{lm.source}: no tokenizer in this checkpoint; cannot encode prompts")
    method = head_method(head_dir)
    greedy = temperature == 0
    # resolved: a relative directory named like a keyword of head= ("random") is a path
    d, pol, ver = build(method, lm, {"head": str(Path(head_dir).resolve()), **MEASURE_ARGS},
                        batch=batch_size, greedy=greedy, temperature=float(temperature))
    encoded = [tok.encode_chat(it["prompt"]) for it in items]
    bar = tqdm(total=len(encoded), desc=f"{method} at temperature {temperature:g}",
               unit="prompt", disable=not progress)
    try:
        r = generate(lm.model, encoded, max_new_tokens=max_new_tokens,
                     sampling=SamplingParams(temperature=float(temperature), seed=seed),
                     eos_ids=tok.eos_ids, batch_size=batch_size, drafter=d, policy=pol,
                     verifier=ver, progress=bar.update)
    finally:
        bar.close()
    drafted = sum(x[0] for x in r.extra["drafted_at"])
    accepted = sum(x[0] for x in r.extra["accepted_at"])
    if drafted == 0:
        raise BenchError(f"{method} drafted no token over {len(items)} prompts (every answer "
                         f"ended within a token?): nothing to record; give more prompts or "
                         f"a larger max_new_tokens")
    return AcceptanceRecord(
        temperature=float(temperature), accepted=int(accepted), drafted=int(drafted),
        batch_size=batch_size, prompts=prompts, n_prompts=len(items), method=method,
        method_args=dict(MEASURE_ARGS),
        source=f"{SOURCE} (max_new_tokens={max_new_tokens}, seed={seed}, "
               f"{_target_settings(lm)})")


def _target_settings(lm) -> str:
    """The target's dtype, quantization and numerics, as the record's source names them."""
    model = lm.model
    dtype = getattr(model, "dtype", None)
    parts = [None if dtype is None else str(dtype), getattr(model, "quantization", None),
             getattr(model, "numerics", None)]
    return ", ".join(str(p) for p in parts if p not in (None, "none", ""))
