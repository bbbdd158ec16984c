"""Experiment configs: Python files in ``configs/`` that return a frozen dataclass.

A config file defines ``get_config()`` returning a :class:`BenchConfig` (defined in
:mod:`specjax.bench.config`, importable from here); ``specjax bench --config configs/NAME.py``
runs it, and the other flags on the command line override its fields (``--method-arg`` adds
to them). The file is plain Python, so a config can derive one
experiment from another (``dataclasses.replace``) instead of copying it::

    from specjax.experiment import BenchConfig

    def get_config() -> BenchConfig:
        return BenchConfig(methods=("ar", "prompt_lookup"), prompts="builtin",
                           method_args={"prompt_lookup": {"k": 8}}, repeats=3)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specjax.bench.config import BenchConfig  # noqa: F401  (re-exported: configs import it here)
from specjax.config import ConfigError


def load_config(path: str | Path):
    """Runs a config file and returns what its ``get_config()`` returns (a BenchConfig).

    Raises:
      ConfigError: naming the file, when it is missing, fails to run, has no
        ``get_config`` or returns something that is not a config dataclass.
    """
    return run_config_file(path, BenchConfig)


def run_config_file(path: str | Path, expected: type):
    """Runs a Python config file and returns its ``get_config()``, which must be an
    ``expected`` instance (a :class:`BenchConfig`, a ``specjax.train.TrainConfig``, ...).

    Raises:
      ConfigError: naming the file, when it is missing, not a ``.py`` file, fails to run, has
        no ``get_config`` or returns something else.
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
    if not isinstance(cfg, expected):
        raise ConfigError(f"{path}: get_config() must return a {expected.__name__}, got "
                          f"{type(cfg).__name__}")
    return cfg
