"""specjax: speculative decoding of language models in JAX."""

from specjax.cache import KVCache
from specjax.config import ConfigError, ModelConfig, RopeScaling, tiny_config
from specjax.models import CheckpointError, Llama, LoadedModel, load, random_model
from specjax.sampling import SamplingParams
from specjax.tokenizer import Tokenizer


def generate(model, prompts, **kwargs):
    """Plain or speculative decoding: :func:`specjax.engine.generate`, which documents the
    arguments (imported on first call: the engine imports the drafters, which import this
    package)."""
    from specjax.engine import generate as _generate

    return _generate(model, prompts, **kwargs)


__version__ = "0.1.0"

__all__ = [
    "CheckpointError", "ConfigError", "KVCache", "Llama", "LoadedModel", "ModelConfig",
    "RopeScaling", "SamplingParams", "Tokenizer", "generate", "load", "random_model",
    "tiny_config", "__version__",
]
