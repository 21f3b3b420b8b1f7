"""Device arrays of the emulator: guarded host buffers.

Each buffer ends flush against a ``PROT_NONE`` guard page and starts after one, so a kernel that
reads or writes past the end faults at once and the fault address gives the exact byte offset.
The start is aligned to 16 bytes (``float4`` loads stay legal), which can leave up to 15 bytes
between the end of the data and the guard page: those bytes hold a canary that is checked after
each launch. Copies in and out are explicit, like host-to-device and device-to-host copies.

Allocators (as CuPy's ``cupy.cuda.set_allocator``): by default every array gets a buffer of its
own, freed with it. ``set_allocator(fn)`` makes every new array ask ``fn(nbytes)`` instead, which
returns an :class:`UnownedMemory` inside a block from :func:`malloc` (``cudaMalloc``; given back
with :func:`free`). A block backs one live array at a time: an allocator that hands out a block
still in use, or frees one, raises :class:`AllocatorError` at once (on a GPU it would corrupt the
other array silently). The guard page and canaries stay those of the block, so an allocator that
places an array at the end of its block keeps overruns caught exactly.
"""

from __future__ import annotations

import bisect
import ctypes
import math
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import graph, rt
from .errors import AllocatorError, OutOfMemoryError

ALIGN = 16
CANARY = 0xA5
_CANARY_BYTE = bytes([CANARY])
FRONT_CANARY = 64   # bytes before the data that are checked after each launch
TAIL_CANARY = 64    # at most this many bytes after the data (a plain buffer has fewer than ALIGN)

_registry: dict[int, weakref.ref[_Buffer]] = {}
_reg_lock = threading.Lock()

# Device-memory limit: like a GPU's size, so one mistyped shape raises OutOfMemoryError instead of
# getting the process killed by the operating system. Bytes mapped (guard pages included) count.
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12,
          "tib": 1 << 40}
_SPARE_FRACTION = 0.8    # of the host memory available when the first buffer is allocated
_in_use = 0
_limit: int | None = None


def parse_size(text: str) -> int:
    """``"8GiB"``, ``"512 MB"``, ``"1e9"`` or ``"4096"`` as a number of bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"MINITORCH_EMU_MEMORY must be a size such as 8GiB, 512MB or 4096 (bytes), "
                         f"not {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def _host_can_spare() -> int:
    """A share of the memory the host has available now (MemAvailable), or of its physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * _SPARE_FRACTION)
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * _SPARE_FRACTION / 2)


def memory_limit() -> int:
    """The emulator's device-memory limit in bytes: MINITORCH_EMU_MEMORY, else what the host can spare."""
    global _limit
    if _limit is None:
        text = os.environ.get("MINITORCH_EMU_MEMORY", "").strip()
        _limit = parse_size(text) if text else _host_can_spare()
    return _limit


def set_memory_limit(nbytes: int | str | None) -> None:
    """Set the device-memory limit (bytes or a size string); None goes back to the default."""
    global _limit
    _limit = None if nbytes is None else parse_size(nbytes) if isinstance(nbytes, str) else int(nbytes)


def memory_in_use() -> int:
    """Bytes the emulator's live device buffers hold (guard pages included)."""
    return _in_use


def _reserve(nbytes: int) -> int:
    """Count an allocation of nbytes against the limit; returns the bytes counted."""
    global _in_use
    counted = (math.ceil((nbytes + ALIGN) / 4096) + 2) * 4096   # data, alignment and two guard pages
    limit = memory_limit()
    with _reg_lock:
        if _in_use + counted > limit:
            raise OutOfMemoryError(nbytes, _in_use, limit)
        _in_use += counted
    return counted


def _release(counted: int) -> None:
    global _in_use
    with _reg_lock:
        _in_use -= counted


class _Guarded:
    """The canaries of data at ``ptr`` (``nbytes``) inside a mapping that starts and ends with a
    guard page (``map_lo``, ``map_len``): at most FRONT_CANARY bytes before the data, and the bytes
    after it up to the guard page (at most TAIL_CANARY)."""

    __slots__ = ()
    ptr: int
    nbytes: int
    map_lo: int
    map_len: int

    @property
    def data_end_page(self) -> int:
        return self.map_lo + self.map_len - 4096

    @property
    def tail_len(self) -> int:
        return min(self.data_end_page - (self.ptr + self.nbytes), TAIL_CANARY)

    @property
    def front_len(self) -> int:
        return min(FRONT_CANARY, self.ptr - (self.map_lo + 4096))

    def canary_damage(self) -> int | None:
        """Byte offset (relative to the data) of the first damaged canary byte, or None."""
        tail = self.tail_len
        if tail:
            raw = ctypes.string_at(self.ptr + self.nbytes, tail)
            if raw.strip(_CANARY_BYTE):  # anything left is damage (one pass in C)
                first = next(i for i, b in enumerate(raw) if b != CANARY)
                return self.nbytes + first
        front = self.front_len
        if front:
            raw = ctypes.string_at(self.ptr - front, front)
            if raw.strip(_CANARY_BYTE):
                first = next(i for i, b in enumerate(raw) if b != CANARY)
                return -(front - first)
        return None

    def repair_canary(self) -> None:
        if self.tail_len:
            ctypes.memset(self.ptr + self.nbytes, CANARY, self.tail_len)
        if self.front_len:
            ctypes.memset(self.ptr - self.front_len, CANARY, self.front_len)


