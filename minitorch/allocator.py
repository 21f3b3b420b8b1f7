"""Device memory through the learner's caching pool (Phase 5's ``pool.py``).

Every tensor on a GPU is a ``cudaMalloc`` when it is made and a ``cudaFree`` when it dies; both cost
microseconds, and ``cudaFree`` waits for the whole device. A caching pool keeps freed blocks and
hands them out again. From Phase 5 on, once ``pool.py`` is written (and when the phase being graded,
``MINITORCH_PHASE``, is Phase 5 or later, as for ``ops.matmul``), the learner's ``CachingPool``
becomes the allocator of device memory:

- on ``cuda`` through CuPy's allocator hook (``cupy.cuda.set_allocator``), over raw
  ``cudaMalloc``/``cudaFree``: every CuPy array, a tensor's included, gets its memory from the pool;
- on ``emu`` through the emulator's hook of the same name, over ``emu.malloc``/``emu.free``. Each
  array is placed at the end of its block, so the emulator's guard page still catches an overrun,
  and a block handed out while still in use raises ``emu.AllocatorError``.

An array's memory goes back to the pool when the array dies. While a graph is being captured
(:mod:`minitorch.graph`), freed blocks are held until the graph dies instead: a replay may still
write to them. The backends call :func:`refresh` before each allocation (see ``_pool_stamp``), so
writing or deleting ``pool.py`` takes effect at the next tensor.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from minitorch import kernels, watch

__all__ = ["POOL_FILE", "active_pool", "refresh", "release", "stats", "uses_pool"]

POOL_FILE = "pool.py"


def uses_pool() -> bool:
    """Whether the graded phase (``MINITORCH_PHASE``, when set) allows the Phase 5 pool."""
    if kernels.learner_code_elsewhere():  # the grader's judge: pool.py runs in the learner's process, never here
        return False
    graded = kernels._getenv("MINITORCH_PHASE")
    allowed = _allowed.get(graded)
    if allowed is None:
        allowed = _allowed[graded] = not graded or kernels.phase_index(graded) >= kernels.phase_index(
            kernels.KERNEL_FILES[POOL_FILE].phase)
    return allowed


_allowed: dict[str | None, bool] = {}


class DevicePool:
    """The learner's ``CachingPool`` over one device's raw allocator, installed as its hook."""

    def __init__(self, device: str, module: Any) -> None:
        self.device = device
        self.module = module
        self.size_class = module.size_class
        if device == "cuda":
            import cupy

            self._cupy = cupy
            self._device_id = cupy.cuda.Device().id
            raw_malloc, raw_free = cupy.cuda.runtime.malloc, cupy.cuda.runtime.free
        else:
            from minitorch import emu

            self._emu = emu
            raw_malloc, raw_free = emu.malloc, emu.free
        self.pool = _call(module.CachingPool, "CachingPool(raw_malloc, raw_free)", raw_malloc, raw_free)
        self.retired = False
        self._held: list[Any] | None = None  # blocks freed during a graph capture

    def malloc(self, nbytes: int) -> Any:
        try:
            return _call(self.pool.malloc, f"CachingPool.malloc({nbytes})", nbytes)
        except MemoryError:  # the device is full: give the cached blocks back, then try once more
            _call(self.pool.release, "CachingPool.release()")
            return _call(self.pool.malloc, f"CachingPool.malloc({nbytes})", nbytes)

    def free(self, handle: Any) -> None:
        if self._held is not None:
            self._held.append(handle)
            return
        self.pool.free(handle)
        if self.retired:  # pool.py was rewritten or removed: this pool only gives memory back now
            self.pool.release()

    def allocate_cuda(self, nbytes: int) -> Any:
        """CuPy's allocator hook: a MemoryPointer whose release frees the block into the pool."""
        cupy, handle = self._cupy, self.malloc(nbytes)
        memory = cupy.cuda.UnownedMemory(handle, nbytes, _Lease(self, handle), self._device_id)
        return cupy.cuda.MemoryPointer(memory, 0)

    def allocate_emu(self, nbytes: int) -> Any:
        """The emulator's allocator hook: the array ends where its block ends (16-byte aligned),
        against the guard page."""
        handle = self.malloc(nbytes)
        start = handle + self.size_class(nbytes) - (nbytes + 15) // 16 * 16
        return self._emu.UnownedMemory(start, nbytes, _Lease(self, handle))

    def install(self) -> None:
        if self.device == "cuda":
            self._previous = self._cupy.cuda.get_allocator()
            self._cupy.cuda.set_allocator(self.allocate_cuda)
        else:
            self._emu.set_allocator(self.allocate_emu)

    def uninstall(self) -> None:
        if self.device == "cuda":
            self._cupy.cuda.set_allocator(self._previous)
        else:
            self._emu.set_allocator(None)
        self.retired = True
        try:
            self.pool.release()
        except Exception as exc:  # a broken pool must not stop the allocation that replaces it
            warnings.warn(f"pool.py: releasing the cached blocks of the pool being replaced raised "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)


