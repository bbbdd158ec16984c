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


# tensors written as int8 rows with a float32 scale each (``save_head_dir(dtype="int8")``):
# the scale of tensor NAME is stored as NAME + INT8_SCALE, shape ``NAME.shape[:-1] + (1,)``
INT8_SCALE = ".int8_scale"
# below this many elements a tensor (norm weights, biases) stays bfloat16 in an int8 file
INT8_MIN_SIZE = 1 << 16
STORAGE_DTYPES = ("float32", "bfloat16", "float16", "int8")


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


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row of the last axis (the head files keep weights as ``[..., out,
    in]``: one scale per output row): ``(q int8, scale float32 [..., 1])``, ``q * scale``
    within half a step of ``w``. An all-zero row gets scale 1. (The w8a8 model's
    :func:`specjax.models.llama.quantize_rows` is the jnp twin; under XLA its scales differ
    in the last bit for ~5% of rows, moving ties by one step, so head files keep this numpy
    one, which wrote the shipped Hydra++ file that was measured.)"""
    w = np.asarray(w, np.float32)
    amax = np.max(np.abs(w), axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def storage_tensors(params: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The tensors a head file holds for ``dtype``: every parameter in that dtype, or for
    ``"int8"`` the matrices of at least :data:`INT8_MIN_SIZE` elements as int8 rows with
    their scales (``NAME + INT8_SCALE``) and the rest in bfloat16 (a quarter of float32's
    bytes, half of bfloat16's; the drafter's proposals change a little, never its
    exactness: the target verifies every token)."""
    if dtype not in STORAGE_DTYPES:
        raise CheckpointError(f"dtype must be one of {', '.join(STORAGE_DTYPES)}, got "
                              f"{dtype!r}")
    if dtype != "int8":
        dt = np_dtype(dtype)
        return {k: v.astype(dt) for k, v in params.items()}
    out = {}
    for k, v in params.items():
        if v.ndim >= 2 and v.size >= INT8_MIN_SIZE:
            out[k], out[k + INT8_SCALE] = quantize_rows(v)
        else:
            out[k] = v.astype(np_dtype("bfloat16"))
    return out


def dequantize_tensors(tensors: dict, weights_f) -> dict:
    """``tensors`` with every int8 tensor and its scale replaced by ``q * scale`` (float32);
    an int8 tensor without its scale, a scale without its tensor or of the wrong shape is an
    error naming the file and the tensor."""
    out = dict(tensors)
    for name in [k for k in tensors if k.endswith(INT8_SCALE)]:
        base = name[:-len(INT8_SCALE)]
        q, scale = out.pop(base, None), np.asarray(out.pop(name), np.float32)
        if q is None:
            raise CheckpointError(f"{weights_f}: scale {name} has no int8 tensor {base}")
        q = np.asarray(q)
        if q.dtype != np.int8 or scale.shape != q.shape[:-1] + (1,) or \
                not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise CheckpointError(f"{weights_f}: tensor {base} ({q.dtype}, {q.shape}) and its "
                                  f"scale ({scale.shape}) do not form int8 rows: the scale "
                                  f"must be positive, finite and of shape "
                                  f"{q.shape[:-1] + (1,)}")
        out[base] = q.astype(np.float32) * scale
    left = [k for k, v in out.items() if np.asarray(v).dtype == np.int8]
    if left:
        raise CheckpointError(f"{weights_f}: int8 tensor {left[0]} has no scale "
                              f"({left[0]}{INT8_SCALE})")
    return out


def save_head_dir(path: str | Path, fmt: str, key: str, cfg, state, draft_ids, *,
                  tokenizer=None, meta: dict | None = None, dtype: str = "float32") -> Path:
    """Writes ``path/config.json`` and ``path/model.safetensors``; ``cfg`` has ``to_dict``,
    ``target_layers``, ``hidden_size`` and ``vocab_size``. ``dtype``: one of
    :data:`STORAGE_DTYPES` (``"int8"``: :func:`storage_tensors`); loading always gives
    float32."""
    from safetensors.numpy import save_file

    tensors = storage_tensors(flat_params(state), dtype)
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    tensors["draft_ids"] = np.asarray(draft_ids, np.int32)
    save_file(tensors, str(p / "model.safetensors"))
    conf = {"format": fmt, key: cfg.to_dict(),
            "target": {"num_layers": cfg.target_layers, "hidden_size": cfg.hidden_size,
                       "vocab_size": cfg.vocab_size,
                       "tokenizer_sha256": tokenizer_sha256(tokenizer) if tokenizer else None},
            "meta": {**(meta or {}), "storage_dtype": dtype}}
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
    tensors = dequantize_tensors(tensors, weights_f)
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
