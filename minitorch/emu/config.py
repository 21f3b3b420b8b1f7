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


# Settings are read on every launch (tests change them between launches). On POSIX, os.environ keeps
# its entries in a plain dict of bytes (``_data``): reading it directly skips the key and value
# conversions of ``os.environ.get`` (about a microsecond each, seven times a launch).
_ENV_DATA: dict | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENV_KEYS: dict[str, bytes] = {}


def _env(key: str, default: str) -> str:
    if _ENV_DATA is None:
        return os.environ.get(key, default)
    k = _ENV_KEYS.get(key)
    if k is None:
        k = _ENV_KEYS[key] = key.encode()
    value = _ENV_DATA.get(k)
    return default if value is None else value.decode("utf-8", "surrogateescape")


def arg_mode() -> str:
    m = _get("arg_mode") or _global.get("arg_mode") or _env("MINITORCH_EMU_ARGS", "strict")
    m = m.strip().lower()
    if m not in ARG_MODES:
        raise ValueError(f"MINITORCH_EMU_ARGS must be one of {ARG_MODES}, not {m!r}")
    return m


def check_enabled() -> bool:
    v = _get("check")
    if v is not None:
        return bool(v)
    return _env("MINITORCH_EMU_CHECK", "").strip().lower() not in ("", "0", "false", "no", "off")


def specialize_after_s() -> float | None:
    """Launch seconds a module spends before its repeated launches get kernels compiled for their integer
    arguments (specialize.py); None: never. ``MINITORCH_EMU_SPECIALIZE``: ``0``/``off``, or seconds (default 2)."""
    v = _get("specialize")
    if v is None:
        v = _env("MINITORCH_EMU_SPECIALIZE", "2").strip().lower()
    if v in ("0", "off", "no", "false", ""):
        return None
    try:
        seconds = float(v)
    except ValueError:
        raise ValueError(f"MINITORCH_EMU_SPECIALIZE must be 0 (off) or a number of seconds, not {v!r}") from None
    return seconds if seconds > 0 else None


def schedule() -> tuple[str, int]:
    s = _get("schedule")
    if s is not None:
        return s
    name = _env("MINITORCH_EMU_SCHEDULE", "forward").strip().lower() or "forward"
    if name not in SCHEDULES:
        raise ValueError(f"MINITORCH_EMU_SCHEDULE must be one of {SCHEDULES}, not {name!r}")
    return name, int(_env("MINITORCH_EMU_SEED", "0") or 0)


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def workers() -> int:
    """MINITORCH_EMU_WORKERS: threads that run blocks (default 1: results identical run to run; ``auto``
    or 0: one per core, faster, but float atomicAdd from different blocks may then add in another
    order, so sums can differ in their last bits from run to run, as on a GPU)."""
    w = _get("workers")
    if w is not None:
        return int(w)
    v = _env("MINITORCH_EMU_WORKERS", "1").strip().lower() or "1"
    if v in ("auto", "0"):
        return cores()
    try:
        return max(1, int(v))
    except ValueError:
        raise ValueError(f"MINITORCH_EMU_WORKERS must be a number of threads or 'auto', not {v!r}") from None


def timeout_s() -> float:
    """MINITORCH_EMU_TIMEOUT: seconds a launch may run before it is stopped (0: no limit)."""
    v = _get("timeout")
    if v is not None:
        return float(v)
    return max(0.0, float(_env("MINITORCH_EMU_TIMEOUT", "0") or 0))


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Stop launches inside the block that run longer than ``seconds`` (a KernelFault)."""
    with _override("timeout", float(seconds)):
        yield


def stack_kb() -> int:
    return max(8, int(_env("MINITORCH_EMU_STACK_KB", "32") or 32))


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
def worker_count(n: int | str) -> Iterator[None]:
    """Run the launches inside the block on ``n`` threads (``"auto"`` or 0: one per core)."""
    count = cores() if n in ("auto", 0) else max(1, int(n))
    with _override("workers", count):
        yield


@contextlib.contextmanager
def specialization(after_s: float | None) -> Iterator[None]:
    """Inside the block, specialise a module's repeated launches once they took ``after_s`` seconds in all
    (None: never); see ``MINITORCH_EMU_SPECIALIZE``."""
    with _override("specialize", "0" if after_s is None else repr(float(after_s))):
        yield
