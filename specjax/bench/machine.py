"""What a result records about where and when it ran: CPU, core count, platform, device,
jax version, UTC time and the command line."""

from __future__ import annotations

import datetime
import os
import platform
import shlex

from specjax.fingerprint import cpu_name  # noqa: F401  (re-exported)


def machine_description() -> str:
    return f"{cpu_name()}, {os.cpu_count()} cores, {platform.platform()}"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def environment(argv: list[str]) -> dict:
    import jax

    return {
        "date": utc_now(),
        "machine": machine_description(),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "command": "specjax " + shlex.join(argv),
    }


def print_and_write_json(obj, out: str | None = None) -> None:
    """Prints ``obj`` as indented JSON and, with ``out``, writes it there too (the tail of
    the measuring scripts in ``scripts/``)."""
    import json

    text = json.dumps(obj, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
