"""What a result records about where and when it ran: CPU, core count, platform, device,
jax version, UTC time and the command line."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
