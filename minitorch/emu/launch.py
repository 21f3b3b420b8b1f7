"""RawModule / kernel objects: argument packing and checking, launch validation, and turning the
runtime's reports into Python exceptions with the learner's line numbers."""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import compiler, config, graph, rt
from .errors import ArgumentWarning, BarrierWarning, KernelFault, LaunchError, RaceWarning
from .memory import DeviceArray, find_buffer
from .specialize import Specializer

MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
STATIC_SHARED_LIMIT = 48 * 1024          # per block, as on every GPU since Kepler
DEFAULT_DYNAMIC_LIMIT = 48 * 1024        # static + dynamic without opting in
OPTIN_SHARED_LIMIT = 227 * 1024          # H100's opt-in maximum (max_dynamic_shared_size_bytes)


# ---------------------------------------------------------------------------------------------
# Parameter types
# ---------------------------------------------------------------------------------------------
@dataclass
class Param:
    kind: str       # p pointer, i signed int, u unsigned int, f float, b bool, s struct
    size: int
    pkind: str      # pointee kind (pointers)
    psize: int
    ptype: str      # pointee type name
    ctype: str      # C type name, e.g. "const float*"
    name: str = ""

    def decl(self) -> str:
        return f"{self.ctype} {self.name}".strip() if self.name else self.ctype


def _tname(pretty: str) -> str:
    m = re.search(r"T = (.*?)(?:;.*)?\]$", pretty)
    return m.group(1).strip() if m else pretty


def parse_desc(desc: str, names: list[str]) -> list[Param]:
    lines = desc.split("\n")[1:]
    params = []
    for i, ln in enumerate(x for x in lines if x):
        head, tn = ln.split("\x1f", 1)
        kind, size, pkind, psize, ptn = head.split(";", 4)
        ctype = _tname(tn).replace(" *", "*")
        params.append(Param(kind, int(size), pkind, int(psize), _tname(ptn) if ptn != "-" else "", ctype,
                            names[i] if i < len(names) else ""))
    return params


_VEC = re.compile(r"^(u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]$")
_BASE_DTYPE = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4",
               "long": "i8", "ulong": "u8", "longlong": "i8", "ulonglong": "u8", "float": "f4", "double": "f8"}


def _strip_cv(t: str) -> str:
    return re.sub(r"\b(const|volatile)\b", "", t).strip()


def pointee_ok(p: Param, dt: np.dtype) -> bool:
    """Does an array of dtype dt match the pointer parameter p?"""
    t = _strip_cv(p.ptype)
    if p.pkind == "v" or p.psize == 0:
        return True
    if p.pkind == "f":
        return dt.kind == "f" and dt.itemsize == p.psize
    if p.pkind in "iu":
        if p.psize == 1:
            return dt.kind in "iub" and dt.itemsize == 1
        return dt.kind in "iu" and dt.itemsize == p.psize
    if p.pkind == "b":
        return dt.itemsize == 1 and dt.kind in "biu"
    if p.pkind == "s":
        m = _VEC.match(t)
        if m:
            base = np.dtype(_BASE_DTYPE[m.group(1)])
            return dt.itemsize == base.itemsize and (dt.kind == base.kind or {dt.kind, base.kind} <= {"i", "u"})
        if t in ("__half", "half"):
            return dt.itemsize == 2
        if t in ("__nv_bfloat16", "nv_bfloat16", "__half2", "half2", "__nv_bfloat162"):
            return dt.itemsize in (2, 4)
        return True
    return True


def _expected_dtype(p: Param) -> str:
    t = _strip_cv(p.ptype)
    if p.pkind == "f":
        return {4: "float32", 8: "float64", 2: "float16"}.get(p.psize, "?")
    if p.pkind in "iu":
        return f"{'u' if p.pkind == 'u' else ''}int{8 * p.psize}"
    m = _VEC.match(t)
    if m:
        return np.dtype(_BASE_DTYPE[m.group(1)]).name
    if t in ("__half", "half"):
        return "float16"
    return t


_NP_FOR_SCALAR = {("f", 4): "numpy.float32", ("f", 8): "numpy.float64", ("i", 4): "numpy.int32",
                  ("i", 8): "numpy.int64", ("u", 4): "numpy.uint32", ("u", 8): "numpy.uint64",
                  ("i", 2): "numpy.int16", ("u", 2): "numpy.uint16", ("i", 1): "numpy.int8",
                  ("u", 1): "numpy.uint8", ("b", 1): "numpy.bool_"}


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------
_dlls: dict[str, ctypes.CDLL] = {}
_dll_lock = threading.Lock()
# One launch at a time: workers, signal handlers and the check-mode shadow belong to the process.
_launch_lock = threading.Lock()


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _module_base(addr: int) -> int:
    libc = ctypes.CDLL(None)
    info = _DlInfo()
    if libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)):
        return int(info.dli_fbase or 0)
    return 0


