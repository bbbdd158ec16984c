"""Models and checkpoint loaders."""

from specjax.models.llama import ForwardOutput, Llama
from specjax.models.loaders import (
    PRESETS,
    LoadedModel,
    load,
    load_gguf,
    load_hf_dir,
    random_model,
    resolve_preset,
)
from specjax.models.weights import CheckpointError, model_from_tensors, model_to_tensors

__all__ = [
    "PRESETS", "CheckpointError", "ForwardOutput", "Llama", "LoadedModel", "load", "load_gguf",
    "load_hf_dir", "model_from_tensors", "model_to_tensors", "random_model", "resolve_preset",
]
