"""Graph capture on the emulator, with CuPy's stream-capture semantics.

On a GPU, work launched while a stream is capturing is recorded into a CUDA graph instead of running;
``graph.launch()`` then runs all of it with one call. The emulator does the same with a list: while
capturing, kernel launches and device-side fills (``DeviceArray.fill``, ``zeros``) are recorded, not
run, and :meth:`Graph.launch` runs them in order. Allocations happen at once (as ``cudaMalloc`` does
in relaxed capture mode), so the recorded launches keep pointing at the same buffers on every replay.
Host-to-device and device-to-host copies cannot be captured (as on a GPU, where they synchronise).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .errors import LaunchError

_state = threading.local()


def _recording() -> list[Callable[[], None]] | None:
    return getattr(_state, "ops", None)


def is_capturing() -> bool:
    """Whether work is being recorded instead of run (``cudaStreamIsCapturing``)."""
    return _recording() is not None


def record(op: Callable[[], None]) -> bool:
    """Record ``op`` if capturing (returns True: the caller must not run it now), else return False."""
    ops = _recording()
    if ops is None:
        return False
    ops.append(op)
    return True


def refuse_during_capture(what: str) -> None:
    """Raise as CUDA does for an operation that cannot be captured (a synchronising copy)."""
    if is_capturing():
        raise LaunchError(f"cudaErrorStreamCaptureUnsupported: {what} is not permitted while a graph is being "
                          "captured (it would wait for the device); copy into a tensor made before the capture",
                          "cudaErrorStreamCaptureUnsupported")


class Graph:
    """Recorded device work; :meth:`launch` runs it again, in the order it was recorded."""

    def __init__(self, ops: list[Callable[[], None]]) -> None:
        self._ops = ops

    def __len__(self) -> int:
        return len(self._ops)

    def launch(self, stream: Any = None) -> None:
        for op in self._ops:
            op()


def begin_capture() -> None:
    if is_capturing():
        raise LaunchError("cudaErrorIllegalState: a capture is already in progress", "cudaErrorIllegalState")
    _state.ops = []


def end_capture() -> Graph:
    ops = _recording()
    if ops is None:
        raise LaunchError("cudaErrorIllegalState: end_capture() without begin_capture()", "cudaErrorIllegalState")
    _state.ops = None
    return Graph(ops)