class _Lease:
    """Owned by the memory of one array: its release is the block's ``pool.free``."""

    __slots__ = ("handle", "owner")

    def __init__(self, owner: DevicePool, handle: Any) -> None:
        self.owner, self.handle = owner, handle

    def __del__(self) -> None:
        self.owner.free(self.handle)


class _Held:
    """Blocks a captured graph may still use: back to their pool when the graph dies."""

    def __init__(self, owner: DevicePool, handles: list[Any]) -> None:
        self.owner, self.handles = owner, handles

    def __del__(self) -> None:
        for handle in self.handles:
            self.owner.free(handle)


def _call(fn: Any, what: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except MemoryError:
        raise
    except Exception as exc:
        where = kernels.KERNEL_FILES[POOL_FILE]
        raise RuntimeError(f"pool.py allocates device memory from Phase 5 on, and {what} raised "
                           f"{type(exc).__name__}: {exc}. Fix the cell \"{where.cell}\" in {where.lab} (or "
                           f"delete {kernels.source_path(POOL_FILE)} to allocate without the pool)") from exc


_pools: dict[str, DevicePool] = {}
_stamps: dict[str, tuple[str, tuple[int, int, int]] | None] = {}


def _pool_stamp(path: str, directory: str) -> tuple[str, tuple[int, int, int]] | None:
    """(path, stamp) of pool.py, or None when it does not exist. Paid on every allocation, so: nothing
    while the workspace directory has had no event since the last answer (:mod:`minitorch.watch`, one
    ``poll``); else an ``fstat`` of a descriptor held on the file (``kernels.file_stamp``), or, while it
    is absent, one of the workspace directory, whose stamp changes when a file appears in it
    (``write_source`` also bumps ``kernels.writes``, for a file written within the directory clock's
    resolution)."""
    current = watch.generation(directory)
    if current is not None:
        known = _known.get(path)
        if known is not None and known[0] == current:
            return known[1]
    found = _read_pool_stamp(path, directory)
    if current is not None:
        _known[path] = (current, found)
    return found


def _read_pool_stamp(path: str, directory: str) -> tuple[str, tuple[int, int, int]] | None:
    seen = _absent.get(path)
    if seen is not None:
        try:
            if (kernels.writes, kernels._fstat_stamp(directory)) == seen:
                return None
        except FileNotFoundError:
            return None
    try:
        return path, kernels.file_stamp(path)
    except FileNotFoundError:
        try:
            _absent[path] = (kernels.writes, kernels._fstat_stamp(directory))
        except FileNotFoundError:
            pass
        return None


_known: dict[str, tuple[int, tuple[str, tuple[int, int, int]] | None]] = {}  # pool.py -> (generation, stamp)
_absent: dict[str, tuple[int, tuple[int, int, int]]] = {}  # pool.py path -> its directory when it was absent
_where: dict[Any, tuple[str, str]] = {}  # workspace -> (pool.py's path, the workspace's path), as strings


def refresh(device: str) -> None:
    """Install, replace or remove ``device``'s pool to match the workspace's ``pool.py`` and the
    graded phase. Cheap when nothing changed: one ``poll`` (or ``fstat``, see ``_pool_stamp``)."""
    stamp = None
    if uses_pool():
        workspace = kernels.workspace_dir()
        where = _where.get(workspace)
        if where is None:
            where = _where[workspace] = (kernels._path_str(POOL_FILE), str(workspace))
        stamp = _pool_stamp(*where)
    if device in _stamps and _stamps[device] == stamp:
        return
    current = _pools.pop(device, None)
    _stamps.pop(device, None)
    if current is not None:
        current.uninstall()
    if stamp is not None:
        fresh = DevicePool(device, kernels.load_module(POOL_FILE))
        fresh.install()
        _pools[device] = fresh
    _stamps[device] = stamp


def active_pool(device: str) -> DevicePool | None:
    """The pool that allocates ``device``'s memory now, if any."""
    refresh(device)
    return _pools.get(device)


def stats(device: str) -> dict[str, int] | None:
    """The pool's statistics (``CachingPool.stats()``), or None when no pool is in use."""
    pool = active_pool(device)
    return pool.pool.stats() if pool is not None else None


def release(device: str) -> int:
    """Give ``device``'s cached blocks back to the device; returns the bytes released."""
    pool = active_pool(device)
    return int(pool.pool.release()) if pool is not None else 0


@contextlib.contextmanager
def holding_frees(device: str) -> Iterator[list[_Held]]:
    """While a graph is captured: blocks freed stay out of the pool; the yielded list then holds
    them (a :class:`_Held`) for the graph to keep."""
    pool = active_pool(device) if device != "cpu" else None
    kept: list[_Held] = []
    if pool is None or pool._held is not None:
        yield kept
        return
    pool._held = []
    try:
        yield kept
    finally:
        held, pool._held = pool._held, None
        kept.append(_Held(pool, held))
