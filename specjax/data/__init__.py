"""Prompt and text sources as grain datasets, and TFDS (ArrayRecord) preparation of them.

    from specjax import data
    data.load_prompts("spec_bench:question.jsonl")      # -> [Record(id, prompt, category, ...)]
    data.dataset("sharegpt:sg.json")                    # -> grain.IterDataset (streamed)
    name = data.prepare_tfds("gsm8k:train.jsonl", "tfds_data")   # offline, ArrayRecord files
    data.tfds_dataset(name, "tfds_data", split="train[:90%]")    # -> grain.MapDataset

Spec strings (``SPEC_HELP``): ``builtin``, ``mt_bench``, ``humaneval`` (files of installed PyPI
packages), ``spec_bench:PATH``, ``mt_bench:PATH``, ``humaneval:PATH``, ``gsm8k:PATH``,
``sharegpt:PATH``, ``text:PATH``, ``jsonl:PATH`` or a plain JSONL path.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from specjax.data.builtin import BUILTIN
from specjax.data.records import DataError, Record, TruncatedDataWarning

# The readers import grain (about half a second): loaded on first use, so that importing
# specjax.data (or the built-in prompts) stays cheap for commands that read no data.
_LAZY = {
    "PRESETS": "presets", "preset_path": "presets",
    "ConversationDataset": "readers", "conversation_record": "readers",
    "iter_json_values": "readers", "iter_jsonl": "readers", "read_gsm8k": "readers",
    "read_humaneval": "readers", "read_jsonl_prompts": "readers", "read_mt_bench": "readers",
    "read_sharegpt": "readers", "read_spec_bench": "readers", "read_text": "readers",
    "SOURCES": "sources", "SPEC_HELP": "sources", "builtin": "sources", "dataset": "sources",
    "load_prompts": "sources", "parse_spec": "sources",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'specjax.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"specjax.data.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def _tfds():
    try:
        from specjax.data import tfds_builder
    except ImportError as e:
        raise DataError(f"TFDS datasets need the 'data' extra ({e}): "
                        "pip install 'specjax[data]'") from e
    return tfds_builder


def prepare_tfds(source: str, data_dir: str | Path, name: str | None = None,
                 overwrite: bool = False) -> str:
    """Prepares ``source`` (a spec string) as TFDS ArrayRecord files under ``data_dir``;
    returns the dataset name to give ``tfds_dataset``. See ``specjax.data.tfds_builder``."""
    return _tfds().prepare(source, data_dir, name=name, overwrite=overwrite)


def tfds_dataset(name: str, data_dir: str | Path, split: str = "train"):
    """A prepared dataset read through ``tfds.data_source`` as a grain ``MapDataset`` of
    ``Record``s (ids as strings). ``name``: what ``prepare_tfds`` returned, or its config
    name alone."""
    return _tfds().dataset(name, data_dir, split)


__all__ = [
    "BUILTIN", "PRESETS", "SOURCES", "SPEC_HELP", "ConversationDataset", "DataError", "Record",
    "TruncatedDataWarning", "builtin", "conversation_record", "dataset", "iter_json_values",
    "iter_jsonl", "load_prompts", "parse_spec", "prepare_tfds", "preset_path", "read_gsm8k",
    "read_humaneval", "read_jsonl_prompts", "read_mt_bench", "read_sharegpt", "read_spec_bench",
    "read_text", "tfds_dataset",
]
