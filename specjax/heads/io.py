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

from flax import nnx

from specjax.errors import CheckpointError
from specjax.heads.eagle import EagleHead, EagleHeadConfig
from specjax.heads.files import check_target, describe, fill_state, read_tensors, \
    save_head_dir
from specjax.heads.interop import import_eagle3, is_engine_layout

FORMAT = "specjax-eagle-1"


def save_eagle_head(path: str | Path, cfg: EagleHeadConfig, state, draft_ids, *,
                    tokenizer=None, meta: dict | None = None, dtype: str = "float32") -> Path:
    """Writes a head directory (``config.json`` + ``model.safetensors``); returns it.
    ``dtype="bfloat16"`` halves the file (shipped heads); loading always gives float32."""
    return save_head_dir(path, FORMAT, "head", cfg, state, draft_ids, tokenizer=tokenizer,
                         meta=meta, dtype=dtype)


def load_eagle_head(path: str | Path, target, tokenizer=None):
    """Loads a head directory for ``target`` (a Llama).

    Returns ``(cfg, graphdef, state, draft_ids, description)``.

    Raises:
      CheckpointError: naming the file and the problem.
    """
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
    check_target(p, conf, [("num_layers", cfg.target_layers, t.num_layers),
                           ("hidden_size", cfg.hidden_size, t.hidden_size),
                           ("vocab_size", cfg.vocab_size, t.vocab_size),
                           ("num_heads", cfg.num_heads, t.num_heads),
                           ("num_kv_heads", cfg.num_kv_heads, t.num_kv_heads)],
                 tokenizer, "this head was")
    tensors, draft_ids = read_tensors(p, cfg.draft_vocab, cfg.vocab_size)
    graphdef, state = nnx.split(EagleHead(cfg, rngs=nnx.Rngs(0)))
    state = fill_state(state, tensors, p, f"an {cfg.variant} head")
    return cfg, graphdef, state, draft_ids, describe(f"{cfg.variant} head", p, conf)
