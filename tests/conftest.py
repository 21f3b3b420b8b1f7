"""Shared fixtures: an isolated learner workspace per test, and device helpers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The suite runs the emulator's generic code: specialising a module's repeated launches compiles it again in
# the background (seconds of CPU each), which short tests never repay. tests/emu/test_emu_specialize.py turns
# it on; a caller's MINITORCH_EMU_SPECIALIZE is kept.
os.environ.setdefault("MINITORCH_EMU_SPECIALIZE", "0")


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A fresh MINITORCH_WORKSPACE, so tests never touch the learner's minitorch/csrc/."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    monkeypatch.setenv("MINITORCH_WORKSPACE", str(ws))
    return ws


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run make test-gpu there)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device_name():
    """The device the suite runs on: MINITORCH_DEVICE, else emu (CI has no GPU)."""
    return os.environ.get("MINITORCH_DEVICE", "emu")
