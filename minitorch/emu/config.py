"""Emulator settings: environment variables, overridable in code (see the package docstring)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

SCHEDULES = ("forward", "reverse", "random")
ARG_MODES = ("strict", "cupy")

_over = threading.local()


def _get(name: str) -> Any:
    return getattr(_over, name, None)


def arg_mode() -> str:
    m = _get("arg_mode") or _global.get("arg_mode") or os.environ.get("MINITORCH_EMU_ARGS", "strict")
    m = m.strip().lower()
    if m not in ARG_MODES:
        raise ValueError(f"MINITORCH_EMU_ARGS must be one of {ARG_MODES}, not {m!r}")
    return m


def check_enabled() -> bool:
    v = _get("check")
    if v is not None:
        return bool(v)
    return os.environ.get("MINITORCH_EMU_CHECK", "").strip().lower() not in ("", "0", "false", "no", "off")


def schedule() -> tuple[str, int]:
    s = _get("schedule")
    if s is not None:
        return s
    name = os.environ.get("MINITORCH_EMU_SCHEDULE", "forward").strip().lower() or "forward"
    if name not in SCHEDULES:
        raise ValueError(f"MINITORCH_EMU_SCHEDULE must be one of {SCHEDULES}, not {name!r}")
    return name, int(os.environ.get("MINITORCH_EMU_SEED", "0") or 0)


def workers() -> int:
    w = _get("workers")
    if w is not None:
        return int(w)
    return max(1, int(os.environ.get("MINITORCH_EMU_WORKERS", "1") or 1))


def timeout_s() -> float:
    """MINITORCH_EMU_TIMEOUT: seconds a launch may run before it is stopped (0: no limit)."""
    v = _get("timeout")
    if v is not None:
        return float(v)
    return max(0.0, float(os.environ.get("MINITORCH_EMU_TIMEOUT", "0") or 0))


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Stop launches inside the block that run longer than ``seconds`` (a KernelFault)."""
    with _override("timeout", float(seconds)):
        yield


def stack_kb() -> int:
    return max(8, int(os.environ.get("MINITORCH_EMU_STACK_KB", "32") or 32))


_global: dict[str, Any] = {}


def set_arg_mode(mode: str) -> None:
    """'strict' (the course default) or 'cupy' (CuPy's packing, with a warning)."""
    mode = mode.strip().lower()
    if mode not in ARG_MODES:
        raise ValueError(f"argument mode must be one of {ARG_MODES}, not {mode!r}")
    _global["arg_mode"] = mode


@contextlib.contextmanager
def _override(name: str, value: Any) -> Iterator[None]:
    old = getattr(_over, name, None)
    setattr(_over, name, value)
    try:
        yield
    finally:
        setattr(_over, name, old)


@contextlib.contextmanager
def check_mode(enabled: bool = True) -> Iterator[None]:
    """Run the launches inside the block in check mode (races, uninitialised shared reads,
    exact out-of-bounds)."""
    with _override("check", enabled):
        yield


@contextlib.contextmanager
def schedule_order(name: str, seed: int = 0) -> Iterator[None]:
    """Run the launches inside the block with threads and blocks in 'forward', 'reverse' or
    'random' order."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, not {name!r}")
    with _override("schedule", (name, int(seed))):
        yield


@contextlib.contextmanager
def worker_count(n: int) -> Iterator[None]:
    with _override("workers", max(1, int(n))):
        yield