class _Loaded:
    """A compiled variant (normal or check) of a module, loaded in this process."""

    def __init__(self, built: compiler.Built) -> None:
        rt.lib()
        self.built = built
        key = str(built.so_path)
        with _dll_lock:
            if key not in _dlls:
                _dlls[key] = ctypes.CDLL(key, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.dll = _dlls[key]
        self.bind = ctypes.cast(self.dll["__emu_bind"], ctypes.c_void_p).value
        self.base = _module_base(self.bind or 0)
        self.entries: dict[int, tuple[int, int, str]] = {}
        for ex in built.exports:
            run1 = ctypes.cast(getattr(self.dll, f"__emu_k{ex.index}_run1"), ctypes.c_void_p).value
            plain = ctypes.cast(getattr(self.dll, f"__emu_k{ex.index}_plain"), ctypes.c_void_p).value
            fdesc = getattr(self.dll, f"__emu_k{ex.index}_desc")
            fdesc.restype = ctypes.c_char_p
            self.entries[ex.index] = (run1 or 0, plain or 0, fdesc().decode())
        self.spec_entries: dict[int, tuple[int, int]] = {}  # specs[j] -> (run1, plain)
        for j in range(len(built.specs)):
            self.spec_entries[j] = (ctypes.cast(getattr(self.dll, f"__emu_k{built.specs[j][0]}s{j}_run1"),
                                                ctypes.c_void_p).value or 0,
                                    ctypes.cast(getattr(self.dll, f"__emu_k{built.specs[j][0]}s{j}_plain"),
                                                ctypes.c_void_p).value or 0)
        syms = built.tls_symbols
        anchor = next((s for s in syms if "__emu_w" in s["name"]), None)
        self.anchor_off = anchor["offset"] if anchor else 0
        pads = {s["name"]: s for s in syms if s["name"] in ("__emu_pad_lo", "__emu_pad_hi")}
        self.shared_vars = [s for s in syms
                            if s is not anchor and s["name"] not in pads and s["size"] > 0
                            and not s["name"].startswith(("guard variable", "TLS "))]
        n = len(self.shared_vars)
        ends = [s["offset"] + s["size"] for s in syms] or [self.anchor_off + 8]
        self.tls_range = (-self.anchor_off, max(ends) - self.anchor_off)
        lo, hi = pads.get("__emu_pad_lo"), pads.get("__emu_pad_hi")
        self.pad_windows = (lo["offset"] + lo["size"] - self.anchor_off if lo else 0,
                            hi["offset"] - self.anchor_off if hi else 0)
        self.static_off = (ctypes.c_longlong * max(n, 1))(*[s["offset"] - self.anchor_off for s in self.shared_vars])
        self.static_size = (ctypes.c_longlong * max(n, 1))(*[s["size"] for s in self.shared_vars])

    def lines(self, pcs: list[int]) -> list[tuple[str, int]]:
        offs = [max(0, pc - self.base) for pc in pcs]
        return compiler.addr2line(self.built.so_path, offs)

    def var_at(self, off: int) -> tuple[str, int]:
        """(variable name, byte offset within it) for an offset from the TLS anchor."""
        for s in self.shared_vars:
            rel = s["offset"] - self.anchor_off
            if rel <= off < rel + s["size"]:
                return s["name"].rsplit("::", 1)[-1], off - rel
        return "<shared memory>", off

    def nearest_var(self, off: int) -> tuple[str, int, int]:
        """(name, byte offset relative to it, its size) of the variable an out-of-bounds offset most
        likely belongs to: the closest one that starts at or before it, else the first."""
        best = None
        for s in sorted(self.shared_vars, key=lambda s: s["offset"]):
            rel = s["offset"] - self.anchor_off
            if rel <= off or best is None:
                best = (s["name"].rsplit("::", 1)[-1], off - rel, s["size"])
        return best or ("<shared memory>", off, 0)


def _owner(name: str) -> str:
    if "::" not in name:
        return ""
    owner = name.rsplit("::", 1)[0]
    owner = re.sub(r"\(.*\)\s*(const)?\s*$", "", owner)
    owner = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>\s*$", "", owner)
    m = re.search(r"([A-Za-z_]\w*)\s*$", owner)
    return m.group(1) if m else ""


def _static_shared(shared_vars: list[dict], base: str, templates: dict) -> int:
    """Bytes of ``__shared__`` variables a kernel named ``base`` may use: those at file scope and in
    ordinary functions, plus those of one instantiation of ``base`` when it is a template. Several
    instantiations compiled into one module (``name_expressions``) each have their own variables, and
    the symbols do not say which export is which: the largest instantiation is counted, not their sum."""
    total, per_instance = 0, {}
    for s in shared_vars:
        owner = _owner(s["name"])
        if owner == base and base in templates:
            full = s["name"].rsplit("::", 1)[0]
            per_instance[full] = per_instance.get(full, 0) + s["size"]
        elif owner in ("", base) or owner not in templates:
            total += s["size"]
    return total + max(per_instance.values(), default=0)


class RawModule:
    """CUDA C source compiled for the CPU. Same constructor as ``cupy.RawModule``; ``filename``
    (an addition) names the source in compiler messages and fault reports."""

    def __init__(self, code: str | None = None, *, path: str | None = None, options: tuple[str, ...] = (),
                 backend: str = "nvrtc", translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 name_expressions: Any = None, jitify: bool = False, filename: str | None = None) -> None:
        if code is None:
            if path is None:
                raise TypeError("RawModule needs code= (CUDA C source)")
            p = Path(path)
            if p.suffix not in (".cu", ".cuh", ".cpp", ".h"):
                raise LaunchError(f"the emulator compiles CUDA C source only, not {p.suffix} files (cubin/ptx need "
                                  "an NVIDIA GPU)")
            code = p.read_text()
            filename = filename or p.name
        if enable_cooperative_groups:
            raise LaunchError("cooperative (grid-wide) launches are not supported by the emulator: this kernel "
                              "needs an NVIDIA GPU (or Google Colab)")
        self.code = code
        self.options = tuple(options)
        self.name_expressions = tuple(name_expressions) if name_expressions else None
        self.filename = filename or "kernel.cu"
        self._variants: dict[bool, _Loaded] = {}
        self._lock = threading.Lock()
        self._info: compiler.SourceInfo | None = None
        self._variant(False)
        self.specializer = Specializer(self)

    @property
    def info(self) -> compiler.SourceInfo:
        """What the source scan found (kernels, parameter names, barrier use)."""
        if self._info is None:
            self._info = compiler.scan_source(self.code, self.filename)
        return self._info

    def _variant(self, check: bool) -> _Loaded:
        with self._lock:
            if check not in self._variants:
                built = compiler.build_module(self.code, self.options, self.name_expressions, self.filename, check)
                self._variants[check] = _Loaded(built)
            return self._variants[check]

    @property
    def compile_seconds(self) -> float:
        """Time the last compile (or cache look-up) took."""
        return self._variants[False].built.compile_seconds

    @property
    def cached(self) -> bool:
        return self._variants[False].built.cached

    def kernel_names(self) -> list[str]:
        return [e.name for e in self._variants[False].built.exports]

    def get_function(self, name: str) -> Kernel:
        built = self._variants[False].built
        key = re.sub(r"\s+", "", name)
        for ex in built.exports:
            if ex.name == key:
                return Kernel(self, ex)
        info = self.info
        base = key.split("<")[0]
        if base in info.templates:
            f = info.templates[base]
            how = (f"it is a template: pass name_expressions=['{base}<...>'] to RawModule and ask for that "
                   "exact string" if f.template else
                   f"it is not declared extern \"C\" (C++ mangles its name): declare it "
                   f"`extern \"C\" __global__ void {base}(...)` or pass name_expressions=['{base}']")
            raise LaunchError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: kernel '{name}' cannot be looked up "
                              f"by this name; {how}", "CUDA_ERROR_NOT_FOUND")
        raise LaunchError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: there is no kernel '{name}' in "
                          f"{self.filename}; its kernels are {self.kernel_names()}", "CUDA_ERROR_NOT_FOUND")

    def get_global(self, name: str) -> Any:
        raise LaunchError("get_global (__constant__/__device__ variables from the host) is not supported by the "
                          "emulator yet; pass the values as kernel arguments")


