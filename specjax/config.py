"""Typed, frozen configuration of a Llama-family decoder."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from specjax.errors import ConfigError  # noqa: F401  (re-exported)


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Rotary-embedding frequency scaling.

    kind: "linear" (positions divided by ``factor``), "llama3" (the piecewise wavelength
    rule of Llama 3.1) or "factors" (each rotary frequency divided by its own entry of
    ``freq_factors``, ``head_dim / 2`` of them: how llama.cpp's GGUF files store Llama 3.x
    scaling, as a ``rope_freqs.weight`` tensor). ``None`` on :class:`ModelConfig` means no
    scaling.
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    freq_factors: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.kind not in ("linear", "llama3", "factors"):
            raise ConfigError(
                f"unsupported rope scaling type {self.kind!r}; supported: 'linear', 'llama3', "
                "'factors'"
            )
        if not self.factor > 0:
            raise ConfigError(f"rope scaling factor must be > 0, got {self.factor}")
        if (self.kind == "factors") != (self.freq_factors is not None):
            raise ConfigError("rope scaling 'factors' needs freq_factors (and only it does)")
        if self.freq_factors is not None and (
                not self.freq_factors or not all(f > 0 for f in self.freq_factors)):
            raise ConfigError("rope freq_factors must be a non-empty list of positive numbers")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a Llama-family decoder (Llama, Mistral, Qwen2, SmolLM)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 8192
    architecture: str = "llama"

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
        ):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name} must be a positive integer, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ConfigError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if not (self.rms_norm_eps > 0 and math.isfinite(self.rms_norm_eps)):
            raise ConfigError(f"rms_norm_eps must be a positive number, got {self.rms_norm_eps}")
        if not self.rope_theta > 0:
            raise ConfigError(f"rope_theta must be > 0, got {self.rope_theta}")
        rs = self.rope_scaling
        if rs is not None and rs.freq_factors is not None and \
                len(rs.freq_factors) != self.head_dim // 2:
            raise ConfigError(f"rope freq_factors has {len(rs.freq_factors)} entries; head_dim "
                              f"{self.head_dim} needs {self.head_dim // 2}")

    @property
    def num_params(self) -> int:
        d, f, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d
        if self.attention_bias:
            per_layer += q + 2 * kv
        n = v * d + self.num_layers * per_layer + d
        if not self.tie_embeddings:
            n += v * d
        return n

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def tiny_config(**overrides) -> ModelConfig:
    """A small config for tests and examples (random weights)."""
    base = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_embeddings=False,
        max_position_embeddings=1024,
    )
    base.update(overrides)
    return ModelConfig(**base)
