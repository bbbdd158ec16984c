"""Any prompt source prepared offline into TFDS ArrayRecord files, read back through
``tfds.data_source`` and grain. No TensorFlow: TFDS writes and reads ArrayRecord without it.

Needs the ``data`` extra (``pip install 'specjax[data]'``: tensorflow-datasets, array-record,
importlib_resources). Layout: ``DATA_DIR/specjax_prompts/NAME/1.0.0/`` holds
``dataset_info.json``, ``features.json`` and ``specjax_prompts-train.array_record-*``.
Everything lands in the split ``train`` (slice it with TFDS split syntax, e.g.
``train[:90%]``), in the source's order (shuffling at preparation is disabled).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import grain
import tensorflow_datasets as tfds

from specjax.data.records import DataError, Record

BUILDER_NAME = "specjax_prompts"


@dataclasses.dataclass
class PromptsConfig(tfds.core.BuilderConfig):
    """One prepared source: ``name`` is the dataset's config name, ``source`` its spec."""

    source: str = ""


class SpecjaxPrompts(tfds.core.GeneratorBasedBuilder):
    """Records of a specjax prompt source (``specjax.data.load_prompts`` spec) as ArrayRecord.

    Features: ``id`` (text; ids come back as strings), ``category`` (text, '' for none),
    ``prompt`` (text), ``reference`` (0 or 1 texts), ``turns`` (all user turns).
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version."}

    def _info(self) -> tfds.core.DatasetInfo:
        text = tfds.features.Text
        return tfds.core.DatasetInfo(
            builder=self,
            description="Prompts or text documents read by specjax.data, one record each.",
            features=tfds.features.FeaturesDict({
                "id": text(), "category": text(), "prompt": text(),
                "reference": tfds.features.Sequence(text()),
                "turns": tfds.features.Sequence(text()),
            }),
            disable_shuffling=True,  # keep the source's order
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # everything is local
        return {"train": self._generate_examples(self.builder_config.source)}

    def _generate_examples(self, source: str):
        from specjax.data.sources import dataset

        for i, rec in enumerate(dataset(source)):
            yield i, to_features(rec)


def to_features(rec: Record) -> dict:
    return {"id": str(rec.id), "category": rec.category or "", "prompt": rec.prompt,
            "reference": [] if rec.reference is None else [rec.reference],
            "turns": list(rec.turns)}


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def from_features(ex: dict) -> Record:
    """A decoded TFDS example (texts as bytes) -> ``Record`` (id as str)."""
    ref = [_text(v) for v in ex["reference"]]
    return Record(id=_text(ex["id"]), prompt=_text(ex["prompt"]),
                  category=_text(ex["category"]) or None, reference=ref[0] if ref else None,
                  turns=tuple(_text(v) for v in ex["turns"]))


def default_name(source: str) -> str:
    """A config name for ``source``: its kind, plus the file's stem for files."""
    from specjax.data.presets import PRESETS
    from specjax.data.sources import SOURCES

    kind, sep, rest = source.partition(":")
    if not sep or kind not in SOURCES:
        kind, rest = ((source, "") if source == "builtin" or source in PRESETS
                      else ("jsonl", source))
    stem = Path(rest).name.split(".")[0] if rest else ""
    return re.sub(r"[^a-z0-9_]+", "_", f"{kind}_{stem}".lower()).strip("_") or "prompts"


def _full_name(name: str) -> str:
    return name if "/" in name else f"{BUILDER_NAME}/{name}"


def prepare(source: str, data_dir: str | Path, name: str | None = None,
            overwrite: bool = False) -> str:
    """Reads ``source`` (a ``load_prompts`` spec) and writes it as a TFDS dataset of
    ArrayRecord files under ``data_dir``. Returns the dataset's name for ``tfds_dataset``
    (``specjax_prompts/NAME``).

    An already prepared ``NAME`` is kept as it is unless ``overwrite``.
    """
    name = name or default_name(source)
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise DataError(f"dataset name {name!r}: use lowercase letters, digits and '_'")
    config = PromptsConfig(name=name, source=source,
                           description=f"specjax prompts from {source!r}")
    builder = SpecjaxPrompts(config=config, data_dir=str(data_dir), file_format="array_record")
    if builder.is_prepared() and overwrite:
        shutil.rmtree(builder.data_dir)
        builder = SpecjaxPrompts(config=config, data_dir=str(data_dir),
                                 file_format="array_record")
    builder.download_and_prepare()
    return f"{BUILDER_NAME}/{name}"


def data_source(name: str, data_dir: str | Path, split: str = "train"):
    """The prepared dataset's random-access source (``tfds.data_source``): decoded dicts."""
    full = _full_name(name)
    hint = "run specjax.data.prepare_tfds(source, data_dir) first"
    if not any(Path(data_dir, full).glob("*/dataset_info.json")):
        raise DataError(f"{full}: not prepared in {data_dir} (no {full}/VERSION/"
                        f"dataset_info.json); {hint}")
    try:
        return tfds.data_source(full, data_dir=str(data_dir), split=split, download=False)
    except (tfds.core.DatasetNotFoundError, FileNotFoundError, ValueError) as e:
        raise DataError(f"{full} in {data_dir}: cannot be read ({e}); {hint}") from None


def dataset(name: str, data_dir: str | Path, split: str = "train") -> grain.MapDataset:
    """A prepared dataset as a grain ``MapDataset`` of ``Record``s (ids as strings)."""
    return grain.MapDataset.source(data_source(name, data_dir, split)).map(from_features)