def _dims(v: Any, what: str) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)):
        t = (int(v),)
    else:
        try:
            t = tuple(int(x) for x in v)
        except TypeError:
            raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, not {type(v).__name__}") from None
    if not 1 <= len(t) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


class Kernel:
    """A kernel of a RawModule, called as ``k(grid, block, args, shared_mem=0)`` like
    ``cupy.RawKernel``."""

    def __init__(self, module: RawModule, export: compiler.Export) -> None:
        self.module = module
        self.export = export
        self.name = export.name
        loaded = module._variant(False)
        names: list[str] = []
        info = module.info
        f = info.kernels.get(export.base) or info.templates.get(export.base)
        if f:
            names = f.param_names
        self.params = parse_desc(loaded.entries[export.index][2], names)
        self._max_dyn = 0
        self._pointee_ok: dict[tuple[int, np.dtype], bool] = {}
        self._templates: dict[bool, rt.EmuLaunch] = {}
        self._spec_templates: tuple[Any, dict[int, rt.EmuLaunch]] = (None, {})
        self.static_shared = _static_shared(loaded.shared_vars, export.base, info.templates)

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(p.decl() for p in self.params)})"

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._max_dyn or (DEFAULT_DYNAMIC_LIMIT - self.static_shared)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, v: int) -> None:
        if v < 0 or v + self.static_shared > OPTIN_SHARED_LIMIT:
            raise LaunchError(f"cudaErrorInvalidValue: max_dynamic_shared_size_bytes={v} plus {self.static_shared} "
                              f"bytes of static shared memory exceeds the {OPTIN_SHARED_LIMIT} bytes a block may "
                              "use", "cudaErrorInvalidValue")
        self._max_dyn = int(v)

    @property
    def attributes(self) -> dict[str, int]:
        return {"max_threads_per_block": MAX_THREADS, "shared_size_bytes": self.static_shared,
                "max_dynamic_shared_size_bytes": self.max_dynamic_shared_size_bytes}

    # ---- argument packing -----------------------------------------------------------------------
    def _arg_error(self, i: int, msg: str) -> TypeError:
        return TypeError(f"argument #{i} of {self.signature}: {msg}")

    def _pack(self, args: tuple[Any, ...]) -> tuple[Any, list[Any], list[tuple[int, DeviceArray]], tuple]:
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"kernel arguments must be a tuple, e.g. k(grid, block, (x, y, n)), not "
                            f"{type(args).__name__}")
        if len(args) != len(self.params):
            raise TypeError(f"{self.signature} takes {len(self.params)} argument(s), {len(args)} given")
        mode = config.arg_mode()
        arrays: list[tuple[int, DeviceArray]] = []
        # One buffer holds every argument, each in a 16-byte aligned slot at least as large as its
        # parameter (zero-padded); ptrs[i] points at slot i (null-terminated).
        slots = []
        offsets = []
        consts = []  # (index, size, value) of the integer arguments: the signature specialize.py compiles for
        at = 0
        for i, (a, p) in enumerate(zip(args, self.params, strict=True)):
            raw = self._pack_one(i, a, p, mode, arrays)
            if p.kind in "iub" and p.size in (1, 2, 4, 8):
                consts.append((i, p.size, int.from_bytes(raw[:p.size], "little", signed=p.kind == "i")))
            size = max(p.size, 8, len(raw))
            size += -size % 16
            offsets.append(at)
            slots.append(raw + b"\0" * (size - len(raw)))
            at += size
        buf = ctypes.create_string_buffer(b"".join(slots), max(at, 16))
        base = ctypes.addressof(buf)
        ptrs = (ctypes.c_void_p * (len(args) + 1))(*[base + off for off in offsets])
        return ptrs, [buf], arrays, tuple(consts)

    def _mismatch(self, i: int, msg: str, mode: str) -> None:
        if mode == "strict":
            raise self._arg_error(i, msg)
        warnings.warn(ArgumentWarning(f"argument #{i} of {self.signature}: {msg} (CuPy-compatible mode: the "
                                      "kernel reads these bytes as they are, as on a GPU)"), stacklevel=4)

    def _pack_one(self, i: int, a: Any, p: Param, mode: str, arrays: list[tuple[int, DeviceArray]]) -> bytes:
        fix = _NP_FOR_SCALAR.get((p.kind, p.size), "a NumPy scalar of the parameter's type")
        if isinstance(a, DeviceArray):
            if p.kind != "p":
                raise self._arg_error(i, f"a device array was passed but the parameter is `{p.ctype}`, not a pointer")
            ok = self._pointee_ok.get((i, a.dtype))
            if ok is None:
                ok = self._pointee_ok[(i, a.dtype)] = pointee_ok(p, a.dtype)
            if not ok:
                self._mismatch(i, f"the parameter is `{p.ctype}` ({_expected_dtype(p)} elements) but the array's "
                                  f"dtype is {a.dtype}; convert the host array with .astype(numpy."
                                  f"{_expected_dtype(p)}) before copying it to the device", mode)
            arrays.append((i, a))
            return a.ptr.to_bytes(8, "little")
        if a is None:
            if p.kind != "p":
                raise self._arg_error(i, f"None was passed but the parameter is `{p.ctype}`")
            return b"\0" * 8
        if isinstance(a, np.ndarray) and a.ndim > 0:
            raise self._arg_error(i, "a NumPy array lives in host memory and a kernel cannot read it; copy it to "
                                     "the device first with emu.asarray(x) (cupy.asarray(x) on a GPU)")
        if isinstance(a, np.ndarray):
            a = a[()]
        if p.kind == "p":
            raise self._arg_error(i, f"the parameter is the pointer `{p.ctype}` but a {type(a).__name__} was passed; "
                                     "pass a device array")
        if isinstance(a, (bool, np.bool_)):
            raw = bytes([1 if a else 0])
            if p.kind != "b":
                self._mismatch(i, f"a Python bool is packed as a 1-byte bool but the parameter is `{p.ctype}`; pass "
                                  f"{fix}(x)", mode)
            return raw
        if isinstance(a, np.generic):
            dt = a.dtype
            raw = a.tobytes()
            ok = ((p.kind == "f" and dt.kind == "f" and dt.itemsize == p.size)
                  or (p.kind in "iu" and dt.kind in "iu" and dt.itemsize == p.size)
                  or (p.kind == "s" and dt.itemsize == p.size))
            if not ok:
                self._mismatch(i, f"a numpy.{dt.name} is packed as {dt.itemsize} byte(s) of {dt.name} but the "
                                  f"parameter is `{p.ctype}` ({p.size} bytes); pass {fix}(x)", mode)
            return raw
        if isinstance(a, int):
            if -(2**63) <= a < 2**63:
                raw = int(a).to_bytes(8, "little", signed=True)
            elif 0 <= a < 2**64:
                raw = int(a).to_bytes(8, "little", signed=False)
            else:
                raise self._arg_error(i, f"the Python int {a} does not fit in 64 bits")
            if p.kind in "iu":
                lo, hi = ((-(2 ** (8 * p.size - 1)), 2 ** (8 * p.size - 1)) if p.kind == "i" else (0, 2 ** (8 * p.size)))
                if p.size < 8 and not lo <= a < hi:
                    self._mismatch(i, f"the Python int {a} is packed as a 64-bit integer and does not fit the "
                                      f"parameter `{p.ctype}`; pass {fix}(x) with a value in range", mode)
            else:
                self._mismatch(i, f"a Python int is packed as a 64-bit integer but the parameter is `{p.ctype}`; "
                                  f"pass {fix}(x)", mode)
            return raw
        if isinstance(a, float):
            raw = np.float64(a).tobytes()
            if not (p.kind == "f" and p.size == 8):
                self._mismatch(i, f"a Python float is packed as a 64-bit double but the parameter is "
                                  f"`{p.ctype}`; pass {fix}(x)", mode)
            return raw
        raise self._arg_error(i, f"unsupported argument type {type(a).__name__}")

    # ---- launch ------------------------------------------------------------------------------
    def __call__(self, grid: Any, block: Any, args: tuple[Any, ...], shared_mem: int = 0, stream: Any = None,
                 enable_cooperative_groups: bool = False) -> None:
        if enable_cooperative_groups:
            raise LaunchError("cooperative launches are not supported by the emulator: this kernel needs an "
                              "NVIDIA GPU (or Google Colab)")
        if graph.record(lambda: self(grid, block, args, shared_mem)):  # a graph is being captured
            return
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        self._validate(g, b, int(shared_mem))
        check = config.check_enabled()
        loaded = self.module._variant(check)
        ptrs, keep, arrays, consts = self._pack(tuple(args))
        sched, seed = config.schedule()
        spec = None if check or not consts else self.module.specializer.lookup(self.export.index, consts)
        if spec is not None:
            loaded = spec[0]
            template = self._spec_template(loaded, spec[1])
        else:
            template = self._template(check, loaded)
        lp = rt.EmuLaunch.from_buffer_copy(template)
        lp.args = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
        lp.grid[:] = g
        lp.block[:] = b
        lp.shared_mem = int(shared_mem)
        lp.schedule = config.SCHEDULES.index(sched)
        lp.seed = seed
        lp.workers = config.workers()
        lp.stack_kb = config.stack_kb()
        lp.timeout_ms = int(config.timeout_s() * 1000)
        if check:  # the device buffers of this launch: check mode reports an access outside them exactly
            nb = len(arrays)
            bd = (ctypes.c_ulonglong * max(nb, 1))(*[a.ptr for _, a in arrays])
            bn = (ctypes.c_ulonglong * max(nb, 1))(*[a.nbytes for _, a in arrays])
            blo = (ctypes.c_ulonglong * max(nb, 1))(*[a._buf.map_lo + 4096 for _, a in arrays])
            bhi = (ctypes.c_ulonglong * max(nb, 1))(*[a._buf.map_lo + a._buf.map_len - 4096 for _, a in arrays])
            keep += [bd, bn, blo, bhi]
            lp.n_bufs = nb
            lp.buf_data, lp.buf_nbytes = ctypes.cast(bd, ctypes.POINTER(ctypes.c_ulonglong)), ctypes.cast(
                bn, ctypes.POINTER(ctypes.c_ulonglong))
            lp.buf_lo, lp.buf_hi = ctypes.cast(blo, ctypes.POINTER(ctypes.c_ulonglong)), ctypes.cast(
                bhi, ctypes.POINTER(ctypes.c_ulonglong))
        res = rt.EmuResult()
        lp.result = ctypes.pointer(res)
        start = time.perf_counter()
        with _launch_lock:
            rt.lib().emu_launch(ctypes.byref(lp))
        if consts and not check and res.kind == rt.OK:
            if spec is None:
                self.module.specializer.record(self.export.index, consts, time.perf_counter() - start)
            else:
                self.module.specializer.record_specialised(self.export.index, consts, time.perf_counter() - start)
        del keep
        if res.out_text:
            text = ctypes.string_at(res.out_text, res.out_len).decode("utf-8", "replace")
            rt.lib().emu_free_text(res.out_text)
            sys.stdout.write(text)
            sys.stdout.flush()
        if res.warn_early_return:
            warnings.warn(BarrierWarning(
                f"kernel '{self.name}': thread {_s(res.warn_thread)} of block {_s(res.warn_block)} returned before "
                f"the __syncthreads() at line {res.warn_line} that the other threads of its block reached. This is "
                "undefined behaviour in CUDA that usually works on current GPUs (exited threads no longer count for "
                "the barrier); prefer keeping every thread alive up to the last __syncthreads() and guarding only "
                "the loads and stores."), stacklevel=2)
        if res.kind != rt.OK:
            raise _fault(self, loaded, res, arrays, int(shared_mem))
        if res.n_findings:
            fault = _findings(self, loaded, res, arrays)
            if fault is not None:
                raise fault
        for i, a in arrays:
            off = a._buf.canary_damage()
            if off is not None:
                a._buf.repair_canary()
                name = self.params[i].name
                raise KernelFault(
                    f"kernel '{self.name}' wrote out of bounds of argument #{i}{f' (`{name}`)' if name else ''}: "
                    f"byte offset {off - a._offset} of a {a.nbytes}-byte buffer (found after the launch, in the bytes "
                    f"{'just before the start of the array' if off < 0 else 'between the end of the array and the guard page'}"
                    "). Run with MINITORCH_EMU_CHECK=1 "
                    "(or emu.check_mode()) to learn which thread wrote it.",
                    kernel=self.name, argument=i, argument_name=name or None, offset=off - a._offset,
                    nbytes=a.nbytes, kind="out-of-bounds")

    def _template(self, check: bool, loaded: _Loaded) -> rt.EmuLaunch:
        """The fields of a launch that depend only on the kernel and the module variant, filled once."""
        t = self._templates.get(check)
        if t is None:
            t = self._templates[check] = self._fill_template(check, loaded)
        return t

    def _fill_template(self, check: bool, loaded: _Loaded) -> rt.EmuLaunch:
        t = rt.EmuLaunch()
        t.run1, t.plain, _ = loaded.entries[self.export.index]
        t.bind = loaded.bind
        # this variant's own export: a kernel split at its barriers in normal mode keeps its fibers in check mode
        ex = next((e for e in loaded.built.exports if e.index == self.export.index), self.export)
        t.use_fibers = 1 if ex.uses_sync else 0
        t.check = 1 if check else 0
        t.n_static = len(loaded.shared_vars)
        t.static_off = ctypes.cast(loaded.static_off, ctypes.POINTER(ctypes.c_longlong))
        t.static_size = ctypes.cast(loaded.static_size, ctypes.POINTER(ctypes.c_longlong))
        t.tls_lo_rel, t.tls_hi_rel = loaded.tls_range
        t.pad_lo_end_rel, t.pad_hi_start_rel = loaded.pad_windows
        return t

    def _spec_template(self, loaded: _Loaded, j: int) -> rt.EmuLaunch:
        """The launch fields of specialisation j of this kernel in the specialised variant ``loaded``."""
        if self._spec_templates[0] is not loaded:
            self._spec_templates = (loaded, {})
        t = self._spec_templates[1].get(j)
        if t is None:
            t = self._fill_template(False, loaded)
            t.run1, t.plain = loaded.spec_entries[j]
            self._spec_templates[1][j] = t
        return t

    def _validate(self, g: tuple[int, int, int], b: tuple[int, int, int], shared_mem: int) -> None:
        def bad(msg: str, err: str = "cudaErrorInvalidConfiguration") -> LaunchError:
            return LaunchError(f"{err}: invalid configuration argument: {msg} (kernel '{self.name}', grid {_s(g)}, "
                               f"block {_s(b)})", err)

        if any(x <= 0 for x in b) or any(x <= 0 for x in g):
            raise bad("every grid and block dimension must be at least 1")
        nt = b[0] * b[1] * b[2]
        if nt > MAX_THREADS:
            raise bad(f"a block of {b[0]}x{b[1]}x{b[2]} = {nt} threads exceeds the limit of {MAX_THREADS} threads "
                      "per block (CUDA_ERROR_INVALID_VALUE; too many resources requested for launch)")
        for k, (x, lim) in enumerate(zip(b, MAX_BLOCK, strict=True)):
            if x > lim:
                raise bad(f"blockDim.{'xyz'[k]} = {x} exceeds its limit of {lim}")
        for k, (x, lim) in enumerate(zip(g, MAX_GRID, strict=True)):
            if x > lim:
                raise bad(f"gridDim.{'xyz'[k]} = {x} exceeds its limit of {lim}")
        if shared_mem < 0:
            raise bad("shared_mem must not be negative", "cudaErrorInvalidValue")
        if self.static_shared > STATIC_SHARED_LIMIT:
            raise LaunchError(f"cudaErrorInvalidValue: too many resources requested for launch: kernel '{self.name}' "
                              f"uses too much shared data ({self.static_shared} bytes of __shared__ variables, "
                              f"{STATIC_SHARED_LIMIT} max)", "cudaErrorInvalidValue")
        limit = self.max_dynamic_shared_size_bytes if self._max_dyn else DEFAULT_DYNAMIC_LIMIT - self.static_shared
        if shared_mem > limit:
            raise LaunchError(
                f"cudaErrorInvalidValue: too many resources requested for launch: kernel '{self.name}' asks for "
                f"{shared_mem} bytes of dynamic shared memory plus {self.static_shared} bytes of static shared "
                f"memory; without opting in a block may use {DEFAULT_DYNAMIC_LIMIT} bytes in all (set "
                f"kernel.max_dynamic_shared_size_bytes to use up to {OPTIN_SHARED_LIMIT} bytes)",
                "cudaErrorInvalidValue")


