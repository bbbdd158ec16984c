"""What a measurement is valid for: the host and device it ran on, and the model's shapes,
dtype and quantization. Used to key cached cost curves, profiled batch tables and the exact
numerics' probe answers (no other specjax import: policies and models may use it)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path


CACHE_ENV = "SPECJAX_CACHE_DIR"


def cache_root() -> Path:
    """specjax's per-machine cache: ``$SPECJAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/specjax``,
    else ``~/.cache/specjax``."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "specjax")
    return Path(root)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description() -> str:
    """The host CPU (name, cores) and the JAX device the forward runs on."""
    import jax

    d = jax.devices()[0]
    return f"{cpu_name()}, {os.cpu_count()} cores; {d.platform}:{d.device_kind}"


def model_fingerprint(model) -> dict:
    """What of the model a cost depends on: its config (shapes), dtype and quantization (the
    mode ``specjax.models.quant.quantize`` recorded on the model; read here without importing
    model code, which imports this module), and exact numerics' product kernels when they are
    not the default."""
    m = getattr(model, "model", model)
    cfg = json.dumps(m.cfg.to_dict(), sort_keys=True, default=str)
    out = {"config_sha256": hashlib.sha256(cfg.encode()).hexdigest()[:16],
           "dtype": str(getattr(m, "dtype", "float32")),
           "quantization": getattr(m, "quantization", None) or "none"}
    products = exact_products_of(m)
    if products is not None:
        # other kernels, other step costs (the Pallas kernels interpreted on a CPU are 3-17x
        # slower); absent for the default, so the keys of costs measured before stay valid
        out["exact_products"] = products
    return out


def exact_products_of(model) -> str | None:
    """The product kernels an exact-numerics model runs when they are not the default
    (``"pallas"``; ``"pallas:mosaic_gpu"`` when ``$SPECJAX_INVARIANT_KERNELS`` asks for other
    kernels than the backend's), else None: what results, bench rows, journal headers and cost
    keys record. It names the mode asked for: calls whose shapes or dtype that mode's kernels
    do not take run the backend's (float32 under ``mosaic_gpu`` runs Triton)."""
    m = getattr(model, "model", model)
    products = getattr(m, "exact_products", "xla")
    if getattr(m, "numerics", "fast") != "exact" or products == "xla":
        return None
    if products == "pallas":  # the products' kernel when not the backend's default
        from specjax.pallas_kernels.invariant_matmul import default_mode, kernel_mode

        if kernel_mode() != default_mode():
            return f"pallas:{kernel_mode()}"
    return products
