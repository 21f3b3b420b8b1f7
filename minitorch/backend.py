"""Devices and backends: one small interface over CuPy, the CUDA C emulator and NumPy.

Three devices, one API:

- ``cuda``: arrays are ``cupy.ndarray``; kernels are compiled by ``cupy.RawModule`` (NVRTC).
- ``emu``:  arrays are guarded host buffers; the *same* CUDA C is compiled for the CPU by
  :mod:`minitorch.emu`. Correctness only: it says nothing about speed.
- ``cpu``:  arrays are NumPy arrays; runs no CUDA C. The float64-capable reference path.

Pick one with :func:`set_device` or the ``MINITORCH_DEVICE`` environment variable. The default is
``cuda`` when CuPy imports and sees a GPU, otherwise ``emu``.

The module-level functions (``RawModule``, ``asarray``, ``asnumpy``, ``empty``, ``zeros``,
``synchronize``) dispatch to the active backend, so lab code written against them runs unchanged
on every device, exactly as it would against CuPy.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEVICES: tuple[str, ...] = ("cuda", "emu", "cpu")

Shape = int | Sequence[int]


class DeviceError(RuntimeError):
    """A device was asked for that does not exist or cannot be used on this machine."""


@functools.cache
def toolkit_include_options() -> tuple[str, ...]:
    """``-I`` for the CUDA toolkit's headers where a pip-installed NVRTC lacks some of them: its ``mma.h``
    (WMMA, Phase 8a) includes ``crt/mma.h``, which only a full toolkit ships. Empty when none is found."""
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "crt" / "mma.h").exists():
            return (f"-I{Path(root) / 'include'}",)
    return ()


class Backend:
    """What every device provides. Subclasses wrap CuPy, the emulator and NumPy."""

    name: str = ""
    runs_kernels: bool = True
    # Whether the backend checks kernel arguments against the compiled parameter types itself (the
    # emulator does, exactly); if not, minitorch.kernels checks them against the parsed signature.
    checks_kernel_args: bool = False

    def RawModule(self, code: str, options: Sequence[str] = (),  # noqa: N802 (CuPy's name)
                  name_expressions: Sequence[str] | None = None, *, filename: str | None = None) -> Any:
        """Compile CUDA C; ``filename`` is the learner's file name, for error messages where supported."""
        raise NotImplementedError

    def asarray(self, host: np.ndarray) -> Any:
        """Copy a host array to the device (host-to-device)."""
        raise NotImplementedError

    def asnumpy(self, array: Any) -> np.ndarray:
        """Copy a device array to a new host array (device-to-host)."""
        raise NotImplementedError

    def empty(self, shape: Shape, dtype: Any = np.float32) -> Any:
        raise NotImplementedError

    def zeros(self, shape: Shape, dtype: Any = np.float32) -> Any:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait until all work launched on the device has finished."""

    def is_device_array(self, x: Any) -> bool:
        raise NotImplementedError

    # The class of this device's arrays (for quick checks on hot paths; ``is_device_array`` also
    # accepts subclasses).
    array_type: type = object

    def copy_into(self, dst: Any, src: Any) -> None:
        """Copy ``src`` into ``dst`` on the device (same shape and dtype)."""
        raise NotImplementedError

    def describe(self) -> str:
        """A one-line description for progress records and benchmark files."""
        return self.name

    @property
    def capturing(self) -> bool:
        """Whether device work is being recorded into a graph right now (nothing may wait for it)."""
        return False

    def begin_capture(self) -> None:
        """Start recording device work into a graph instead of running it (see minitorch.graph)."""
        raise DeviceError(f"the '{self.name}' device has no graphs: capture on 'cuda' or 'emu'")

    def end_capture(self) -> Any:
        """Stop recording; returns an object whose ``launch()`` runs the recorded work."""
        raise DeviceError(f"the '{self.name}' device has no graphs: capture on 'cuda' or 'emu'")

    # Side branches of a captured graph: only CUDA graphs have them; elsewhere the block runs in order.
    pending_branches: bool = False  # whether a branch's results may still be unread by the main stream
    in_branch: bool = False

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        """Run the block's device work on a side branch of the graph being captured, concurrently with the
        main stream's work that follows, until a launch reads what the block wrote (:meth:`wait_for`) or
        the capture ends. Outside a capture, and on devices without graph branches: in order."""
        yield

    def wait_for(self, args: Sequence[Any]) -> None:
        """Before a launch on the main stream with these arguments: wait for the branches that wrote them."""


def _refresh_allocator(device: str) -> None:
    """From Phase 5 on the learner's caching pool (pool.py) allocates device memory: see
    minitorch.allocator (imported at the first allocation, not at the top: it imports kernels, which
    imports this)."""
    global _allocator
    if _allocator is None:
        from minitorch import allocator

        _allocator = allocator
    _allocator.refresh(device)


_allocator: Any = None


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self) -> None:
        import cupy  # imported lazily: CPU-only machines never need it

        self.cupy = cupy
        self.array_type = cupy.ndarray
        self._capture_stream: Any = None
        # branches (see Backend.branch): one side stream, kept for the process (a captured graph's blocks
        # allocated on it stay that stream's); the branches not yet waited for, each an event recorded at its
        # end and the address ranges allocated in it; the ranges of the branch being recorded
        self._side: Any = None
        self._pending: list[tuple[Any, list[tuple[int, int]]]] = []
        self._branch_ranges: list[tuple[int, int]] | None = None

    def RawModule(self, code: str, options: Sequence[str] = (),  # noqa: N802
                  name_expressions: Sequence[str] | None = None, *, filename: str | None = None) -> Any:
        return self.cupy.RawModule(code=code, options=tuple(options) + toolkit_include_options(),
                                   name_expressions=name_expressions)

    def asarray(self, host: np.ndarray) -> Any:
        _refresh_allocator("cuda")
        return self.cupy.asarray(host)

    def asnumpy(self, array: Any) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def empty(self, shape: Shape, dtype: Any = np.float32) -> Any:
        _refresh_allocator("cuda")
        out = self.array_type(shape, dtype)  # what cupy.empty does, less a Python call
        if self._branch_ranges is not None:
            self._branch_ranges.append((out.data.ptr, out.data.ptr + out.nbytes))
        return out

    def zeros(self, shape: Shape, dtype: Any = np.float32) -> Any:
        _refresh_allocator("cuda")
        out = self.cupy.zeros(shape, dtype=dtype)
        if self._branch_ranges is not None:
            self._branch_ranges.append((out.data.ptr, out.data.ptr + out.nbytes))
        return out

    def synchronize(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()

    def is_device_array(self, x: Any) -> bool:
        return isinstance(x, self.cupy.ndarray)

    def copy_into(self, dst: Any, src: Any) -> None:
        if self._pending:
            self.wait_for((dst, src))
        self.cupy.copyto(dst, src)

    def describe(self) -> str:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        name = props["name"]
        return "cuda: " + (name.decode() if isinstance(name, bytes) else str(name))

    @property
    def capturing(self) -> bool:
        return self._capture_stream is not None

    def begin_capture(self) -> None:
        # Capture needs a stream of its own (never the legacy default stream). Relaxed mode lets the
        # memory pool call cudaMalloc while capturing: allocations then happen at once, outside the graph.
        runtime = self.cupy.cuda.runtime
        self.synchronize()
        stream = self.cupy.cuda.Stream(non_blocking=True)
        stream.__enter__()
        try:
            stream.begin_capture(mode=getattr(runtime, "streamCaptureModeRelaxed", 2))
        except BaseException:
            stream.__exit__(None, None, None)
            raise
        self._capture_stream = stream

    def end_capture(self) -> Any:
        stream = self._capture_stream
        self._capture_stream = None
        try:
            try:
                self._join_branches(stream)  # a capture ends with every branch joined to its stream
            finally:
                self._pending, self._branch_ranges = [], None
                graph = stream.end_capture()  # even when a join failed: the stream must leave capture mode
        finally:
            stream.__exit__(None, None, None)
        return _CapturedGraph(graph, stream)

    # ---- branches (Backend.branch): device work recorded on a side stream, forked from the capturing stream
    # by an event and joined back by another, so the graph runs it concurrently with the main chain

    @property
    def pending_branches(self) -> bool:
        return bool(self._pending)

    @property
    def in_branch(self) -> bool:
        return self._branch_ranges is not None

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        main = self._capture_stream
        if main is None or self._branch_ranges is not None:  # not capturing, or a branch already: in order
            yield
            return
        cuda = self.cupy.cuda
        if self._side is None:
            self._side = cuda.Stream(non_blocking=True)
        fork = cuda.Event(disable_timing=True)
        fork.record(main)
        self._side.wait_event(fork)  # the side stream joins the capture after what main has recorded so far
        ranges = self._branch_ranges = []
        try:
            with self._side:
                yield
        finally:
            self._branch_ranges = None
            done = cuda.Event(disable_timing=True)
            done.record(self._side)
            self._pending.append((done, ranges))

    def wait_for(self, args: Sequence[Any]) -> None:
        if not self._pending:
            return
        stream = self.cupy.cuda.get_current_stream()
        if stream is self._side:  # a later branch: the side stream runs its branches in order
            return
        spans = [(a.data.ptr, a.data.ptr + a.nbytes) for a in args if isinstance(a, self.array_type) and a.nbytes]
        if not spans:
            return
        keep = []
        for event, ranges in self._pending:
            if any(lo < r_hi and r_lo < hi for lo, hi in spans for r_lo, r_hi in ranges):
                stream.wait_event(event)
            else:
                keep.append((event, ranges))
        self._pending = keep

    def _join_branches(self, stream: Any) -> None:
        for event, _ in self._pending:
            stream.wait_event(event)
        self._pending = []


class _CapturedGraph:
    """A CuPy graph and the stream it was captured on: the stream lives as long as the graph, so the
    memory pool never hands a block the graph uses to another stream that reuses its handle."""

    def __init__(self, graph: Any, stream: Any) -> None:
        self.graph, self.stream = graph, stream

    def launch(self) -> None:
        self.graph.launch()  # on the current stream, in order with eager work


class EmuBackend(Backend):
    name = "emu"
    checks_kernel_args = True

    def __init__(self) -> None:
        try:
            from minitorch import emu
        except ImportError as exc:  # a broken install, not a learner error
            raise DeviceError(f"the 'emu' device could not be loaded: {exc}") from exc
        self.emu = emu
        self.array_type = emu.DeviceArray

    def RawModule(self, code: str, options: Sequence[str] = (),  # noqa: N802
                  name_expressions: Sequence[str] | None = None, *, filename: str | None = None) -> Any:
        return self.emu.RawModule(code=code, options=tuple(options),
                                  name_expressions=name_expressions, filename=filename)

    def asarray(self, host: np.ndarray) -> Any:
        _refresh_allocator("emu")
        return self.emu.asarray(host)

    def asnumpy(self, array: Any) -> np.ndarray:
        return self.emu.asnumpy(array)

    def empty(self, shape: Shape, dtype: Any = np.float32) -> Any:
        _refresh_allocator("emu")
        return self.emu.empty(shape, dtype=dtype)

    def zeros(self, shape: Shape, dtype: Any = np.float32) -> Any:
        _refresh_allocator("emu")
        return self.emu.zeros(shape, dtype=dtype)

    def synchronize(self) -> None:
        self.emu.synchronize()

    def is_device_array(self, x: Any) -> bool:
        return isinstance(x, self.emu.DeviceArray)

    def copy_into(self, dst: Any, src: Any) -> None:
        dst.set(src.get())

    def describe(self) -> str:
        return "emu: CUDA C emulator on the CPU"

    @property
    def capturing(self) -> bool:
        return self.emu.is_capturing()

    def begin_capture(self) -> None:
        self.emu.begin_capture()

    def end_capture(self) -> Any:
        return self.emu.end_capture()


class CpuBackend(Backend):
    name = "cpu"
    runs_kernels = False

    def RawModule(self, code: str, options: Sequence[str] = (),  # noqa: N802
                  name_expressions: Sequence[str] | None = None, *, filename: str | None = None) -> Any:
        raise DeviceError("the 'cpu' device runs no CUDA C: use 'cuda' on an NVIDIA GPU, or 'emu' "
                          "(the CUDA C emulator) anywhere else: minitorch.set_device('emu')")

    def asarray(self, host: np.ndarray) -> np.ndarray:
        return np.array(host, copy=True)  # a copy, as a real host-to-device transfer would be

    def asnumpy(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True)

    def empty(self, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    array_type = np.ndarray

    def is_device_array(self, x: Any) -> bool:
        return isinstance(x, np.ndarray)

    def copy_into(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str]:
    """Whether CuPy can use a GPU here, and why not if it cannot."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising anything
        return False, f"CuPy is not installed ({exc.__class__.__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy found no usable CUDA driver ({exc})"
    if count < 1:
        return False, "CuPy sees no NVIDIA GPU"
    return True, ""