def _t(x: Any) -> tuple[int, int, int]:
    return (int(x[0]), int(x[1]), int(x[2]))


def _s(t: Any) -> str:
    """(x,y,z) as CUDA tools print it."""
    return "(" + ",".join(str(int(v)) for v in t) + ")"


def _where(k: Kernel, res: rt.EmuResult) -> str:
    return f"thread {_s(res.thread)} block {_s(res.block)}"


def _loc(file: str, line: int) -> str:
    return f" at {file}:{line}" if file and line else ""


def _fault(k: Kernel, loaded: _Loaded, res: rt.EmuResult, arrays: list[tuple[int, DeviceArray]],
           shared_mem: int) -> KernelFault:
    file = res.file.decode(errors="replace")
    line = res.line
    if res.pc and not line:
        file, line = loaded.lines([int(res.pc)])[0]
    attrs: dict[str, Any] = {"kernel": k.name, "block": _t(res.block), "thread": _t(res.thread), "file": file or None,
                             "line": line or None}
    where = _where(k, res)
    head = f"kernel '{k.name}'"
    msg = res.msg.decode(errors="replace")
    if res.kind in (rt.SIGNAL, rt.OOB) and res.sig in (0, 11, 7):
        addr = int(res.addr)
        rw = {1: "write", 0: "read"}.get(res.is_write, "access")
        buf = find_buffer(addr)
        desc = None
        if buf is not None:
            off = addr - buf.ptr
            for i, a in arrays:
                if a._buf is buf:
                    name = k.params[i].name
                    aoff = addr - a.ptr
                    desc = (f"argument #{i}{f' (`{name}`)' if name else ''}: byte offset {aoff} of a "
                            f"{a.nbytes}-byte buffer")
                    attrs.update(argument=i, argument_name=name or None, offset=aoff, nbytes=a.nbytes)
                    break
            if desc is None:
                desc = (f"a device buffer of {buf.nbytes} bytes that is not an argument of this launch: byte offset "
                        f"{off}")
                attrs.update(offset=off, nbytes=buf.nbytes)
        elif addr < 65536:
            desc = f"address {addr:#x}: a null (or nearly null) pointer was dereferenced"
        else:
            desc = (f"address {addr:#x} is outside every device buffer (an uninitialised pointer, or an index far "
                    "out of bounds)")
        what = f"out-of-bounds {rw}" if buf is not None else f"illegal memory {rw}"
        attrs["kind"] = "out-of-bounds" if buf is not None else "illegal-address"
        return KernelFault(f"cudaErrorIllegalAddress: {head}: {what}: {desc}, {where}{_loc(file, line)}", **attrs)
    if res.kind == rt.SIGNAL:
        sig = res.sig
        if sig == 8:
            what = "integer division by zero" if res.si_code in (1, 0) else "integer arithmetic exception"
            attrs["kind"] = "division-by-zero"
            return KernelFault(f"{head}: {what}, {where}{_loc(file, line)} (a GPU would not stop here but compute "
                               "a meaningless value)", **attrs)
        if sig == 6:
            attrs["kind"] = "abort"
            return KernelFault(f"cudaErrorAssert: {head}: abort() called, {where}{_loc(file, line)}", **attrs)
        attrs["kind"] = "trap"
        return KernelFault(f"cudaErrorLaunchFailure: {head}: illegal instruction or trap (signal {sig}), "
                           f"{where}{_loc(file, line)}", **attrs)
    if res.kind == rt.ASSERT:
        attrs["kind"] = "assert"
        return KernelFault(f"cudaErrorAssert: {file}:{line}: {head}: {msg}, {where}", **attrs)
    if res.kind == rt.TRAP:
        attrs["kind"] = "abort" if "abort" in msg else "trap"
        return KernelFault(f"cudaErrorLaunchFailure: {head}: {msg}, {where}{_loc(file, line)}", **attrs)
    if res.kind == rt.BARRIER:
        attrs["kind"] = "barrier-divergence"
        return KernelFault(f"{head}, block {_s(res.block)}: {msg}{_loc(file, line)}", **attrs)
    if res.kind == rt.WARP:
        attrs["kind"] = "warp"
        return KernelFault(f"{head}: {msg}, {where}{_loc(file, line)}", **attrs)
    if res.kind == rt.STACK:
        attrs["kind"] = "stack-overflow"
        return KernelFault(f"{head}: stack overflow, {where}{_loc(file, line)}: the thread's local variables need "
                           f"more than the emulator's {config.stack_kb()} KB per thread. Large per-thread arrays "
                           "belong in shared or global memory (or raise MINITORCH_EMU_STACK_KB).", **attrs)
    if res.kind == rt.STOP:
        known = res.thread[0] != 0xFFFFFFFF
        where_stop = f", {where}{_loc(file, line)}" if known else ""
        if not known:
            attrs.update(thread=None, block=None)
        if res.extra == 1:
            raise KeyboardInterrupt(f"{head} interrupted{where_stop}")
        attrs["kind"] = "timeout"
        return KernelFault(f"{head} did not finish within {config.timeout_s():g} s (MINITORCH_EMU_TIMEOUT){where_stop}: "
                           "an endless loop? Check that every loop's counter advances (e.g. a grid-stride loop adds "
                           "blockDim.x * gridDim.x) and that no thread waits for a flag another block never sets.",
                           **attrs)
    if res.kind == rt.MISALIGNED:
        return _misaligned(k, loaded, res, arrays, attrs, head, where)
    if res.kind == rt.SHARED_OOB:
        var, off, size = loaded.nearest_var(int(res.offset))
        rw = {1: "write", 0: "read"}.get(res.is_write, "access")
        attrs.update(kind="out-of-bounds", offset=off, nbytes=size, argument_name=var)
        if res.extra == 1:  # found in a red zone when the block finished: the thread is unknown
            attrs.update(thread=None, line=None, file=None)
            return KernelFault(f"{head}: out-of-bounds write of __shared__ `{var}`: byte offset {off} of a {size}-byte "
                               f"array, in block {_s(res.block)} (found in the red zone after the block finished; run "
                               "with MINITORCH_EMU_CHECK=1 or emu.check_mode() to learn the thread and line)", **attrs)
        return KernelFault(f"{head}: out-of-bounds {rw} of __shared__ `{var}`: byte offset {off} of a {size}-byte "
                           f"array, {where}{_loc(file, line)}", **attrs)
    if res.kind == rt.DYNSMEM:
        attrs.update(kind="out-of-bounds", offset=int(res.offset), nbytes=shared_mem)
        return KernelFault(f"cudaErrorIllegalAddress: {head}: out-of-bounds access to dynamic shared memory "
                           f"(extern __shared__): byte offset {int(res.offset)} of the {shared_mem} bytes requested with "
                           f"shared_mem={shared_mem}, {where}{_loc(file, line)}", **attrs)
    attrs["kind"] = "internal"
    return KernelFault(f"{head}: {msg or 'internal emulator error'}, {where}{_loc(file, line)}. If this kernel uses "
                       "barriers through a path the emulator did not see, set MINITORCH_EMU_FIBERS=1.", **attrs)


