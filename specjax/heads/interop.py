"""EAGLE-3 heads in the layout the serving engines read (vLLM, SGLang, SpecForge).

That layout is a directory with ``config.json`` (a Hugging Face Llama config with
``architectures: ["LlamaForCausalLMEagle3"]``, ``num_hidden_layers: 1``, ``draft_vocab_size``
and ``eagle_config.eagle_aux_hidden_state_layer_ids``) and ``model.safetensors`` holding::

    fc.weight                                   [h, 3h]     fuses the three target features
    midlayer.input_layernorm.weight             [h]         norm of the token embedding
    midlayer.hidden_norm.weight                 [h]         norm of the fused feature
    midlayer.self_attn.{q,k,v}_proj.weight      [*, 2h]     read concat(norm(emb), norm(g))
    midlayer.self_attn.o_proj.weight
    midlayer.post_attention_layernorm.weight
    midlayer.mlp.{gate,up,down}_proj.weight
    norm.weight                                 [h]         final norm
    lm_head.weight                              [draft_vocab, h]
    d2t                                         int64[draft_vocab]: target id = draft id + d2t
    t2d                                         bool[vocab]: the target ids in the draft vocabulary

The mapping to :class:`~specjax.heads.eagle.EagleHead` is one to one (``wqkv`` = q, k, v
stacked; ``w_gate_up`` = gate, up stacked; specjax's ``attn_norm`` is unused by EAGLE-3).
Feature layers: the engines name the *input* of a target layer (the residual stream entering
layer ``i``); specjax names the block whose output it is, so ``aux id = specjax layer + 1``.
On export the draft vocabulary is ordered by target id (``d2t`` non-decreasing, so ``t2d``
and ``d2t`` agree on the order, as SpecForge writes them).

The embedding is the target's (specjax never stores it; an ``embed_tokens.weight`` in an
imported file is checked for shape and otherwise ignored, as vLLM shares the target's).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flax import nnx

from specjax.errors import CheckpointError
from specjax.heads.eagle import EagleHead, EagleHeadConfig
from specjax.heads.files import flat_params, np_dtype

ARCHITECTURE = "LlamaForCausalLMEagle3"


def is_engine_layout(conf: dict) -> bool:
    """True for a config.json in the engines' layout (it names architectures, no format)."""
    return isinstance(conf, dict) and "format" not in conf and \
        any("eagle3" in str(a).lower() for a in conf.get("architectures") or ())


