"""specjax: speculative decoding of language models in JAX."""

from specjax.cache import KVCache
from specjax.config import ConfigError, ModelConfig, RopeScaling, tiny_config
from specjax.models import CheckpointError, Llama, LoadedModel, load, random_model
from specjax.tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = [
    "CheckpointError", "ConfigError", "KVCache", "Llama", "LoadedModel", "ModelConfig",
    "RopeScaling", "Tokenizer", "load", "random_model", "tiny_config", "__version__",
]