def _misaligned(k: Kernel, loaded: _Loaded, res: rt.EmuResult, arrays: list[tuple[int, DeviceArray]],
                attrs: dict[str, Any], head: str, where: str) -> KernelFault:
    """A typed access whose address is not a multiple of its type's alignment (a GPU's "misaligned
    address"), named as an argument and element index where the address is in one."""
    file, line = attrs["file"], attrs["line"]
    ours = {p.name for p in compiler._runtime_files()}
    if not file or os.path.basename(file) in ours:  # inside a prelude helper (__ldg, ...): the caller's line
        file, line = loaded.lines([max(0, int(res.pc) - 1)])[0]
    file = os.path.basename(file) if file else file
    attrs.update(file=file or None, line=line or None, kind="misaligned")
    typ = re.sub(r"\b(const|volatile|struct|class)\s+", "", res.msg.decode(errors="replace").strip("'")) or "value"
    align = int(res.extra)
    addr = int(res.addr)
    rw = {1: "store to", 0: "load from"}.get(res.is_write, "access to")
    desc = f"address {addr:#x}"
    for i, a in arrays:
        if a.ptr - 64 <= addr < a.ptr + a.nbytes + 64:
            name = k.params[i].name
            off = addr - a.ptr
            item = a.dtype.itemsize
            elem = f"element {off // item}" if off % item == 0 else f"byte {off}"
            # (the address's own remainder: an argument that is a view may itself start off a multiple)
            start = "" if a.ptr % align == 0 else f"; the array itself starts {a.ptr % align} bytes past one"
            desc = (f"argument #{i}{f' (`{name}`)' if name else ''} at {elem} (byte offset {off}, "
                    f"{addr % align} bytes past a multiple of {align}{start})")
            attrs.update(argument=i, argument_name=name or None, offset=off, nbytes=a.nbytes)
            break
    return KernelFault(
        f"cudaErrorMisalignedAddress: {head}: misaligned address: a {align}-byte-aligned `{typ}` {rw} {desc}, "
        f"{where}{_loc(file, line)}. A vector access (float2/float4/int4/double2/half2...) needs an address that "
        f"is a multiple of its size: reinterpret_cast<const float4*>(p)[i] is legal only when p itself is "
        f"16-byte aligned (row starts of a matrix whose width is not a multiple of 4 are not); read such rows, "
        f"and the tail past the last multiple of 4, with scalar loads.", **attrs)


