"""Head checkpoint files: a directory with ``config.json`` and ``model.safetensors``.

``config.json`` holds ``format`` (``"specjax-eagle-1"``), the head's :class:`EagleHeadConfig`,
the target it was trained for (layer count, hidden size, vocabulary size and, when known, the
SHA-256 of its tokenizer) and free-form ``meta`` (training step, data, ...).
``model.safetensors`` holds the head's tensors by parameter path (``wqkv``, ``fc``, ...) and
``draft_ids`` (int32: the target id of every draft-vocabulary id).

Loading checks everything a wrong file could get wrong and names the file and the problem: a
missing or truncated file, a head for another target (hidden size, vocabulary, layer count,
tokenizer), a draft map with ids outside the vocabulary or repeated ids, tensors of the wrong
shape.

A directory in the serving engines' EAGLE-3 layout (vLLM, SGLang, SpecForge:
:mod:`specjax.heads.interop`) loads through the same :func:`load_eagle_head`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flax import nnx

from specjax.errors import CheckpointError
from specjax.heads.eagle import EagleHead, EagleHeadConfig
from specjax.heads.interop import _np_dtype, import_eagle3, is_engine_layout
from specjax.tokenizer import tokenizer_sha256

FORMAT = "specjax-eagle-1"


def _flat(state) -> dict[str, np.ndarray]:
    out = {}
    for path, leaf in nnx.to_flat_state(state):
        out[".".join(str(p) for p in path)] = np.asarray(leaf.get_value())
    return out


def save_eagle_head(path: str | Path, cfg: EagleHeadConfig, state, draft_ids, *,
                    tokenizer=None, meta: dict | None = None, dtype: str = "float32") -> Path:
    """Writes a head directory (``config.json`` + ``model.safetensors``); returns it.
    ``dtype="bfloat16"`` halves the file (shipped heads); loading always gives float32."""
    from safetensors.numpy import save_file

    dt = _np_dtype(dtype)
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    tensors = {n: a.astype(dt) for n, a in _flat(state).items()}
    tensors["draft_ids"] = np.asarray(draft_ids, np.int32)
    save_file(tensors, str(p / "model.safetensors"))
    conf = {"format": FORMAT, "head": cfg.to_dict(),
            "target": {"num_layers": cfg.target_layers, "hidden_size": cfg.hidden_size,
                       "vocab_size": cfg.vocab_size,
                       "tokenizer_sha256": tokenizer_sha256(tokenizer) if tokenizer else None},
            "meta": meta or {}}
    (p / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    return p


def load_eagle_head(path: str | Path, target, tokenizer=None):
    """Loads a head directory for ``target`` (a Llama).

    Returns ``(cfg, graphdef, state, draft_ids, description)``.

    Raises:
      CheckpointError: naming the file and the problem.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = Path(path)
    conf_f, weights_f = p / "config.json", p / "model.safetensors"
    for f in (conf_f, weights_f):
        if not f.is_file():
            raise CheckpointError(f"{f}: not found (a head is a directory with config.json "
                                  "and model.safetensors)")
    try:
        conf = json.loads(conf_f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{conf_f}: not a JSON head config: {e}") from None
    if is_engine_layout(conf):
        return import_eagle3(p, target, conf)
    if not isinstance(conf, dict) or conf.get("format") != FORMAT:
        raise CheckpointError(f"{conf_f}: not a specjax EAGLE head (format "
                              f"{conf.get('format') if isinstance(conf, dict) else None!r}, "
                              f"expected {FORMAT!r})")
    try:
        cfg = EagleHeadConfig.from_dict(conf["head"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{conf_f}: bad head config: {type(e).__name__}: {e}") from None
    t = target.cfg
    for field, have, want in (("num_layers", cfg.target_layers, t.num_layers),
                              ("hidden_size", cfg.hidden_size, t.hidden_size),
                              ("vocab_size", cfg.vocab_size, t.vocab_size),
                              ("num_heads", cfg.num_heads, t.num_heads),
                              ("num_kv_heads", cfg.num_kv_heads, t.num_kv_heads)):
        if have != want:
            raise CheckpointError(f"{p}: this head was trained for a target with {field} = "
                                  f"{have}; the loaded target has {want}")
    want_tok = (conf.get("target") or {}).get("tokenizer_sha256")
    have_tok = tokenizer_sha256(tokenizer) if tokenizer is not None else None
    if want_tok and have_tok and want_tok != have_tok:
        raise CheckpointError(f"{p}: this head was trained with another tokenizer (sha256 "
                              f"{want_tok[:12]}..., the target's is {have_tok[:12]}...)")
    try:
        tensors = load_file(str(weights_f))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights_f}: unreadable or truncated safetensors file: "
                              f"{e}") from None
    draft_ids = tensors.pop("draft_ids", None)
    if draft_ids is None:
        raise CheckpointError(f"{weights_f}: has no 'draft_ids' tensor (the draft vocabulary "
                              "map)")
    draft_ids = np.asarray(draft_ids).astype(np.int64)
    if draft_ids.shape != (cfg.draft_vocab,) or draft_ids.min() < 0 or \
            draft_ids.max() >= cfg.vocab_size or len(np.unique(draft_ids)) != len(draft_ids):
        raise CheckpointError(f"{weights_f}: draft_ids must hold {cfg.draft_vocab} distinct "
                              f"target ids in [0, {cfg.vocab_size})")
    head = EagleHead(cfg, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(head)
    want = _flat(state)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise CheckpointError(f"{weights_f}: tensors do not match an {cfg.variant} head: "
                              f"missing {missing[:5]}, unexpected {extra[:5]}")
    for name, arr in want.items():
        if tensors[name].shape != arr.shape:
            raise CheckpointError(f"{weights_f}: tensor {name} has shape "
                                  f"{tuple(tensors[name].shape)}, expected {arr.shape}")
    flat = nnx.to_flat_state(state)
    for path, leaf in flat:
        leaf.set_value(np.asarray(tensors[".".join(str(x) for x in path)], np.float32))
    state = nnx.from_flat_state(flat)
    step = (conf.get("meta") or {}).get("step")
    desc = f"{cfg.variant} head {p}" + (f" (step {step})" if step is not None else "")
    return cfg, graphdef, state, draft_ids.astype(np.int32), desc
