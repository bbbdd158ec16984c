"""Trained heads installed with the package (``specjax/heads/shipped/<name>/``, bfloat16).

A drafter given no ``head=`` uses the shipped head of its kind whose target matches the
loaded model: the same layer count, hidden size and vocabulary size and the same tokenizer
(SHA-256). A model without a tokenizer (random test models) matches none, so such drafters
start from untrained heads. ``head=random`` asks for an untrained head explicitly.
"""

from __future__ import annotations

import json
from pathlib import Path

from specjax.tokenizer import tokenizer_sha256

ROOT = Path(__file__).parent / "shipped"
RANDOM = "random"
# drafter kind -> the head formats it loads
FORMATS = {"eagle": ("specjax-eagle-1",), "medusa": ("specjax-medusa-1",),
           "hydra": ("specjax-hydra-1",),
           "acceptance": ("specjax-acceptance-1",)}  # the specdec++ policy's heads


def shipped_heads(kind: str | None = None) -> list[tuple[str, dict]]:
    """``(directory, config)`` of every shipped head (of ``kind``), sorted by name."""
    out = []
    if not ROOT.is_dir():
        return out
    for d in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        try:
            conf = json.loads((d / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if kind is None or conf.get("format") in FORMATS.get(kind, ()):
            out.append((str(d), conf))
    return out


def find_shipped(kind: str, target, tokenizer) -> str | None:
    """The shipped head of ``kind`` for ``target`` (a Llama) with ``tokenizer``, or None."""
    if tokenizer is None:
        return None
    sha = tokenizer_sha256(tokenizer)
    t = target.cfg
    for path, conf in shipped_heads(kind):
        tgt = conf.get("target") or {}
        if (tgt.get("num_layers"), tgt.get("hidden_size"), tgt.get("vocab_size"),
                tgt.get("tokenizer_sha256")) == (t.num_layers, t.hidden_size, t.vocab_size, sha):
            return path
    return None


def resolve_head(kind: str, head: str | None, target_lm) -> str | None:
    """``head=`` as given, the shipped head when None (else None: an untrained head), None
    for ``head=random``."""
    if head == RANDOM:
        return None
    if head is not None:
        return head
    target = getattr(target_lm, "model", target_lm)
    return find_shipped(kind, target, getattr(target_lm, "tokenizer", None))
