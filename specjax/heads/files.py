"""Head directories shared by every head kind: ``config.json`` (``format``, the head's config
under one key, the target's shapes and tokenizer hash, free-form ``meta``) and
``model.safetensors`` (the parameters by path and ``draft_ids``, the target id of every
draft-vocabulary id). Loading checks what a wrong file could get wrong and names the file
and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flax import nnx

from specjax.errors import CheckpointError
from specjax.tokenizer import tokenizer_sha256


def np_dtype(name: str):
    """``float32`` | ``bfloat16`` | ``float16`` -> a numpy dtype (bfloat16 via ml_dtypes)."""
    if name not in ("float32", "bfloat16", "float16"):
        raise CheckpointError(f"dtype must be float32, bfloat16 or float16, got {name!r}")
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def flat_params(state) -> dict[str, np.ndarray]:
    return {".".join(map(str, k)): np.asarray(leaf.get_value(), np.float32)
            for k, leaf in nnx.to_flat_state(state)}


def save_head_dir(path: str | Path, fmt: str, key: str, cfg, state, draft_ids, *,
                  tokenizer=None, meta: dict | None = None, dtype: str = "float32") -> Path:
    """Writes ``path/config.json`` and ``path/model.safetensors``; ``cfg`` has ``to_dict``,
    ``target_layers``, ``hidden_size`` and ``vocab_size``."""
    from safetensors.numpy import save_file

    dt = np_dtype(dtype)
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.astype(dt) for k, v in flat_params(state).items()}
    tensors["draft_ids"] = np.asarray(draft_ids, np.int32)
    save_file(tensors, str(p / "model.safetensors"))
    conf = {"format": fmt, key: cfg.to_dict(),
            "target": {"num_layers": cfg.target_layers, "hidden_size": cfg.hidden_size,
                       "vocab_size": cfg.vocab_size,
                       "tokenizer_sha256": tokenizer_sha256(tokenizer) if tokenizer else None},
            "meta": meta or {}}
    (p / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    return p


def read_head_conf(path: str | Path, fmt: str, what: str) -> dict:
    """``path/config.json`` of a head directory of format ``fmt`` (``what``: its name in
    errors, e.g. "Medusa heads")."""
    p = Path(path)
    conf_f, weights_f = p / "config.json", p / "model.safetensors"
    for f in (conf_f, weights_f):
        if not f.is_file():
            raise CheckpointError(f"{f}: not found ({what} are a directory with config.json "
                                  "and model.safetensors)")
    try:
        conf = json.loads(conf_f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{conf_f}: not a JSON config: {e}") from None
    if not isinstance(conf, dict) or conf.get("format") != fmt:
        raise CheckpointError(f"{conf_f}: not specjax {what} (format "
                              f"{conf.get('format') if isinstance(conf, dict) else None!r}, "
                              f"expected {fmt!r})")
    return conf


def check_target(path, conf: dict, checks, tokenizer, what: str) -> None:
    """``checks``: ``(field, the file's value, the target's)``; and the tokenizer hash."""
    for field, have, want in checks:
        if have != want:
            raise CheckpointError(f"{path}: {what} trained for a target with {field} = "
                                  f"{have}; the loaded target has {want}")
    want_tok = (conf.get("target") or {}).get("tokenizer_sha256")
    have_tok = tokenizer_sha256(tokenizer) if tokenizer is not None else None
    if want_tok and have_tok and want_tok != have_tok:
        raise CheckpointError(f"{path}: {what} trained with another tokenizer (sha256 "
                              f"{want_tok[:12]}..., the target's is {have_tok[:12]}...)")


def read_tensors(path: str | Path, draft_vocab: int, vocab_size: int):
    """``(tensors without draft_ids, draft_ids int32)`` of ``path/model.safetensors``."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    weights_f = Path(path) / "model.safetensors"
    try:
        tensors = load_file(str(weights_f))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights_f}: unreadable or truncated safetensors file: "
                              f"{e}") from None
    ids = tensors.pop("draft_ids", None)
    if ids is None:
        raise CheckpointError(f"{weights_f}: has no 'draft_ids' tensor (the draft vocabulary "
                              "map)")
    ids = np.asarray(ids).astype(np.int64)
    if ids.shape != (draft_vocab,) or ids.min() < 0 or ids.max() >= vocab_size or \
            len(np.unique(ids)) != len(ids):
        raise CheckpointError(f"{weights_f}: draft_ids must hold {draft_vocab} distinct "
                              f"target ids in [0, {vocab_size})")
    return tensors, ids.astype(np.int32)


def fill_state(state, tensors: dict, path: str | Path, what: str):
    """``state`` with every parameter taken from ``tensors`` (float32); a missing, unexpected
    or misshapen tensor is an error naming it."""
    weights_f = Path(path) / "model.safetensors"
    flat = nnx.to_flat_state(state)
    names = {".".join(map(str, k)) for k, _ in flat}
    missing, extra = sorted(names - set(tensors)), sorted(set(tensors) - names)
    if missing or extra:
        raise CheckpointError(f"{weights_f}: tensors do not match {what}: missing "
                              f"{missing[:5]}, unexpected {extra[:5]}")
    for path_, leaf in flat:
        name = ".".join(map(str, path_))
        arr = np.asarray(tensors[name], np.float32)
        if arr.shape != leaf.get_value().shape:
            raise CheckpointError(f"{weights_f}: tensor {name} has shape {arr.shape}, "
                                  f"expected {leaf.get_value().shape}")
        leaf.set_value(arr)
    return nnx.from_flat_state(flat)


def describe(kind: str, path, conf: dict) -> str:
    step = (conf.get("meta") or {}).get("step")
    return f"{kind} {path}" + (f" (step {step})" if step is not None else "")