_KIND = {rt.F_RAW: "read-after-write", rt.F_WAR: "write-after-read", rt.F_WAW: "write-after-write",
         rt.F_UNINIT: "uninitialised-read", rt.F_ASYNC: "cp.async-in-flight"}


def _device_place(k: Kernel, f: rt.EmuFinding, arrays: list[tuple[int, DeviceArray]]) -> tuple[str, int, str]:
    """(`name[index]`, byte offset, 'argument #i') of a device-memory finding."""
    nb = int(f.buf)
    if not 0 <= nb < len(arrays):
        return "device memory", int(f.offset), "an argument"
    i, a = arrays[nb]
    name = k.params[i].name or f"argument #{i}"
    off = int(f.offset)
    item = a.dtype.itemsize
    return (f"{name}[{off // item}]" if off % item == 0 else f"{name} (byte {off})"), off, f"argument #{i}"


def _device_race_text(k: Kernel, f: rt.EmuFinding, arrays: list[tuple[int, DeviceArray]], at1: str, at2: str,
                      l1: int, l2: int) -> tuple[str, str]:
    """The report of a race on device memory and its variable name."""
    var, _, arg = _device_place(k, f, arrays)
    t1, t2 = f"thread {_s(f.t1)} of block {_s(f.block1)}", f"thread {_s(f.t2)} of block {_s(f.block)}"
    same_block = tuple(f.block1) == tuple(f.block)
    atomic = bool(f.flags & (rt.FF_ATOMIC | rt.FF_ATOMIC_LATER))
    if f.kind == rt.F_RAW:
        what = f"{t2} reads it at {at2} while {t1} wrote it at {at1}"
    elif f.kind == rt.F_WAR:
        what = f"{t2} writes it at {at2} while {t1} reads it at {at1}"
    elif f.flags & rt.FF_ATOMIC:
        what = f"{t2} writes it with a plain store at {at2} while {t1} updates it atomically at {at1}"
    elif atomic:
        what = f"{t2} updates it atomically at {at2} while {t1} writes it with a plain store at {at1}"
    elif f.flags & rt.FF_BENIGN:
        what = f"{t1} (at {at1}) and {t2} (at {at2}) both write it, the same value"
    else:
        what = f"{t1} (at {at1}) and {t2} (at {at2}) both write it"
    kind = {rt.F_RAW: "read-after-write", rt.F_WAR: "write-after-read"}.get(f.kind, "write-after-write")
    text = (f"device-memory race ({kind}) on `{var}` ({arg}): {what}, and nothing orders the two accesses")
    if same_block:
        text += (f" (no __syncthreads() between them in block {_s(f.block)})" if f.t1[:] != f.t2[:] else "")
    else:
        text += "; threads of different blocks are never ordered within a launch"
    if f.flags & rt.FF_BENIGN:
        text += (". Both stored the same value, so nothing is lost this time; still, let one thread write it "
                 "(or use atomicExch)")
    elif l1 == l2 or f.kind != rt.F_WAR and atomic or f.kind == rt.F_RAW:
        text += (". Threads that add into one element need atomicAdd (a plain `+=` is a load and a store: on a "
                 "GPU concurrent updates are lost), or give each thread its own element and combine the partial "
                 "results with a reduction" + ("" if same_block else " or a second launch"))
    else:
        text += (". Give each element a single writer, or separate the phases with __syncthreads() (within a "
                 "block) or with a second launch (across blocks)")
    if f.flags & rt.FF_FENCE:
        text += (". The kernel calls __threadfence(): a fence orders one thread's own writes as others see them, "
                 "it does not order plain accesses of different blocks (only atomics or a second launch do)")
    return text, var


