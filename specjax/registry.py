"""Registries of drafters, policies and verifiers, with typed, frozen option dataclasses.

Every registered component has a config: a frozen dataclass whose ``init`` fields are its
options, with types and defaults. Options given as strings (``--method-arg key=value``) are
converted through the field types; unknown keys and values of the wrong type are errors that
name the component, the key and what is allowed. ``specjax methods`` prints every registry
from :meth:`Registry.describe`.

A component is registered either as a class that is its own config (policies, verifiers:
``@POLICIES.register("fixed")`` on a frozen dataclass) or as a build function with a
separate config (drafters, which need the target model to build:
``@DRAFTERS.register("prompt_lookup", config=PromptLookupConfig)`` on
``build(config, target_lm)``).

Field metadata understood here: ``option=False`` hides a field that the caller fills in (a
policy's ``max_k`` comes from the drafter); ``parse=fn(value, args)`` converts a string with
the help of the other raw arguments (a tree option reads ``k``); ``help`` documents it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Literal


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    config: type
    build: Callable | None  # None: the config instance is the component
    doc: str


def _options(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls)
            if f.init and f.metadata.get("option", True)]


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        return f"tuple[{_type_name(args[0])}, ...]" if args else "tuple"
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def field_default(f: dataclasses.Field):
    """A dataclass field's default (its factory's value), or ``dataclasses.MISSING``."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def _coerce(value, tp, what: str, error):
    """``value`` (a string from the command line, or a Python value) as type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and
                                                     value.strip().lower() in ("", "none"))):
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, what, error)
            except error as e:
                errors.append(str(e))
        raise error(errors[0] if len(errors) == 1 else
                    f"{what} must be {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed:
            return value
        raise error(f"{what} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    if origin is tuple:
        (item, *_rest) = typing.get_args(tp) or (str,)
        if isinstance(value, str):
            parts = [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            parts = [value]
        return tuple(_coerce(p, item, what, error) for p in parts)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise error(f"{what} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise error(f"{what} must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise error(f"{what} must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise error(f"{what} must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise error(f"{what} must be a string, got {value!r}")
    if tp is Any or tp is object:
        return value
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise error(f"{what} must be {_type_name(tp)}, got {value!r}")


class Registry:
    """Named components of one kind (``"drafter"``, ``"policy"``, ``"verifier"``)."""

    def __init__(self, kind: str, error: type[Exception]):
        self.kind = kind
        self.error = error
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, config: type | None = None, doc: str = ""):
        """Decorator: a config class that is its own component, or a build function with
        ``config=``."""
        def deco(obj):
            if config is None:
                if not dataclasses.is_dataclass(obj):
                    raise TypeError(f"{self.kind} {name!r}: register a frozen dataclass, or a "
                                    "build function with config=")
                entry = Entry(name, obj, None, doc or (obj.__doc__ or "").strip())
            else:
                entry = Entry(name, config, obj, doc or (obj.__doc__ or "").strip())
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            return obj

        return deco

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise self.error(f"unknown {self.kind} {name!r}; available: "
                             f"{', '.join(self.names())}")
        return self._entries[name]

    def option_names(self, name: str) -> list[str]:
        return [f.name for f in _options(self.entry(name).config)]

    def make_config(self, name: str, args: dict[str, Any] | None = None, **fixed):
        """The config of ``name`` from ``args`` (strings are converted through the field
        types) plus ``fixed`` values the caller supplies (not user options)."""
        entry = self.entry(name)
        cls = entry.config
        args = dict(args or {})
        opts = {f.name: f for f in _options(cls)}
        unknown = sorted(set(args) - set(opts))
        if unknown:
            raise self.error(f"{self.kind} {name!r} has no option {unknown[0]!r}"
                             + (f" (nor {unknown[1:]})" if len(unknown) > 1 else "")
                             + f"; its options: {', '.join(opts) or 'none'}")
        hints = typing.get_type_hints(cls)
        kwargs = dict(fixed)
        for key, value in args.items():
            f = opts[key]
            what = f"{self.kind} {name!r}: {key}"
            parse = f.metadata.get("parse")
            if parse is not None and isinstance(value, str):
                value = parse(value, args)
            kwargs[key] = _coerce(value, hints[key], what, self.error)
        try:
            return cls(**kwargs)
        except self.error as e:
            msg = str(e)
            raise self.error(msg if msg.startswith(f"{self.kind} {name!r}") else
                             f"{self.kind} {name!r}: {msg}") from None

    def build(self, name: str, args: dict[str, Any] | None = None, *context, **fixed):
        """Builds component ``name``: its config from ``args`` (see :meth:`make_config`),
        then ``build(config, *context)`` for build-function entries."""
        entry = self.entry(name)
        cfg = self.make_config(name, args, **fixed)
        return cfg if entry.build is None else entry.build(cfg, *context)

    def describe(self) -> list[dict]:
        """One dict per component: name, doc and options (name, type, default, help)."""
        out = []
        for name in self.names():
            e = self._entries[name]
            hints = typing.get_type_hints(e.config)
            opts = []
            for f in _options(e.config):
                d = field_default(f)
                opts.append({"name": f.name, "type": _type_name(hints[f.name]),
                             "default": None if d is dataclasses.MISSING else d,
                             "required": d is dataclasses.MISSING,
                             "help": f.metadata.get("help", "")})
            out.append({"name": name, "doc": e.doc.split("\n\n")[0].replace("\n", " "),
                        "options": opts})
        return out