class _Buffer(_Guarded):
    """One guarded allocation; freed when the last DeviceArray using it goes away (or, for a block
    from :func:`malloc`, by :func:`free`)."""

    __slots__ = ("ptr", "nbytes", "map_lo", "map_len", "placed", "unmap", "__weakref__")

    def __init__(self, nbytes: int) -> None:
        lib = rt.lib()
        counted = _reserve(nbytes)
        lo, ln = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        ptr = lib.emu_alloc(nbytes, ALIGN, ctypes.byref(lo), ctypes.byref(ln))
        if not ptr:
            _release(counted)
            raise OutOfMemoryError(nbytes, _in_use, memory_limit())
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.map_lo = lo.value
        self.map_len = ln.value
        self.placed: weakref.ref[UnownedMemory] | None = None  # the array a block backs now
        self.repair_canary()
        with _reg_lock:
            _registry[self.map_lo] = weakref.ref(self)
        self.unmap = weakref.finalize(self, _free, self.map_lo, self.map_len, counted)


def _free(map_lo: int, map_len: int, counted: int = 0) -> None:
    _release(counted)
    with _reg_lock:
        _registry.pop(map_lo, None)
    try:
        rt.lib().emu_free(map_lo, map_len)
    except Exception:  # interpreter shutdown
        pass


def find_buffer(addr: int) -> _Guarded | None:
    """The live buffer whose mapping (guard pages included) contains addr: for a block from
    :func:`malloc`, the memory placed in it if an array uses it now."""
    with _reg_lock:
        refs = list(_registry.items())
    for lo, ref in refs:
        b = ref()
        if b is not None and lo <= addr < lo + b.map_len:
            placed = b.placed() if b.placed is not None else None
            return placed if placed is not None else b
    return None


# --- allocators: cudaMalloc/cudaFree and CuPy's allocator hook ------------------------------------

_blocks: dict[int, _Buffer] = {}   # blocks from malloc() by address, until free()
_block_starts: list[int] = []      # their addresses, sorted (which block holds an address)
_allocator: Callable[[int], UnownedMemory] | None = None