def cuda_available() -> bool:
    return cuda_status()[0]


def _check_name(name: str) -> str:
    if name not in DEVICES:
        raise ValueError(f"unknown device {name!r}: expected one of {', '.join(map(repr, DEVICES))}")
    return name


def default_device() -> str:
    """``MINITORCH_DEVICE`` if set, else ``cuda`` when a GPU is usable, else ``emu``."""
    env = os.environ.get("MINITORCH_DEVICE", "").strip()
    if env:
        return _check_name(env)
    return "cuda" if cuda_available() else "emu"


_BACKENDS: dict[str, Backend] = {}
_active: str | None = None


def get_backend(name: str | None = None) -> Backend:
    """The backend object for ``name`` (default: the active device), created on first use."""
    name = _check_name(name) if name is not None else get_device()
    if name not in _BACKENDS:
        if name == "cuda":
            ok, why = cuda_status()
            if not ok:
                raise DeviceError(f"the 'cuda' device is not usable here: {why}. Use 'emu' (the CUDA C "
                                  "emulator) instead: minitorch.set_device('emu') or MINITORCH_DEVICE=emu")
            _BACKENDS[name] = CudaBackend()
        elif name == "emu":
            _BACKENDS[name] = EmuBackend()
        else:
            _BACKENDS[name] = CpuBackend()
    return _BACKENDS[name]


def set_device(name: str) -> None:
    """Make ``name`` ('cuda', 'emu' or 'cpu') the active device; fails at once if it is unusable."""
    global _active
    get_backend(_check_name(name))
    _active = name


def get_device() -> str:
    """The active device's name."""
    global _active
    if _active is None:
        _active = default_device()
    return _active


# Module-level functions with CuPy's names, for the active backend -----------------------------

def RawModule(code: str, options: Sequence[str] = (),  # noqa: N802 (CuPy's name)
              name_expressions: Sequence[str] | None = None, *, filename: str | None = None) -> Any:
    return get_backend().RawModule(code, options, name_expressions, filename=filename)


def asarray(host: np.ndarray) -> Any:
    return get_backend().asarray(host)


def asnumpy(array: Any) -> np.ndarray:
    return get_backend().asnumpy(array)


def empty(shape: Shape, dtype: Any = np.float32) -> Any:
    return get_backend().empty(shape, dtype)


def zeros(shape: Shape, dtype: Any = np.float32) -> Any:
    return get_backend().zeros(shape, dtype)


def synchronize() -> None:
    get_backend().synchronize()


def is_device_array(x: Any) -> bool:
    return get_backend().is_device_array(x)
