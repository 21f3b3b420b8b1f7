"""ctypes view of the runtime library (runtime/runtime.cpp) and of runtime/emu_abi.h."""

from __future__ import annotations

import ctypes
import os
import threading

from . import compiler

_lib: list[ctypes.CDLL] = []
_lock = threading.Lock()

c_u = ctypes.c_uint
c_ull = ctypes.c_ulonglong
c_ll = ctypes.c_longlong


class EmuFinding(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int), ("space", ctypes.c_int), ("offset", c_ll),
        ("t1", c_u * 3), ("t2", c_u * 3), ("block", c_u * 3),
        ("pc1", c_ull), ("pc2", c_ull), ("vol", ctypes.c_int), ("same_warp", ctypes.c_int),
        ("buf", ctypes.c_int), ("block1", c_u * 3), ("flags", ctypes.c_int),
    ]


MAX_FINDINGS = 32


class EmuResult(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int), ("sig", ctypes.c_int), ("si_code", ctypes.c_int),
        ("addr", c_ull), ("pc", c_ull),
        ("thread", c_u * 3), ("block", c_u * 3),
        ("line", ctypes.c_int), ("offset", c_ll), ("extra", ctypes.c_int), ("is_write", ctypes.c_int),
        ("file", ctypes.c_char * 256), ("msg", ctypes.c_char * 2048),
        ("warn_early_return", ctypes.c_int), ("warn_thread", c_u * 3), ("warn_block", c_u * 3),
        ("warn_line", ctypes.c_int), ("warn_file", ctypes.c_char * 256),
        ("out_text", ctypes.c_void_p), ("out_len", c_ll),
        ("n_findings", ctypes.c_int), ("n_findings_total", c_ll),
        ("findings", EmuFinding * MAX_FINDINGS),
    ]


class EmuLaunch(ctypes.Structure):
    _fields_ = [
        ("run1", ctypes.c_void_p), ("plain", ctypes.c_void_p), ("bind", ctypes.c_void_p),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
        ("grid", c_u * 3), ("block", c_u * 3),
        ("shared_mem", c_ull),
        ("use_fibers", ctypes.c_int), ("schedule", ctypes.c_int), ("seed", c_ull),
        ("workers", ctypes.c_int), ("check", ctypes.c_int), ("stack_kb", ctypes.c_int),
        ("n_static", ctypes.c_int), ("static_off", ctypes.POINTER(c_ll)), ("static_size", ctypes.POINTER(c_ll)),
        ("tls_lo_rel", c_ll), ("tls_hi_rel", c_ll), ("pad_lo_end_rel", c_ll), ("pad_hi_start_rel", c_ll),
        ("timeout_ms", c_ll),
        ("n_bufs", ctypes.c_int),
        ("buf_data", ctypes.POINTER(c_ull)), ("buf_nbytes", ctypes.POINTER(c_ull)),
        ("buf_lo", ctypes.POINTER(c_ull)), ("buf_hi", ctypes.POINTER(c_ull)),
        ("result", ctypes.POINTER(EmuResult)),
    ]


# EmuResult.kind
OK, SIGNAL, ASSERT, TRAP, BARRIER, STACK, DYNSMEM, OOB, WARP, INTERNAL, SHARED_OOB, STOP, MISALIGNED = range(13)
# EmuFinding.kind
F_RAW, F_WAR, F_WAW, F_UNINIT, F_ASYNC = 1, 2, 3, 4, 5
# EmuFinding.flags
FF_BENIGN, FF_ATOMIC, FF_FENCE, FF_ATOMIC_LATER = 1, 2, 4, 8


_sealed: list[bool] = []


def load_sealed(sha256: str | None = None, path: str | None = None) -> bool:
    """Load the runtime from a sealed in-memory copy of the built library rather than from the cache's file,
    which any process of the same user may rewrite while it is mapped here (a grader's process that must not
    run code another process wrote). ``path`` and ``sha256``: the library to load (default: the one built in
    this process's cache) and its digest, taken before any such process ran; a library that no longer matches
    it is refused (RuntimeError). True when the runtime in use is that copy; False when it had already been
    loaded from the cache or memfd_create is missing."""
    if _lib:
        return bool(_sealed)
    if not hasattr(os, "memfd_create"):
        return False
    path = path or str(compiler.build_runtime())
    with open(path, "rb") as fh:
        data = fh.read()
    if sha256 is not None:
        import hashlib

        if hashlib.sha256(data).hexdigest() != sha256:
            raise RuntimeError(f"{path} changed since it was built: it is not loaded (remove it to rebuild it)")
    fd = os.memfd_create("minitorch_emu_rt", os.MFD_ALLOW_SEALING)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    import fcntl

    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    lib(f"/proc/self/fd/{fd}")
    _sealed.append(True)
    return True


def lib(path: str | None = None) -> ctypes.CDLL:
    """The runtime, loaded once with RTLD_GLOBAL: kernel modules resolve emu_rt_* and __tsan_*
    against it. ``path``: where to load it from the first time (default: built in the cache)."""
    if _lib:
        return _lib[0]
    with _lock:
        if not _lib:
            dll = ctypes.CDLL(str(path or compiler.build_runtime()), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            dll.emu_alloc.restype = ctypes.c_void_p
            dll.emu_alloc.argtypes = [c_ull, c_ull, ctypes.POINTER(c_ull), ctypes.POINTER(c_ull)]
            dll.emu_free.argtypes = [c_ull, c_ull]
            dll.emu_free.restype = None
            dll.emu_launch.argtypes = [ctypes.POINTER(EmuLaunch)]
            dll.emu_launch.restype = ctypes.c_int
            dll.emu_free_text.argtypes = [ctypes.c_void_p]
            dll.emu_free_text.restype = None
            _lib.append(dll)
    return _lib[0]