def malloc(nbytes: int) -> int:
    """``cudaMalloc``: a new block of ``nbytes`` bytes, guarded as every buffer and counted against
    the memory limit until :func:`free`; returns its address."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"malloc: nbytes must be an integer >= 0, got {nbytes!r}")
    block = _Buffer(int(nbytes))
    with _reg_lock:
        _blocks[block.ptr] = block
        bisect.insort(_block_starts, block.ptr)
    return block.ptr


def free(ptr: int) -> None:
    """``cudaFree``: give a block from :func:`malloc` back (its memory no longer counts)."""
    with _reg_lock:
        block = _blocks.get(ptr)
        placed = block.placed() if block is not None and block.placed is not None else None
        if block is not None and placed is None:
            del _blocks[ptr]
            _block_starts.pop(bisect.bisect_left(_block_starts, ptr))
    if block is None:
        raise AllocatorError(f"free({ptr:#x}): not the address of a block from malloc(), or freed twice")
    if placed is not None:
        raise AllocatorError(f"free({ptr:#x}): the block still backs a live array of {placed.nbytes} bytes "
                             "(an allocator gave back memory that is in use)")
    block.unmap()


def blocks_in_use() -> int:
    """How many blocks from :func:`malloc` have not been freed."""
    return len(_blocks)


class UnownedMemory(_Guarded):
    """``cupy.cuda.UnownedMemory``: ``size`` bytes at ``ptr``, inside one block from :func:`malloc`,
    for one array; ``owner`` is kept alive as long as the memory is (its release is the allocator's
    signal that the block is free again)."""

    __slots__ = ("ptr", "nbytes", "map_lo", "map_len", "block", "owner", "__weakref__")

    def __init__(self, ptr: int, size: int, owner: Any) -> None:
        ptr, size = int(ptr), int(size)
        with _reg_lock:
            i = bisect.bisect_right(_block_starts, ptr) - 1
            block = _blocks.get(_block_starts[i]) if i >= 0 else None
        if block is None or size < 0 or ptr + size > block.ptr + block.nbytes:
            raise AllocatorError(f"memory [{ptr:#x}, {ptr + size:#x}) is not inside one block from malloc()")
        if ptr % ALIGN:
            raise AllocatorError(f"memory at {ptr:#x} is not aligned to {ALIGN} bytes (float4 loads need it)")
        other = block.placed() if block.placed is not None else None
        if other is not None:
            raise AllocatorError(
                f"the allocator handed out the block at {block.ptr:#x} ({block.nbytes} bytes) while it still "
                f"backs a live array of {other.nbytes} bytes: the two arrays would overwrite each other")
        self.ptr, self.nbytes, self.block, self.owner = ptr, size, block, owner
        self.map_lo, self.map_len = block.map_lo, block.map_len
        block.placed = weakref.ref(self)
        self.repair_canary()


def set_allocator(allocator: Callable[[int], UnownedMemory] | None = None) -> None:
    """``cupy.cuda.set_allocator``: new arrays get their memory from ``allocator(nbytes)`` (an
    :class:`UnownedMemory` of at least nbytes); ``None`` gives every array a buffer of its own again."""
    global _allocator
    _allocator = allocator


def get_allocator() -> Callable[[int], UnownedMemory] | None:
    return _allocator


def _allocate(nbytes: int) -> _Guarded:
    allocator = _allocator
    if allocator is None:
        return _Buffer(nbytes)
    mem = allocator(nbytes)
    if not isinstance(mem, UnownedMemory):
        raise TypeError(f"the allocator returned a {type(mem).__name__}, not an emu.UnownedMemory")
    if mem.nbytes < nbytes:
        raise AllocatorError(f"the allocator returned {mem.nbytes} bytes for an array of {nbytes} bytes")
    return mem


class _Data:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class DeviceArray:
    """An array in (emulated) device memory: C-contiguous, with a NumPy dtype.

    Like a CuPy array, it does not convert to NumPy implicitly: copy it with ``.get()`` or
    ``emu.asnumpy(a)``.
    """

    __array_priority__ = 100

    def __init__(self, shape: int | Sequence[int], dtype: Any = np.float32, *, _buffer: _Guarded | None = None,
                 _offset: int = 0) -> None:
        shape_t = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape_t):
            raise ValueError(f"negative dimensions are not allowed: {shape_t}")
        self._shape = shape_t
        self._dtype = np.dtype(dtype)
        n = math.prod(shape_t) * self._dtype.itemsize
        self._buf = _buffer if _buffer is not None else _allocate(n)
        self._offset = _offset

    # --- attributes as in NumPy/CuPy -------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        st, acc = [], self.itemsize
        for s in reversed(self._shape):
            st.append(acc)
            acc *= s
        return tuple(reversed(st))

    @property
    def ptr(self) -> int:
        """Address of the first element (what a kernel receives)."""
        return self._buf.ptr + self._offset

    @property
    def data(self) -> _Data:
        """``a.data.ptr`` as in CuPy."""
        return _Data(self.ptr)

    @property
    def device(self) -> str:
        return "emu"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    # --- copies --------------------------------------------------------------------------------
    def get(self) -> np.ndarray:
        """Copy to a new NumPy array (device to host)."""
        graph.refuse_during_capture("a device-to-host copy")
        out = np.empty(self._shape, dtype=self._dtype)
        if self.nbytes:
            ctypes.memmove(out.ctypes.data, self.ptr, self.nbytes)
        return out

    def set(self, arr: Any) -> None:
        """Copy a NumPy array of the same shape and dtype into this array (host to device)."""
        graph.refuse_during_capture("a host-to-device copy")
        a = np.asarray(arr)
        if a.shape != self._shape:
            raise ValueError(f"shape mismatch: the device array has shape {self._shape}, the host array {a.shape}")
        if a.dtype != self._dtype:
            raise TypeError(f"dtype mismatch: the device array is {self._dtype}, the host array {a.dtype}")
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        if self.nbytes:
            ctypes.memmove(self.ptr, a.ctypes.data, self.nbytes)

    def copy(self) -> DeviceArray:
        out = DeviceArray(self._shape, self._dtype)
        if self.nbytes and not graph.record(lambda: ctypes.memmove(out.ptr, self.ptr, self.nbytes)):
            ctypes.memmove(out.ptr, self.ptr, self.nbytes)
        return out

    def reshape(self, *shape: Any) -> DeviceArray:
        """A view with a new shape (one dimension may be -1)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        dims = [int(s) for s in shape]
        if dims.count(-1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(dims)}")
            dims[dims.index(-1)] = self.size // known
        if int(np.prod(dims, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape array of size {self.size} into shape {tuple(dims)}")
        return DeviceArray(tuple(dims), self._dtype, _buffer=self._buf, _offset=self._offset)

    def ravel(self) -> DeviceArray:
        return self.reshape(-1)

    def view(self, dtype: Any) -> DeviceArray:
        dt = np.dtype(dtype)
        if self.nbytes % dt.itemsize:
            raise ValueError("the new dtype's itemsize must divide the array's size in bytes")
        shape = self._shape[:-1] + (self._shape[-1] * self.itemsize // dt.itemsize,) if self._shape else ()
        return DeviceArray(shape, dt, _buffer=self._buf, _offset=self._offset)

    def fill(self, value: Any) -> None:
        if graph.record(lambda: self.fill(value)):
            return
        self.set(np.full(self._shape, value, dtype=self._dtype))

    def astype(self, dtype: Any) -> DeviceArray:
        return asarray(self.get().astype(dtype))

    # --- the host/device boundary --------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed (this is device memory). "
                        "Please use `.get()` or `emu.asnumpy(a)` to copy it to the host explicitly.")

    def __getitem__(self, key: Any) -> Any:
        """``a[i]`` (an integer along the first axis): the contiguous sub-array, a view of the same device
        memory, as CuPy's (a batch of matrices launched one at a time); ``a[start:stop]`` of a 1-D array
        (step 1): the contiguous run of elements, a view too (a parameter's share of a flat buffer). Any
        other index reads values, which live in device memory: refused."""
        if isinstance(key, slice) and self.ndim == 1 and key.step in (None, 1):
            start, stop, _ = key.indices(self._shape[0])
            return DeviceArray((max(stop - start, 0),), self._dtype, _buffer=self._buf,
                               _offset=self._offset + start * self._dtype.itemsize)
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and self.ndim >= 1:
            i = int(key) + (self._shape[0] if key < 0 else 0)
            if not 0 <= i < self._shape[0]:
                raise IndexError(f"index {int(key)} is out of bounds for axis 0 with size {self._shape[0]}")
            inner = self._shape[1:]
            step = math.prod(inner) * self._dtype.itemsize
            return DeviceArray(inner, self._dtype, _buffer=self._buf, _offset=self._offset + i * step)
        raise TypeError("indexing an emu.DeviceArray from Python is not supported (except a[i], the i-th "
                        "sub-array of the first axis, and a[start:stop] of a 1-D array: views): it lives in (emulated) device memory. Copy it "
                        "to the host with `.get()` first.")

    def __iter__(self) -> Any:
        raise TypeError("iterating over an emu.DeviceArray is not supported: copy it to the host with `.get()`")

    def _scalar(self) -> Any:
        if self.size != 1:
            raise TypeError("only size-1 arrays can be converted to Python scalars")
        return self.get().reshape(()).item()

    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __bool__(self) -> bool:
        return bool(self._scalar())

    def __repr__(self) -> str:
        body = np.array2string(self.get(), separator=", ", prefix="array(")
        return f"array({body}, dtype={self._dtype}, device='emu')"

    __str__ = __repr__


def asarray(a: Any, dtype: Any = None) -> DeviceArray:
    """Copy a NumPy array (or anything np.asarray accepts) to the device; device arrays pass through."""
    if isinstance(a, DeviceArray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    graph.refuse_during_capture("a host-to-device copy")
    h = np.asarray(a, dtype=dtype)
    if not h.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        h = h.copy(order="C")
    out = DeviceArray(h.shape, h.dtype)
    if out.nbytes:
        ctypes.memmove(out.ptr, h.ctypes.data, out.nbytes)
    return out


def asnumpy(a: Any) -> np.ndarray:
    """Copy a device array to a new NumPy array (NumPy input is returned as an array)."""
    if isinstance(a, DeviceArray):
        return a.get()
    return np.asarray(a)


def empty(shape: int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    """Uninitialised device array. Its bytes are poisoned (0xFF: NaN for floats), as fresh GPU
    memory holds whatever the last user left."""
    out = DeviceArray(shape, dtype)
    if out.nbytes:
        ctypes.memset(out.ptr, 0xFF, out.nbytes)
    return out


def zeros(shape: int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    out = DeviceArray(shape, dtype)
    if graph.is_capturing():  # as cupy.zeros: a memset that every replay runs again
        out.fill(0)
    elif out.nbytes:
        ctypes.memset(out.ptr, 0, out.nbytes)
    return out
