"""Emulator tests state facts about its default settings (normal mode, forward schedule, strict
arguments, one worker): a caller's or CI's MINITORCH_EMU_* variable must not change them."""

from __future__ import annotations

import pytest

EMU_SETTINGS = ("MINITORCH_EMU_SCHEDULE", "MINITORCH_EMU_SEED", "MINITORCH_EMU_WORKERS", "MINITORCH_EMU_CHECK",
                "MINITORCH_EMU_ARGS", "MINITORCH_EMU_TIMEOUT", "MINITORCH_EMU_FIBERS", "MINITORCH_EMU_CANONICAL_NAN",
                "MINITORCH_EMU_SPLIT")


@pytest.fixture(autouse=True)
def _generic_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """No specialised code unless a test asks for it (tests/emu/test_emu_specialize.py)."""
    monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "0")


@pytest.fixture(autouse=True)
def _emulator_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in EMU_SETTINGS:
        monkeypatch.delenv(var, raising=False)