def _findings(k: Kernel, loaded: _Loaded, res: rt.EmuResult,
              arrays: list[tuple[int, DeviceArray]] | None = None) -> KernelFault | None:
    """The check mode's findings as one KernelFault; None (and a RaceWarning) when all of them are
    benign same-value writes to device memory."""
    arrays = arrays or []
    items = [res.findings[i] for i in range(res.n_findings)]
    pcs: list[int] = []
    for f in items:
        pcs += [max(0, int(f.pc1) - 1) if f.pc1 else 0, max(0, int(f.pc2) - 1)]
    lines = loaded.lines(pcs)
    out, found = [], []
    dyn_name = None
    info = k.module.info
    if info.dyn_shared_names:
        dyn_name = info.dyn_shared_names[0]
    for n, f in enumerate(items):
        (f1, l1), (f2, l2) = lines[2 * n], lines[2 * n + 1]
        if f.space == 2:
            text, var = _device_race_text(k, f, arrays, f"{f1}:{l1}" if l1 else "?", f"{f2}:{l2}" if l2 else "?",
                                          l1, l2)
            out.append(text)
            found.append({"kind": _KIND.get(f.kind, "?"), "variable": var, "offset": int(f.offset),
                          "thread": _t(f.t2), "other_thread": _t(f.t1), "block": _t(f.block),
                          "other_block": _t(f.block1), "file": f2, "line": l2, "other_line": l1,
                          "space": "device", "benign": bool(f.flags & rt.FF_BENIGN)})
            continue
        if f.space == 0:
            var, off = loaded.var_at(int(f.offset))
        else:
            var, off = (dyn_name or "extern __shared__ memory"), int(f.offset)
        t1, t2, b = _s(f.t1), _s(f.t2), _s(f.block)
        kind = _KIND.get(f.kind, "?")
        at2 = f"{f2}:{l2}" if l2 else "?"
        at1 = f"{f1}:{l1}" if l1 else "?"
        if f.kind == rt.F_UNINIT:
            text = (f"uninitialised shared memory read: thread {t2} of block {b} reads `{var}` (byte {off}) at {at2}, "
                    "but no thread of the block has written it since the block started (shared memory starts "
                    "with garbage on a GPU)")
        elif f.kind == rt.F_ASYNC:
            who = "its own" if _s(f.t1) == _s(f.t2) else f"thread {t1}'s"
            text = (f"cp.async race on `{var}` (byte {off}) in block {b}: thread {t2} accesses it at {at2} while "
                    f"{who} cp.async at {at1} may still be writing it: the copy lands only at the issuing thread's "
                    "cp.async.wait_group / wait_all (__pipeline_wait_prior) that covers its commit group; wait "
                    "for it, then __syncthreads() before other threads read the data")
        elif f.kind == rt.F_RAW:
            text = (f"shared-memory race (read-after-write) on `{var}` (byte {off}) in block {b}: thread {t2} reads it "
                    f"at {at2} after thread {t1} wrote it at {at1}, with no __syncthreads() in between: add "
                    f"__syncthreads() between line {l1} and line {l2}")
        elif f.kind == rt.F_WAR:
            text = (f"shared-memory race (write-after-read) on `{var}` (byte {off}) in block {b}: thread {t2} "
                    f"overwrites it at {at2} while thread {t1} reads it at {at1} in the same barrier interval: a "
                    f"__syncthreads() is missing between the read at line {l1} and the write at line {l2}")
        else:
            text = (f"shared-memory race (write-after-write) on `{var}` (byte {off}) in block {b}: threads {t1} (at "
                    f"{at1}) and {t2} (at {at2}) both write it with no __syncthreads() in between")
        if f.same_warp and f.vol and f.kind != rt.F_UNINIT:
            text += (". Both threads are in the same warp: this is warp-synchronous code (a legacy `volatile` "
                     "reduction) that relies on the lanes of a warp running in lockstep, which Volta and later GPUs "
                     "no longer guarantee: put __syncwarp() between the steps, or use __shfl_down_sync()")
        out.append(text)
        found.append({"kind": kind, "variable": var, "offset": off, "thread": _t(f.t2), "other_thread": _t(f.t1),
                      "block": _t(f.block), "file": f2, "line": l2, "other_line": l1})
    if all(fd.get("benign") for fd in found):
        warnings.warn(RaceWarning(f"check mode: kernel '{k.name}': " + "; ".join(out[:4])), stacklevel=3)
        return None
    seen: set[str] = set()  # one report per text (an atomicAdd's load and its compare-and-swap, ...)
    keep = [n for n, fd in enumerate(found) if not fd.get("benign") and not (out[n] in seen or seen.add(out[n]))]
    # a shared-memory race first: a missing __syncthreads() also lets a thread read a tile no thread has stored yet
    # (the second copy of a double-buffered tile), and the race names the barrier to add, the uninitialised read does not
    keep.sort(key=lambda n: found[n]["kind"] == "uninitialised-read")
    out, found = [out[n] for n in keep], [found[n] for n in keep]
    items = [items[n] for n in keep]
    total = int(res.n_findings_total)
    msg = (f"check mode found {len(items)} problem(s) in kernel '{k.name}'"
           + (f" ({total} racy or uninitialised accesses in all)" if total > len(items) else "") + ":\n  - "
           + "\n  - ".join(out[:12]))
    first = found[0]
    kind = "device-race" if first.get("space") == "device" else first["kind"]
    return KernelFault(msg, kernel=k.name, block=first["block"], thread=first["thread"], file=first["file"],
                       line=first["line"], kind=kind, findings=found)