def export_eagle3(path: str | Path, cfg: EagleHeadConfig, state, draft_ids, *,
                  dtype: str = "bfloat16", max_position_embeddings: int = 8192) -> Path:
    """Writes an EAGLE-3 head in the engines' layout (``config.json`` + ``model.safetensors``).

    Raises:
      CheckpointError: for an EAGLE-1 head (the engines' EAGLE-3 layout cannot hold it).
    """
    from safetensors.numpy import save_file

    if cfg.variant != "eagle3":
        raise CheckpointError(f"only eagle3 heads have the engines' EAGLE-3 layout; this head "
                              f"is {cfg.variant}")
    dt = np_dtype(dtype)
    p = flat_params(state)
    ids = np.asarray(draft_ids, np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    h, nh, kvh, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q, k, v = np.split(p["wqkv"], [nh * hd, (nh + kvh) * hd], axis=0)
    gate, up = np.split(p["w_gate_up"], 2, axis=0)
    t2d = np.zeros((cfg.vocab_size,), bool)
    t2d[ids] = True
    tensors = {
        "fc.weight": p["fc"],
        "midlayer.input_layernorm.weight": p["emb_norm"],
        "midlayer.hidden_norm.weight": p["hid_norm"],
        "midlayer.self_attn.q_proj.weight": q,
        "midlayer.self_attn.k_proj.weight": k,
        "midlayer.self_attn.v_proj.weight": v,
        "midlayer.self_attn.o_proj.weight": p["wo"],
        "midlayer.post_attention_layernorm.weight": p["mlp_norm"],
        "midlayer.mlp.gate_proj.weight": gate,
        "midlayer.mlp.up_proj.weight": up,
        "midlayer.mlp.down_proj.weight": p["w_down"],
        "norm.weight": p["final_norm"],
        "lm_head.weight": p["lm_head"][order],
    }
    tensors = {n: np.ascontiguousarray(a.astype(dt)) for n, a in tensors.items()}
    tensors["d2t"] = ids - np.arange(len(ids), dtype=np.int64)
    tensors["t2d"] = t2d
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    conf = {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": nh,
        "num_key_value_heads": kvh,
        "head_dim": hd,
        "num_hidden_layers": 1,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "target_hidden_size": h,
        "eagle_config": {"use_aux_hidden_state": True,
                         "eagle_aux_hidden_state_layer_ids": [i + 1 for i in cfg.feature_layers]},
        "specjax": {"target_layers": cfg.target_layers},
    }
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    return out


def _need(conf: dict, key: str, where: Path):
    if key not in conf:
        raise CheckpointError(f"{where}: the EAGLE-3 config lacks {key!r}")
    return conf[key]


def import_eagle3(path: str | Path, target, conf: dict | None = None):
    """Loads an EAGLE-3 head in the engines' layout for ``target`` (a Llama).

    Returns ``(cfg, graphdef, state, draft_ids, description)`` like
    :func:`specjax.heads.io.load_eagle_head`.

    Raises:
      CheckpointError: naming the file and the problem (another target's head, missing or
        misshapen tensors, a draft map outside the vocabulary, an unsupported variant).
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = Path(path)
    conf_f, weights_f = p / "config.json", p / "model.safetensors"
    if conf is None:
        try:
            conf = json.loads(conf_f.read_text())
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{conf_f}: not a readable JSON config: {e}") from None
    if not is_engine_layout(conf):
        raise CheckpointError(f"{conf_f}: not an EAGLE-3 head config (architectures "
                              f"{conf.get('architectures')!r})")
    if not weights_f.is_file():
        raise CheckpointError(f"{weights_f}: not found")
    t = target.cfg
    if int(_need(conf, "num_hidden_layers", conf_f)) != 1:
        raise CheckpointError(f"{conf_f}: {conf['num_hidden_layers']} decoder layers; specjax "
                              "EAGLE-3 heads have one")
    if conf.get("norm_before_residual"):
        raise CheckpointError(f"{conf_f}: norm_before_residual heads (residual stream from the "
                              "normed feature) are not supported")
    th = int(conf.get("target_hidden_size", conf.get("hidden_size", -1)))
    for field, have, want in (("hidden_size", int(_need(conf, "hidden_size", conf_f)),
                               t.hidden_size),
                              ("target_hidden_size", th, t.hidden_size),
                              ("vocab_size", int(_need(conf, "vocab_size", conf_f)),
                               t.vocab_size)):
        if have != want:
            raise CheckpointError(f"{p}: this head was made for a target with {field} = "
                                  f"{have}; the loaded target has {want}")
    L = t.num_layers
    aux = (conf.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if aux is None:  # the engines' default: inputs of layers 2, L/2 and L-3
        aux = [2, L // 2, L - 3]
    if len(aux) != 3 or not all(isinstance(i, int) and 1 <= i <= L for i in aux):
        raise CheckpointError(f"{conf_f}: eagle_aux_hidden_state_layer_ids {aux} must be three "
                              f"layer inputs in [1, {L}] of the {L}-layer target")
    want_layers = (conf.get("specjax") or {}).get("target_layers")
    if want_layers is not None and int(want_layers) != L:
        raise CheckpointError(f"{p}: this head was made for a target with num_layers = "
                              f"{want_layers}; the loaded target has {L}")
    nh = int(conf.get("num_attention_heads", t.num_heads))
    kvh = int(conf.get("num_key_value_heads", nh))
    hd = int(conf.get("head_dim") or t.hidden_size // nh)
    try:
        tensors = load_file(str(weights_f))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights_f}: unreadable or truncated safetensors file: "
                              f"{e}") from None
    if "lm_head.weight" not in tensors:
        raise CheckpointError(f"{weights_f}: has no lm_head.weight")
    dv = int(conf.get("draft_vocab_size") or tensors["lm_head.weight"].shape[0])
    if "d2t" in tensors:
        d2t = np.asarray(tensors["d2t"]).astype(np.int64)
        if d2t.shape != (dv,):
            raise CheckpointError(f"{weights_f}: d2t has shape {d2t.shape}, expected ({dv},)")
        draft_ids = np.arange(dv, dtype=np.int64) + d2t
    elif dv == t.vocab_size:
        draft_ids = np.arange(dv, dtype=np.int64)
    else:
        raise CheckpointError(f"{weights_f}: a draft vocabulary of {dv} tokens needs a d2t map")
    if draft_ids.min() < 0 or draft_ids.max() >= t.vocab_size or \
            len(np.unique(draft_ids)) != dv:
        raise CheckpointError(f"{weights_f}: d2t maps draft ids to target ids outside "
                              f"[0, {t.vocab_size}) or to repeated ids")
    try:
        cfg = EagleHeadConfig(
            variant="eagle3", hidden_size=t.hidden_size, num_heads=nh, num_kv_heads=kvh,
            head_dim=hd, intermediate_size=int(_need(conf, "intermediate_size", conf_f)),
            vocab_size=t.vocab_size, draft_vocab=dv,
            feature_layers=tuple(i - 1 for i in aux), target_layers=L,
            rms_norm_eps=float(conf.get("rms_norm_eps", t.rms_norm_eps)),
            rope_theta=float(conf.get("rope_theta", t.rope_theta)))
    except Exception as e:  # a DrafterError from the config's own checks
        raise CheckpointError(f"{conf_f}: {e}") from None

    def get(name, shape):
        if name not in tensors:
            raise CheckpointError(f"{weights_f}: missing tensor {name}")
        a = np.asarray(tensors[name]).astype(np.float32)
        if a.shape != shape:
            raise CheckpointError(f"{weights_f}: tensor {name} has shape {a.shape}, expected "
                                  f"{shape}")
        return a

    h, f = t.hidden_size, cfg.intermediate_size
    m = "midlayer."
    if "embed_tokens.weight" in tensors and \
            tensors["embed_tokens.weight"].shape != (t.vocab_size, h):
        raise CheckpointError(f"{weights_f}: embed_tokens.weight has shape "
                              f"{tensors['embed_tokens.weight'].shape}, expected "
                              f"{(t.vocab_size, h)}")
    values = {
        "fc": get("fc.weight", (h, 3 * h)),
        "emb_norm": get(m + "input_layernorm.weight", (h,)),
        "hid_norm": get(m + "hidden_norm.weight", (h,)),
        "attn_norm": np.ones((h,), np.float32),
        "wqkv": np.concatenate([get(m + "self_attn.q_proj.weight", (nh * hd, 2 * h)),
                                get(m + "self_attn.k_proj.weight", (kvh * hd, 2 * h)),
                                get(m + "self_attn.v_proj.weight", (kvh * hd, 2 * h))], 0),
        "wo": get(m + "self_attn.o_proj.weight", (h, nh * hd)),
        "mlp_norm": get(m + "post_attention_layernorm.weight", (h,)),
        "w_gate_up": np.concatenate([get(m + "mlp.gate_proj.weight", (f, h)),
                                     get(m + "mlp.up_proj.weight", (f, h))], 0),
        "w_down": get(m + "mlp.down_proj.weight", (h, f)),
        "final_norm": get("norm.weight", (h,)),
        "lm_head": get("lm_head.weight", (dv, h)),
    }
    graphdef, state = nnx.split(EagleHead(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(state)
    for path_, leaf in flat:
        leaf.set_value(values[".".join(str(x) for x in path_)])
    state = nnx.from_flat_state(flat)
    return cfg, graphdef, state, draft_ids.astype(np.int32), f"eagle3 head {p} (engine layout)"
