"""Decoding methods by name: a drafter plus a policy, with sensible defaults.

``build("prompt_lookup", lm, {"k": "8"})`` -> ``(drafter, policy)``; ``"ar"`` -> ``(None, None)``.
Values given as strings (from ``--method-arg key=value``) are converted by the target
parameter's type. Keys ``policy`` (``fixed`` | ``adaptive``), ``decay`` and ``cost`` configure
the policy (``cost`` is comma-separated relative costs, or a ``specjax bench --verify-curve``
JSON file, ``curve.json`` or ``curve.json#B`` for batch size B); every other key goes to the
drafter.
"""

from __future__ import annotations

import inspect
from typing import Any

from specjax import drafters, policies
from specjax.drafters.base import DrafterError
from specjax.policies.adaptive import default_cost, load_cost_curve

METHODS = ("ar", "draft_model", "early_exit", "layer_skip", "prompt_lookup")

# per-method defaults (chosen from the measurements in docs/benchmarks.md)
DEFAULTS: dict[str, dict[str, Any]] = {
    "prompt_lookup": {"k": 16, "min_ngram": 2, "max_ngram": 3, "policy": "adaptive",
                      "decay": 0.97},
    "early_exit": {"k": 3, "policy": "fixed"},
    "layer_skip": {"k": 3, "policy": "fixed"},
    "draft_model": {"k": 3, "policy": "fixed"},
}
POLICY_KEYS = ("policy", "decay", "cost")


def parse_method_args(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise DrafterError(f"--method-arg must look like key=value, got {it!r}")
        k, v = it.split("=", 1)
        k = k.strip()
        if not k:
            raise DrafterError(f"--method-arg has an empty key: {it!r}")
        out[k] = v.strip()
    return out


def _convert(value, default, key):
    if not isinstance(value, str):
        return value
    if isinstance(default, bool):
        if value.lower() in ("1", "true", "yes"):
            return True
        if value.lower() in ("0", "false", "no"):
            return False
        raise DrafterError(f"{key} must be true or false, got {value!r}")
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise DrafterError(f"{key} must be an integer, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise DrafterError(f"{key} must be a number, got {value!r}") from None
    if isinstance(default, tuple):
        try:
            return tuple(float(x) for x in value.split(","))
        except ValueError:
            raise DrafterError(f"{key} must be comma-separated numbers, got {value!r}") from None
    # no typed default: guess int, then float, else keep the string
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def base_method(name: str) -> str:
    """``"early_exit@tree"`` -> ``"early_exit"``: a label after ``@`` names a variant of a
    method (so one benchmark can compare, e.g., chain and tree drafting of one drafter)."""
    return name.split("@", 1)[0]


def build(name: str, lm, args: dict[str, Any] | None = None):
    """Returns ``(drafter, policy)`` for method ``name`` (``(None, None)`` for ``"ar"``).

    ``name`` may carry a variant label (``early_exit@topk``): the label is ignored here."""
    args = dict(args or {})
    name = base_method(name)
    if name not in METHODS:
        raise DrafterError(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    if name == "ar":
        if args:
            raise DrafterError(f"method 'ar' (plain decoding) takes no arguments, got {args}")
        return None, None
    merged = {**DEFAULTS.get(name, {}), **args}
    factory = drafters.base._REGISTRY[name]
    sig = inspect.signature(factory)
    d_params = {p: v.default for p, v in list(sig.parameters.items())[1:]}
    pol_cls = {"fixed": policies.FixedPolicy, "adaptive": policies.AdaptivePolicy}
    pol_name = merged.pop("policy", "fixed")
    if pol_name not in pol_cls:
        raise DrafterError(f"unknown policy {pol_name!r}; available: fixed, adaptive")
    pol_fields = {"decay": 0.9, "cost": (1.0,)} if pol_name == "adaptive" else {}
    d_kwargs, p_kwargs = {}, {}
    for key, val in merged.items():
        if key in d_params:
            d_kwargs[key] = _convert(val, d_params[key], key)
        elif key == "cost" and pol_name == "adaptive" and isinstance(val, str) and \
                val.split("#")[0].endswith(".json"):
            path, _, b = val.rpartition("#") if "#" in val else (val, "", "")
            if b and not b.isdigit():
                raise DrafterError(f"cost=FILE.json#B takes a batch size B, got {val!r}")
            p_kwargs[key] = load_cost_curve(path, int(b) if b else None)
        elif key in pol_fields:
            p_kwargs[key] = _convert(val, pol_fields[key], key)
        elif key in POLICY_KEYS:
            if key in args:
                raise DrafterError(f"{key}= only applies to policy=adaptive")
        else:
            accepted = sorted(set(d_params) | {"policy"} | set(pol_fields))
            raise DrafterError(
                f"method {name!r} does not take {key!r}; it accepts: {', '.join(accepted)}"
            )
    drafter = factory(lm, **d_kwargs)
    if pol_name == "adaptive" and "cost" not in p_kwargs:  # the curve that fits the target
        p_kwargs["cost"] = default_cost(lm)
    policy = pol_cls[pol_name](drafter.max_k, **p_kwargs)
    return drafter, policy


def describe(drafter, policy) -> dict:
    if drafter is None:
        return {"method": "ar"}
    out = {"method": drafter.name, "k": drafter.max_k, "policy": policy.name}
    for f in ("exit_layer", "skip_attn", "skip_mlp", "min_ngram", "max_ngram", "description"):
        if hasattr(drafter, f):
            out[f] = getattr(drafter, f)
    if getattr(drafter, "tree", None) is not None:
        out["tree"] = drafter.tree.describe()
    return out
