"""Experiment configs: Python files in ``configs/`` that return a frozen dataclass.

A config file defines ``get_config()`` returning a :class:`BenchConfig`; ``specjax bench
--config configs/NAME.py`` runs it, and the other flags on the command line override its
fields (``--method-arg`` adds to them). The file is plain Python, so a config can derive one
experiment from another (``dataclasses.replace``) instead of copying it::

    from specjax.experiment import BenchConfig

    def get_config() -> BenchConfig:
        return BenchConfig(methods=("ar", "prompt_lookup"), prompts="builtin",
                           method_args={"prompt_lookup": {"k": 8}}, repeats=3)
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any, Mapping

from specjax.config import ConfigError


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v)
    return str(v)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Everything ``specjax bench`` needs; the fields mirror its flags (see ``specjax bench
    --help``). ``method_args`` maps a method (or a labelled variant such as
    ``early_exit@tree``) to its arguments: ``{"early_exit@tree": {"tree": "dynamic"}}``."""

    methods: tuple[str, ...] = ("ar", "prompt_lookup")
    method_args: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    model: str = "smollm2-135m"
    dtype: str = "float32"
    quantize: str = "none"
    prompts: str = "builtin"
    categories: tuple[str, ...] | None = None
    limit: int | None = None
    max_new_tokens: int = 128
    batch_size: int = 1
    batch_sizes: tuple[int, ...] | None = None
    temperature: float = 0.0
    repeats: int = 3
    peer: str | None = None
    output: str | None = None
    plot: str | None = None
    journal: str | None = None
    time_limit: float | None = None  # minutes

    def __post_init__(self):
        if isinstance(self.methods, str) or not self.methods or not all(
                isinstance(m, str) and m for m in self.methods):
            raise ConfigError(f"methods must be a non-empty tuple of method names, got "
                              f"{self.methods!r}")
        if not isinstance(self.method_args, Mapping) or not all(
                isinstance(v, Mapping) for v in self.method_args.values()):
            raise ConfigError("method_args must map a method name to a dict of its arguments, "
                              f"got {self.method_args!r}")
        dotted = [m for m in self.methods if "." in m]
        if dotted:
            raise ConfigError(f"method names and labels may not contain '.': {dotted}")
        stray = sorted(set(self.method_args) - set(self.methods))
        if stray:
            raise ConfigError(f"method_args names methods {stray} that are not in methods "
                              f"{list(self.methods)}")
        for name in ("max_new_tokens", "batch_size", "repeats"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"limit must be an integer >= 1 or None, got {self.limit!r}")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0, got {self.temperature!r}")
        from specjax.models.quant import QUANT_MODES

        if self.quantize not in QUANT_MODES:
            raise ConfigError(f"quantize must be {' or '.join(map(repr, QUANT_MODES))}, got "
                              f"{self.quantize!r}")
        if self.peer not in (None, "hf"):
            raise ConfigError(f"peer must be None or 'hf', got {self.peer!r}")
        for name in ("categories", "batch_sizes"):
            v = getattr(self, name)
            if isinstance(v, str):
                raise ConfigError(f"{name} must be a tuple, not the string {v!r}")

    def to_argv(self) -> list[str]:
        """The ``specjax bench`` flags that run this config."""
        out = ["--model", self.model, "--dtype", self.dtype, "--methods",
               ",".join(self.methods), "--prompts", self.prompts,
               "--max-new-tokens", str(self.max_new_tokens), "--batch-size",
               str(self.batch_size), "--temperature", _fmt(self.temperature),
               "--repeats", str(self.repeats)]
        if self.quantize != "none":
            out += ["--quantize", self.quantize]
        for method, kv in self.method_args.items():
            for key, val in kv.items():
                out += ["--method-arg", f"{method}.{key}={_fmt(val)}"]
        for flag, val in (("--categories", self.categories), ("--limit", self.limit),
                          ("--batch-sizes", self.batch_sizes), ("--peer", self.peer),
                          ("--output", self.output), ("--plot", self.plot),
                          ("--journal", self.journal), ("--time-limit", self.time_limit)):
            if val is not None:
                out += [flag, _fmt(val)]
        return out


def load_config(path: str | Path):
    """Runs a config file and returns what its ``get_config()`` returns.

    Raises:
      ConfigError: naming the file, when it is missing, fails to run, has no
        ``get_config`` or returns something that is not a config dataclass.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: config file not found")
    if p.suffix != ".py":
        raise ConfigError(f"{path}: a config is a Python file (.py) defining get_config()")
    spec = importlib.util.spec_from_file_location(f"specjax_config_{p.stem}", p)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        fn = getattr(module, "get_config", None)
        if fn is None:
            raise ConfigError(f"{path}: defines no get_config()")
        cfg = fn()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if not str(e).startswith(str(path)) else str(e)
                          ) from None
    except Exception as e:  # noqa: BLE001 - a config is user code: report, don't crash
        raise ConfigError(f"{path}: running the config failed: {type(e).__name__}: {e}"
                          ) from e
    if not isinstance(cfg, BenchConfig):
        raise ConfigError(f"{path}: get_config() must return a BenchConfig, got "
                          f"{type(cfg).__name__}")
    return cfg
