"""GPU tests run only where a real NVIDIA GPU and PyTorch exist (the device machine); CI skips them.
The test process itself never touches CUDA: it would hold /dev/nvidia* and be a foreign holder."""

import importlib.util
import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    reason = None
    if not shutil.which("nvidia-smi"):
        reason = "no nvidia-smi: needs a real NVIDIA GPU"
    elif importlib.util.find_spec("torch") is None:
        reason = "PyTorch is not installed (the CUDA holder uses it)"
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
