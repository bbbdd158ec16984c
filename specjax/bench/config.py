"""The benchmark's experiment config: :class:`BenchConfig`, a frozen dataclass.

``specjax bench`` turns its flags into one (:meth:`BenchConfig.from_args`) and runs it with
:func:`specjax.bench.main.run`; a config file (``configs/*.py``, read by
:func:`specjax.experiment.load_config`) returns one, which :meth:`BenchConfig.to_argv` expands
into the flags the rest of the command line can override.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from specjax.errors import ConfigError


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
    ``early_exit@tree``) to its arguments: ``{"early_exit@tree": {"tree": "dynamic"}}``.

    With ``verify_curve`` the run times the verify-cost curve instead (``curve_ks`` tokens per
    row, increasing from 1, at each of ``curve_batches``, over a ``curve_prefix``-token cache;
    ``in_loop``: whole steps of the speculative loop), and the method, prompt and batch
    fields are not used.
    """

    methods: tuple[str, ...] = ("ar", "prompt_lookup")
    method_args: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    model: str = "smollm2-135m"
    dtype: str = "float32"
    quantize: str = "none"
    attention_impl: str = "dense"
    numerics: str = "exact"
    exact_products: str | None = None
    prompts: str = "builtin"
    categories: tuple[str, ...] | None = None
    limit: int | None = None
    max_new_tokens: int = 128
    batch_size: int = 1
    batch_sizes: tuple[int, ...] | None = None
    sweep_only: bool = False
    samples: int = 1
    temperature: float = 0.0
    repeats: int = 3
    peer: str | None = None
    output: str | None = None
    plot: str | None = None
    journal: str | None = None
    time_limit: float | None = None  # minutes
    verify_curve: bool = False
    curve_ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    curve_batches: tuple[int, ...] = (1, 4, 16)
    curve_prefix: int = 256
    in_loop: bool = False
    batch_table: str | None = None
    policies: tuple[str, ...] | None = None
    mesh: str | None = None
    cache_len: int | None = None

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
        for name in ("max_new_tokens", "batch_size", "repeats", "samples"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"limit must be an integer >= 1 or None, got {self.limit!r}")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0, got {self.temperature!r}")
        from specjax.models.quant import QUANT_MODES

        if self.numerics not in ("exact", "fast"):
            raise ConfigError(f"numerics must be 'exact' or 'fast', got {self.numerics!r}")
        if self.exact_products not in (None, "xla", "pallas"):
            raise ConfigError(f"exact_products must be None, 'xla' or 'pallas', got "
                              f"{self.exact_products!r}")
        if self.exact_products is not None and self.numerics != "exact":
            raise ConfigError(f"exact_products {self.exact_products!r} (--exact-products) "
                              "needs --numerics exact (fast numerics run the platform's own "
                              "products)")
        if self.quantize not in QUANT_MODES:
            raise ConfigError(f"quantize must be {' or '.join(map(repr, QUANT_MODES))}, got "
                              f"{self.quantize!r}")
        if self.peer not in (None, "hf"):
            raise ConfigError(f"peer must be None or 'hf', got {self.peer!r}")
        for name in ("categories", "batch_sizes", "curve_ks", "curve_batches"):
            v = getattr(self, name)
            if isinstance(v, str):
                raise ConfigError(f"{name} must be a tuple, not the string {v!r}")
        for name in ("verify_curve", "in_loop", "sweep_only"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.sweep_only and not self.batch_sizes:
            raise ConfigError("sweep_only runs only the batch-size sweep: give batch_sizes "
                              "(--batch-sizes B1,B2,...) too")
        if self.cache_len is not None and (not isinstance(self.cache_len, int) or isinstance(
                self.cache_len, bool) or self.cache_len < 1):
            raise ConfigError(f"cache_len must be an integer >= 1 or None, got "
                              f"{self.cache_len!r}")
        if not isinstance(self.curve_prefix, int) or isinstance(self.curve_prefix, bool):
            raise ConfigError(f"curve_prefix must be an integer, got {self.curve_prefix!r}")

    def to_argv(self) -> list[str]:
        """The ``specjax bench`` flags that run this config."""
        out = ["--model", self.model, "--dtype", self.dtype, "--methods",
               ",".join(self.methods), "--prompts", self.prompts,
               "--max-new-tokens", str(self.max_new_tokens), "--batch-size",
               str(self.batch_size), "--temperature", _fmt(self.temperature),
               "--repeats", str(self.repeats)]
        # the flags added later only when set, so recorded runs expand as before
        if self.quantize != "none":
            out += ["--quantize", self.quantize]
        if self.attention_impl != "dense":
            out += ["--attention-impl", self.attention_impl]
        if self.numerics != "exact":
            out += ["--numerics", self.numerics]
        if self.exact_products is not None:
            out += ["--exact-products", self.exact_products]
        for method, kv in self.method_args.items():
            for key, val in kv.items():
                out += ["--method-arg", f"{method}.{key}={_fmt(val)}"]
        for flag, val in (("--categories", self.categories), ("--limit", self.limit),
                          ("--batch-sizes", self.batch_sizes), ("--peer", self.peer),
                          ("--output", self.output), ("--plot", self.plot),
                          ("--journal", self.journal), ("--time-limit", self.time_limit),
                          ("--batch-table", self.batch_table),
                          ("--policies", self.policies), ("--mesh", self.mesh),
                          ("--cache-len", self.cache_len)):
            if val is not None:
                out += [flag, _fmt(val)]
        if self.samples != 1:
            out += ["--samples", str(self.samples)]
        if self.verify_curve:  # every curve setting, whatever the flags' defaults
            out += ["--verify-curve", "--curve-ks", _fmt(self.curve_ks), "--curve-batches",
                    _fmt(self.curve_batches), "--curve-prefix", str(self.curve_prefix)]
        if self.in_loop:
            out += ["--in-loop"]
        if self.sweep_only:
            out += ["--sweep-only"]
        return out

    @classmethod
    def from_args(cls, args) -> BenchConfig:
        """The config that parsed ``specjax bench`` flags describe (the inverse of
        :meth:`to_argv`).

        Raises:
          BenchError: a list-valued flag that does not parse (``--method-arg``,
            ``--batch-sizes``, with ``--verify-curve`` also ``--curve-ks`` and
            ``--curve-batches``), naming the flag.
          ConfigError: a value the config refuses (``--repeats 0``, ...).
        """
        from specjax.bench.prompts import (parse_batch_sizes, parse_bench_method_args,
                                           parse_positive_ints)

        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        curve = {}
        if args.verify_curve:  # the curve flags are read (and checked) with it only
            curve = dict(
                curve_ks=tuple(parse_positive_ints(args.curve_ks, "--curve-ks", strict=True)),
                curve_batches=tuple(parse_positive_ints(args.curve_batches, "--curve-batches",
                                                        strict=True)),
                curve_prefix=args.curve_prefix)
        method_args = parse_bench_method_args(args.method_arg, methods)
        return cls(
            methods=tuple(methods) or ("ar",),  # as before: ar always runs
            method_args={m: kv for m, kv in method_args.items() if kv},
            model=args.model, dtype=args.dtype, quantize=args.quantize,
            attention_impl=args.attention_impl, numerics=args.numerics,
            exact_products=getattr(args, "exact_products", None), prompts=args.prompts,
            categories=tuple(args.categories.split(",")) if args.categories else None,
            limit=args.limit, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
            batch_sizes=tuple(parse_batch_sizes(args.batch_sizes)) or None,
            sweep_only=getattr(args, "sweep_only", False),
            samples=getattr(args, "samples", 1), temperature=args.temperature,
            repeats=args.repeats, peer=args.peer,
            output=args.output, plot=args.plot, journal=args.journal,
            time_limit=args.time_limit, verify_curve=args.verify_curve, in_loop=args.in_loop,
            batch_table=args.batch_table,
            policies=tuple(p.strip() for p in args.policies.split(",") if p.strip())
            if args.policies else None, mesh=args.mesh,
            cache_len=getattr(args, "cache_len", None), **curve)
