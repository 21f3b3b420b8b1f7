"""Compiling CUDA C for the CPU: source scanning, code generation, the compile cache.

The learner's source is compiled *unmodified* (two exceptions, each rewritten on the same line:
``extern __shared__`` declarations, and inline PTX ``asm`` statements, see ``inline_ptx.py``) with
``runtime/prelude.h`` force-included, so compiler messages carry the learner's file name and line numbers. Launch thunks are generated in a wrapper file that
``#include``s the source; C++ template deduction in the thunks gives each kernel's parameter types.
On x86-64 the wrapper is compiled to assembly first, where every 64-bit integer division gets a
32-bit fast path (``fastdiv.py``), then assembled.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import fastdiv, nancanon
from .inline_ptx import PtxError, rewrite_inline_ptx
from .split import coroutines, match_close, split_enabled, split_kernels, split_spec_struct

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
INCLUDE_DIR = RUNTIME_DIR / "include"
_lock = threading.Lock()


class CompileError(Exception):
    """The CUDA C source did not compile. The message is the compiler's output, with the
    learner's file name and line numbers."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log or message


# ---------------------------------------------------------------------------------------------
# Compiler and cache
# ---------------------------------------------------------------------------------------------
_cxx_cache: dict[str, tuple[str, str]] = {}


def compiler() -> tuple[str, str]:
    """(path, version line) of the C++ compiler: $CXX, else g++, else clang++."""
    if "cxx" in _cxx_cache:
        return _cxx_cache["cxx"]
    for cand in [os.environ.get("CXX"), "g++", "clang++", "c++"]:
        if cand and shutil.which(cand):
            path = shutil.which(cand)
            assert path is not None
            out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            _cxx_cache["cxx"] = (path, out.splitlines()[0] if out else cand)
            return _cxx_cache["cxx"]
    raise CompileError("no C++ compiler found: the emulator needs g++ or clang++ (C++17). "
                       "Install one (e.g. `apt install g++`) or set CXX.")


def cache_dir() -> Path:
    """$MINITORCH_EMU_CACHE, else ~/.cache/minitorch/emu, else a temporary directory."""
    cands = []
    if os.environ.get("MINITORCH_EMU_CACHE"):
        cands.append(Path(os.environ["MINITORCH_EMU_CACHE"]))
    cands.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "minitorch" / "emu")
    cands.append(Path(tempfile.gettempdir()) / f"minitorch-emu-{os.getuid()}")
    for d in cands:
        try:
            d.mkdir(parents=True, exist_ok=True)
            probe = d / f".probe-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
            return d
        except OSError:
            continue
    raise CompileError("no writable directory for the emulator's compile cache; set MINITORCH_EMU_CACHE")


_swept: set[Path] = set()


def sweep_build_dirs(cdir: Path) -> int:
    """Remove the build directories (``build/<key>-<pid>[-<thread>]``) of processes that no longer run: a
    process that ended while compiling (a background specialisation, an interrupted kernel) leaves its directory
    behind. Once per cache directory and process; returns how many were removed."""
    if cdir in _swept:
        return 0
    _swept.add(cdir)
    removed = 0
    for d in (cdir / "build").glob("*-*"):
        parts = d.name.split("-")
        if not parts[1].isdigit() or int(parts[1]) == os.getpid():
            continue
        try:
            os.kill(int(parts[1]), 0)
            continue  # still running (or another user's: PermissionError below)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
        except (PermissionError, OverflowError, OSError):
            continue
    return removed


def _runtime_files() -> list[Path]:
    files = sorted(p for p in RUNTIME_DIR.rglob("*") if p.is_file() and p.suffix in (".h", ".cpp", ""))
    return [p for p in files if "__pycache__" not in p.parts]


_runtime_digest: dict[str, str] = {}


def runtime_digest() -> str:
    """Hash of every runtime file, of this file and of the compiler version (part of every cache key)."""
    if "d" not in _runtime_digest:
        h = hashlib.sha256(compiler()[1].encode() + _runtime_defines().__repr__().encode())
        for p in _runtime_files():
            h.update(str(p.relative_to(RUNTIME_DIR)).encode())
            h.update(p.read_bytes())
        h.update(Path(__file__).read_bytes())  # how modules are built is part of the key too
        h.update((Path(__file__).parent / "inline_ptx.py").read_bytes())
        h.update((Path(__file__).parent / "fastdiv.py").read_bytes())
        h.update((Path(__file__).parent / "nancanon.py").read_bytes())
        h.update((Path(__file__).parent / "split.py").read_bytes())
        _runtime_digest["d"] = h.hexdigest()
    return _runtime_digest["d"]


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True)


def _runtime_defines() -> list[str]:
    # MINITORCH_EMU_UCONTEXT=1 builds the portable ucontext context switch instead of the
    # hand-written one (for testing the fallback; other architectures get it automatically).
    return ["-DEMU_FORCE_UCONTEXT"] if os.environ.get("MINITORCH_EMU_UCONTEXT", "") not in ("", "0") else []


PAD_LO, PAD_HI = 4096, 16384
# Every typed load and store tests its address against the type's alignment (a float4 needs 16 bytes)
# and calls the runtime's __ubsan_handle_type_mismatch_v1_abort where a GPU faults with "misaligned
# address": one test and a not-taken branch per access. Outside check mode, the functions that cannot make
# a wide access go without (without_scalar_alignment_checks). GCC inlines a function into another only if
# both have the same undefined-behaviour sanitizers on, so -fsanitize=unreachable (nothing to check in
# kernels: the learner does not write __builtin_unreachable) keeps that true of a function whose alignment
# check is off, and the runtime's min/max, atomics and the kernels themselves (into their launch thunks)
# inline as before.
# (g++ also gets -fno-ipa-icf: identical instantiations such as load<float2> and load<int2> must not be
# merged, or a fault would name the other one's type.)
ALIGNMENT_CHECK = ["-fsanitize=alignment,unreachable", "-fno-sanitize-recover=alignment"]


def build_pads() -> tuple[Path, Path]:
    """The two thread-local red-zone objects linked around every module (runtime/tls_pad.cpp)."""
    d = runtime_digest()[:16]
    out = (cache_dir() / f"emu_pad_lo-{d}.o", cache_dir() / f"emu_pad_hi-{d}.o")
    if all(p.exists() for p in out):
        return out
    with _lock:
        for p, name, size in ((out[0], "__emu_pad_lo", PAD_LO), (out[1], "__emu_pad_hi", PAD_HI)):
            if p.exists():
                continue
            tmp = p.with_suffix(f".{os.getpid()}.tmp")
            r = _run([compiler()[0], "-std=c++17", "-O2", "-fPIC", "-c", f"-DEMU_PAD_NAME={name}",
                      f"-DEMU_PAD_SIZE={size}", str(RUNTIME_DIR / "tls_pad.cpp"), "-o", str(tmp)], cache_dir())
            if r.returncode != 0:
                raise CompileError("building the emulator runtime failed:\n" + r.stdout + r.stderr)
            os.replace(tmp, p)
    return out


def build_runtime() -> Path:
    """The runtime shared library, compiled once per content hash."""
    out = cache_dir() / f"libminitorch_emu_rt-{runtime_digest()[:16]}.so"
    if out.exists():
        return out
    with _lock:
        if out.exists():
            return out
        cxx = compiler()[0]
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        # -fcoroutines: emu_rt_split_block resumes the coroutines of split kernels (split.py)
        coro = ["-fcoroutines"] if coroutines(compiler()[1]) else []
        cmd = [cxx, "-std=c++17", "-O2", "-g", "-fPIC", "-shared", "-pthread", "-U_FORTIFY_SOURCE", *coro,
               "-fno-stack-protector", *_runtime_defines(), "-I", str(RUNTIME_DIR), str(RUNTIME_DIR / "runtime.cpp"),
               "-o", str(tmp)]
        r = _run(cmd, cache_dir())
        if r.returncode != 0:
            raise CompileError("building the emulator runtime failed:\n" + r.stdout + r.stderr)
        os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------------------------
# Source scanning
# ---------------------------------------------------------------------------------------------
def strip_source(src: str) -> str:
    """The source with comments and string/char literal contents replaced by spaces (newlines
    kept, so offsets and line numbers stay valid). ``"C"`` is kept for ``extern "C"``."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            if not (c == '"' and src[i:j + 1] == '"C"'):
                for k in range(i + 1, min(j, n)):
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def line_of(src: str, pos: int) -> tuple[int, int]:
    line = src.count("\n", 0, pos) + 1
    col = pos - (src.rfind("\n", 0, pos) + 1) + 1
    return line, col


@dataclass
class FuncDef:
    name: str
    params: str
    body: str
    start: int
    extern_c: bool
    template: bool
    is_global: bool
    param_names: list[str] = field(default_factory=list)


def _extern_c_blocks(s: str) -> list[tuple[int, int]]:
    blocks = []
    for m in re.finditer(r'extern\s*"C"\s*\{', s):
        b = m.end() - 1
        blocks.append((b, match_close(s, b, "{", "}")))
    return blocks


def _param_names(params: str) -> list[str]:
    names = []
    depth, cur = 0, ""
    parts = []
    for ch in params:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    for p in parts:
        p = re.sub(r"=.*$", "", p.strip())
        ids = re.findall(r"[A-Za-z_]\w*", p)
        ids = [i for i in ids if i not in ("const", "volatile", "__restrict__", "__restrict", "restrict")]
        names.append(ids[-1] if len(ids) >= 2 and not p.rstrip().endswith("*") else "")
    return names


def find_functions(s: str, qualifier: str) -> list[FuncDef]:
    """Definitions introduced by ``qualifier`` (__global__ or __device__) in stripped source."""
    blocks = _extern_c_blocks(s)
    out = []
    for m in re.finditer(rf"\b{qualifier}\b", s):
        j = m.end()
        # skip to the parameter list: the first '(' not belonging to __launch_bounds__/attributes
        name = None
        while j < len(s):
            lb = re.match(r"\s*(__launch_bounds__|__attribute__|__align__|alignas)\s*\(", s[j:])
            if lb:
                j = match_close(s, j + lb.end() - 1, "(", ")")
                continue
            if s[j] in ";{}=":
                break
            if s[j] == "(":
                ids = re.findall(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*$", s[m.end():j])
                name = ids[-1] if ids else None
                break
            j += 1
        if not name or j >= len(s) or s[j] != "(":
            continue
        pe = match_close(s, j, "(", ")")
        params = s[j + 1:pe - 1]
        k = pe
        while k < len(s) and s[k] in " \t\r\n":
            k += 1
        # trailing qualifiers such as `const` or `noexcept` are not expected on kernels
        if k >= len(s) or s[k] != "{":
            continue
        be = match_close(s, k, "{", "}")
        prefix_start = max(s.rfind(";", 0, m.start()), s.rfind("}", 0, m.start()), s.rfind("{", 0, m.start()))
        prefix = s[prefix_start + 1:m.start()]
        tail = s[m.end():j]
        extern_c = bool(re.search(r'extern\s*"C"', prefix + tail)) or any(a < m.start() < b for a, b in blocks)
        template = bool(re.search(r"\btemplate\s*<", prefix))
        out.append(FuncDef(name, params, s[k:be], m.start(), extern_c, template, qualifier == "__global__",
                           _param_names(params)))
    return out


SYNC_TOKENS = {
    "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or", "__syncwarp",
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
    "__all_sync", "__match_any_sync", "__match_all_sync", "__activemask", "this_thread_block", "tiled_partition",
    "sync", "mma_sync", "__emu_ldmatrix", "__emu_mma_m16n8k16_f32", "__emu_mma_m16n8k16_f16",
}

_UNSUPPORTED = [
    (r"\bcuda\s*::\s*memcpy_async\b|#\s*include\s*<cuda/pipeline>",
     "`cuda::memcpy_async` / `cuda::pipeline` (libcu++ asynchronous copies; the emulator runs `cp.async` and "
     "the `__pipeline_*` primitives)"),
    (r"#\s*include\s*<cuda_awbarrier\.h>|\b__mbarrier\w*", "asynchronous barriers (`cuda_awbarrier.h`, mbarrier)"),
    (r"\bthis_grid\s*\(|\bgrid_group\b|\bcudaLaunchCooperativeKernel\b", "grid-wide cooperative groups"),
    (r"<<<", "dynamic parallelism (a kernel launch inside device code)"),
    (r"\btex[123]D\w*\s*[<(]|\btex1Dfetch\b|\btexture\s*<|\bcudaTextureObject_t\b|\bsurf[123]D\w*\b|"
     r"\bcudaSurfaceObject_t\b", "textures and surfaces"),
]


@dataclass
class SourceInfo:
    text: str                      # the source to compile (extern __shared__ rewritten)
    kernels: dict[str, FuncDef]    # extern "C" __global__ definitions by name
    templates: dict[str, FuncDef]  # every __global__ definition by base name (for name_expressions)
    sync_names: set[str]
    dyn_shared_names: list[str]
    all_sync: bool                 # could not scan everything: every kernel uses fibers
    split_names: set[str] = field(default_factory=set)  # kernels compiled split at their barriers (split.py)


def check_unsupported(src: str, stripped: str, filename: str) -> None:
    msgs = []
    for pat, what in _UNSUPPORTED:
        for m in re.finditer(pat, stripped):
            line, col = line_of(src, m.start())
            msgs.append(f"{filename}:{line}:{col}: error: {what} is not supported by the CUDA C emulator: "
                        "this kernel needs an NVIDIA GPU (or Google Colab with a GPU runtime)")
            break
    if msgs:
        raise CompileError("\n".join(msgs))


def _rewrite_extern_shared(src: str, stripped: str) -> tuple[str, list[str]]:
    pat = re.compile(r"\bextern\s+(?:__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*)?)|"
                     r"((?:__align__\s*\(\s*\d+\s*\)\s*)?)__shared__\s+)"
                     r"(?P<type>[^;\[\]{}()]*?(?:__align__\s*\(\s*\d+\s*\))?[^;\[\]{}()]*?)\s*\b(?P<name>[A-Za-z_]\w*)"
                     r"\s*\[\s*\]\s*;")
    # brace kinds: does a position lie inside a function body?
    out, last, names = [], 0, []
    for m in pat.finditer(stripped):
        typ = re.sub(r"__align__\s*\(\s*\d+\s*\)", "", m.group("type")).strip()
        name = m.group("name")
        names.append(name)
        depth_fn = _in_function(stripped, m.start())
        nl = src.count("\n", m.start(), m.end())
        if depth_fn:
            rep = f"{typ}* const {name} = ({typ}*)__emu_dyn_smem();"
        else:
            rep = f"static __emu_dynarr<{typ}> {name};"
        out.append(src[last:m.start()])
        out.append(rep + "\n" * nl)
        last = m.end()
    out.append(src[last:])
    return "".join(out), names


def _in_function(s: str, pos: int) -> bool:
    stack: list[bool] = []
    for m in re.finditer(r"[{}]", s[:pos]):
        if m.group() == "{":
            before = s[max(0, m.start() - 200):m.start()]
            is_scope = bool(re.search(r'(namespace(\s+\w+)?|extern\s*"C"|(struct|class|union)\s+\w+[^;{}()]*)\s*$',
                                      before))
            stack.append(not is_scope)
        elif stack:
            stack.pop()
    return any(stack)


# Names whose accesses a GPU makes as one wide load or store, which must be aligned: CUDA's vector types, the
# half and bfloat16 pairs, wmma fragments, and types given an alignment of their own.
_WIDE = re.compile(r"\b(u?(char|short|int|long|longlong)[1-4]|(float|double)[1-4]|__half2|half2|"
                   r"__nv_bfloat162|nv_bfloat162|wmma|__align__|alignas|aligned)\b")
_NO_ALIGNMENT_CHECK = '__attribute__((no_sanitize("alignment"))) '


def without_scalar_alignment_checks(src: str, stripped: str) -> str:
    """The source with ``no_sanitize("alignment")`` before each function (kernel or device function) that cannot
    make a wide access: no vector type, half pair, wmma or alignment in its parameters or body, none in a function
    of the source it calls, and not a template with a type parameter (``load<float4>``). A misaligned vector access
    faults on a GPU, and so on the emulator in every mode; a scalar's alignment check is one test and branch an
    access, but its calls also keep GCC 12 from holding a thread's small arrays (``float acc[4]``) in registers
    (benchmarks/results/emu_speed_experiments-*.json, series 9 and 11). Check mode keeps every check. Nothing is
    exempt where a wide name appears outside the functions (a typedef, a struct or a macro could carry it into
    any of them) or the source includes a local file. Line numbers do not change."""
    if re.search(r'^[ \t]*#[ \t]*include[ \t]*"', stripped, re.M):
        return src
    funcs = find_functions(stripped, "__global__") + find_functions(stripped, "__device__")
    outside, last = [], 0
    for f in sorted(funcs, key=lambda f: f.start):
        if f.start < last:
            continue
        outside.append(stripped[last:f.start])
        last = stripped.find(f.body, f.start) + len(f.body)
    outside.append(stripped[last:])
    if _WIDE.search("".join(outside)):
        return src
    wide = {f.name for f in funcs if _WIDE.search(f.params + f.body)}
    changed = True
    while changed:  # a caller of a function that makes wide accesses may get its pointers
        changed = False
        for f in funcs:
            if f.name not in wide and set(re.findall(r"\w+", f.params + f.body)) & wide:
                wide.add(f.name)
                changed = True
    starts = set()
    for f in funcs:
        prefix_start = max(stripped.rfind(";", 0, f.start), stripped.rfind("}", 0, f.start),
                           stripped.rfind("{", 0, f.start))
        header = re.search(r"\btemplate\s*<([^;{}]*)>", stripped[prefix_start + 1:f.start])
        if f.name in wide or (header and re.search(r"\b(class|typename)\b", header.group(1))):
            continue
        starts.add(f.start)
    for at in sorted(starts, reverse=True):
        src = src[:at] + _NO_ALIGNMENT_CHECK + src[at:]
    return src


def scan_source(src: str, filename: str, scalar_alignment_checks: bool = True, split: bool = False) -> SourceInfo:
    """What the emulator needs to know of a source, and the text to compile. ``split``: kernels whose only
    synchronisation is ``__syncthreads()`` in their own body are rewritten as coroutines (split.py)."""
    stripped = strip_source(src)
    check_unsupported(src, stripped, filename)
    try:
        src = rewrite_inline_ptx(src, stripped, filename)
    except PtxError as e:
        raise CompileError(str(e)) from None
    stripped = strip_source(src)
    if not scalar_alignment_checks:
        src = without_scalar_alignment_checks(src, stripped)
        stripped = strip_source(src)
    globals_ = find_functions(stripped, "__global__")
    devices = find_functions(stripped, "__device__")
    kernels = {f.name: f for f in globals_ if f.extern_c and not f.template}
    templates: dict[str, FuncDef] = {}
    for f in globals_:
        templates.setdefault(f.name, f)
    # Which functions (transitively) use a barrier or warp primitive?
    sync = set(SYNC_TOKENS)
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(.*)$", stripped, re.M):
        if set(re.findall(r"\w+", m.group(2))) & sync:
            sync.add(m.group(1))
    changed = True
    while changed:
        changed = False
        for f in devices:
            if f.name not in sync and set(re.findall(r"\w+", f.body)) & sync:
                sync.add(f.name)
                changed = True
    sync_names = {f.name for f in globals_ if set(re.findall(r"\w+", f.body)) & sync}
    local_includes = re.search(r'^[ \t]*#[ \t]*include[ \t]*"', src, re.M) is not None
    split_names: set[str] = set()
    if split and not local_includes:
        src, split_names = split_kernels(src, stripped, [kernels[n] for n in sorted(sync_names & set(kernels))],
                                         sync)
        stripped = strip_source(src)
    text, dyn_names = _rewrite_extern_shared(src, stripped)
    return SourceInfo(text, kernels, templates, sync_names, dyn_names, local_includes, split_names)


# ---------------------------------------------------------------------------------------------
# Code generation and compilation
# ---------------------------------------------------------------------------------------------
@dataclass
class Export:
    index: int
    name: str          # as the learner asks for it: "fill" or "scale<float>"
    expr: str          # C++ expression of the function: "fill" or "scale<float>"
    base: str          # base function name
    uses_sync: bool    # runs on fibers (a barrier or warp primitive, not split)
    split: bool = False  # split at its barriers: each thread a coroutine (split.py)


@dataclass
class Built:
    so_path: Path
    exports: list[Export]
    tls_symbols: list[dict]   # {"name", "offset", "size"} of TLS symbols (static __shared__ + anchor)
    check: bool
    filename: str
    source: str
    compile_seconds: float
    cached: bool
    specs: tuple[Spec, ...] = ()  # thunks __emu_k{index}s{j}_run1/_plain for specs[j]


# One launch's integer arguments made constants: (export index, ((parameter index, size in bytes, value), ...)).
Spec = tuple[int, tuple[tuple[int, int, int], ...]]


def _spec_thunks(k: str, ex_index: int, j: int, consts: tuple[tuple[int, int, int], ...], vis: str) -> list[str]:
    """The generated lines of specialisation j of export ex_index (K the kernel's __emu_gen::K<...>)."""
    v = f"__emu_v{ex_index}s{j}"
    cases = "".join(f"if constexpr (I == {i}) return (T)0x{val & ((1 << (8 * size)) - 1):x}ULL; else "
                    for i, size, val in consts)
    return [f"struct {v} {{ template <size_t I, class T> static inline __attribute__((always_inline)) T get(void* p) "
            f"{{ (void)p; {cases}return __emu_gen::arg<T>(p); }} }};",
            f"{vis} void __emu_k{ex_index}s{j}_run1(void** __emu_a) {{ {k}::run1v<{v}>(__emu_a); }}",
            f"{vis} void __emu_k{ex_index}s{j}_plain(void** __emu_a, EmuCtx* __emu_c, const unsigned* __emu_o)"
            f" {{ {k}::plainv<{v}>(__emu_a, __emu_c, __emu_o); }}"]


def _normalize_expr(e: str) -> str:
    return re.sub(r"\s+", "", e)


def _translate_messages(log: str, filename: str, build: Path) -> str:
    lines = []
    for ln in log.splitlines():
        if ln.startswith("In file included from __emu_tu.cpp") or re.match(r"\s+from __emu_tu\.cpp", ln):
            continue
        ln = ln.replace(str(build) + os.sep, "")
        ln = ln.replace(str(RUNTIME_DIR) + os.sep, "<emu>/")
        lines.append(ln)
    return "\n".join(lines)


def _readelf_tls(so: Path) -> list[dict]:
    r = subprocess.run(["readelf", "-sW", str(so)], capture_output=True, text=True)
    syms = {}
    for ln in r.stdout.splitlines():
        parts = ln.split()
        if len(parts) >= 8 and parts[3] == "TLS" and parts[6] != "UND":
            syms[parts[7].split("@")[0]] = (int(parts[1], 16), int(parts[2], 0))
    names = list(syms)
    dem = names
    if names and shutil.which("c++filt"):
        p = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        if p.returncode == 0 and len(p.stdout.splitlines()) == len(names):
            dem = p.stdout.splitlines()
    dem = [_coroutine_local(d) for d in dem]
    return [{"mangled": n, "name": d, "offset": syms[n][0], "size": syms[n][1]} for n, d in zip(names, dem, strict=True)]


def _coroutine_local(name: str) -> str:
    """A ``__shared__`` variable of a kernel split at its barriers (a static local of the coroutine's body, which
    c++filt leaves mangled) as ``kernel<instantiation>::variable``, the form of any template kernel's variable."""
    m = re.match(r"_ZZ(\d+)", name)
    if not m or ".Frame.actor" not in name:
        return name
    fname = name[m.end():m.end() + int(m.group(1))]
    tail = name[name.index(".Frame.actor") + len(".Frame.actor"):]
    v = re.match(r"E(\d+)", tail)
    if not v:
        return name
    var = tail[v.end():v.end() + int(v.group(1))]
    inst = name[m.end() + int(m.group(1)):name.index(".Frame.actor")]
    return f"{fname}<{inst}>::{var}"


def build_module(src: str, options: tuple[str, ...], name_expressions: tuple[str, ...] | None,
                 filename: str, check: bool, specs: tuple[Spec, ...] = ()) -> Built:
    import time

    t0 = time.perf_counter()
    filename = os.path.basename(filename) or "kernel.cu"
    cxx, version = compiler()
    fibers_env = os.environ.get("MINITORCH_EMU_FIBERS", "") not in ("", "0")
    split = not check and not fibers_env and split_enabled(version)
    info = scan_source(src, filename, scalar_alignment_checks=check, split=split)
    flags = _translate_options(options)
    exprs = list(name_expressions or ())
    key_src = json.dumps({"src": src, "file": filename, "flags": flags, "exprs": exprs, "check": check,
                          "rt": runtime_digest(), "fibers": os.environ.get("MINITORCH_EMU_FIBERS", ""),
                          "nan": canonical_nan(check), "split": split,
                          **({"specs": [list(sp) for sp in specs]} if specs else {})})
    key = hashlib.sha256(key_src.encode()).hexdigest()[:32]
    cdir = cache_dir()
    so = cdir / f"mod-{key}.so"
    meta = cdir / f"mod-{key}.json"
    force_fibers = info.all_sync or fibers_env

    def make_exports(split_names: set[str]) -> list[Export]:
        out: list[Export] = []
        for name in info.kernels:
            sp = name in split_names
            out.append(Export(len(out), name, name, name, not sp and (force_fibers or name in info.sync_names), sp))
        for e in exprs:
            base = re.match(r"\s*(?:::)?([A-Za-z_][\w:]*)", e)
            b = base.group(1).split("::")[-1] if base else e
            sp = b in split_names
            out.append(Export(len(out), _normalize_expr(e), e, b, not sp and (force_fibers or b in info.sync_names),
                              sp))
        return out

    exports = make_exports(info.split_names)

    if so.exists() and meta.exists():
        try:
            m = json.loads(meta.read_text())
            kept = set(m["exports"])
            exports = [ex for ex in make_exports(set(m.get("split", []))) if ex.name in kept]
            return Built(so, exports, m["tls"], check, filename, src, time.perf_counter() - t0, True, specs)
        except (OSError, ValueError, KeyError):
            pass

    # per process and thread (specialize.py compiles in background threads): concurrent compiles never collide
    build = cdir / "build" / f"{key}-{os.getpid()}-{threading.get_ident()}"
    sweep_build_dirs(cdir)
    build.mkdir(parents=True, exist_ok=True)
    (build / filename).write_text(info.text)
    # -fpeel-loops lets -O2 unroll a loop of known trip count completely: a thread's `float acc[4]`
    # updated in `for (j = 0; j < 4; ++j)` then lives in registers, not on the stack (2-3x on the
    # course's tiled kernels, little compile time). -O3 is no faster here and compiles slower.
    base_flags = [cxx, "-std=c++17", "-O2", "-fpeel-loops", "-g1", "-fPIC", "-fno-strict-aliasing", "-fno-math-errno",
                  "-fstack-clash-protection", "-fno-builtin-printf", "-fno-builtin-abort", "-U_FORTIFY_SOURCE",
                  "-fvisibility=hidden", "-fno-stack-protector", "-Wno-unused-function", "-Wno-unknown-pragmas",
                  *ALIGNMENT_CHECK, *([] if "clang" in version.lower() else ["-fno-ipa-icf"]),
                  "-I", str(RUNTIME_DIR), "-I", str(INCLUDE_DIR), "-include", str(RUNTIME_DIR / "prelude.h"),
                  *flags]
    tmp = build / f"mod.{os.getpid()}.so"
    pad_lo, pad_hi = (str(p) for p in build_pads())

    def compile_with(exs: list[Export]) -> tuple[subprocess.CompletedProcess[str], dict[int, int]]:
        gen = [f'#include "{filename}"', ""]
        line_owner: dict[int, int] = {}
        for ex in exs:
            expr = ex.expr.strip()
            expr = expr if expr.startswith("::") else "::" + expr

            def k_of(v: str, expr: str = expr, ex: Export = ex) -> str:
                # a split kernel is a template over its parameters' constants (split.py)
                return f"__emu_gen::K<&{expr}<{v}>>" if ex.split else f"__emu_gen::K<&{expr}>"

            k = k_of("__emu_split::id")
            vis = 'extern "C" __attribute__((visibility("default")))'
            for ln in (f"{vis} void __emu_k{ex.index}_run1(void** __emu_a) {{ {k}::run1(__emu_a); }}",
                       f"{vis} void __emu_k{ex.index}_plain(void** __emu_a, EmuCtx* __emu_c, const unsigned* __emu_o)"
                       f" {{ {k}::plain(__emu_a, __emu_c, __emu_o); }}",
                       f"{vis} const char* __emu_k{ex.index}_desc() {{ return {k}::desc(); }}"):
                gen.append(ln)
                line_owner[len(gen)] = ex.index
            for j, (index, consts) in enumerate(specs):
                if index != ex.index:
                    continue
                if ex.split:
                    c = f"__emu_c{index}s{j}"
                    gen += [split_spec_struct(c, consts),
                            f"{vis} void __emu_k{index}s{j}_run1(void** __emu_a) {{ {k_of(c)}::run1(__emu_a); }}",
                            f"{vis} void __emu_k{index}s{j}_plain(void** __emu_a, EmuCtx* __emu_c, "
                            f"const unsigned* __emu_o) {{ {k_of(c)}::plain(__emu_a, __emu_c, __emu_o); }}"]
                else:
                    gen += _spec_thunks(k, index, j, consts, vis)
        (build / "__emu_tu.cpp").write_text("\n".join(gen) + "\n")
        if check:
            if "clang" in version.lower():
                tsan = ["-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=false",
                        "-mllvm", "-tsan-distinguish-volatile=true"]
            else:
                tsan = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                        "--param=tsan-distinguish-volatile=1"]
        else:
            tsan = []
        # Compiled, then linked without -fsanitize: the runtime provides the sanitizer hooks, and the
        # driver would otherwise link libubsan / libtsan. Link order = TLS order: red zone, the
        # learner's __shared__ variables, red zone.
        coro = ["-fcoroutines"] if any(ex.split for ex in exs) else []
        r = _compile_object([*base_flags, *coro, *tsan], build, canonical_nan(check))
        if r.returncode == 0:
            r = _run([cxx, "-shared", "-Wl,-Bsymbolic", pad_lo, "mod.o", pad_hi, "-o", str(tmp)], build)
        return r, line_owner

    r, owner = compile_with(exports)
    if r.returncode != 0 and info.split_names:
        # The split rewrite must never be the reason a kernel does not compile: without it, the learner
        # sees the compiler's own messages about their own code (if there are any).
        info = scan_source(src, filename, scalar_alignment_checks=check, split=False)
        (build / filename).write_text(info.text)
        exports = make_exports(set())
        r, owner = compile_with(exports)
    if r.returncode != 0:
        log = r.stdout + r.stderr
        bad_lines = {int(m.group(1)) for m in re.finditer(r"^__emu_tu\.cpp:(\d+):\d+: error", log, re.M)}
        learner_errors = re.search(r"^(?!__emu_tu\.cpp)[^\s:][^:]*:\d+:\d+: (fatal )?error", log, re.M)
        bad = {owner[ln] for ln in bad_lines if ln in owner}
        if bad and not learner_errors:
            named = [ex for ex in exports if ex.index in bad and ex.name in {_normalize_expr(e) for e in exprs}]
            if named:
                raise CompileError(f"{filename}: name_expressions {[ex.expr for ex in named]} do not name kernels "
                                   f"that can be instantiated from this source:\n"
                                   + _translate_messages(log, filename, build), log)
            # A kernel the source scan found but the preprocessor removed (#if 0 ...): drop it.
            exports = [ex for ex in exports if ex.index not in bad]
            r, owner = compile_with(exports)
    if r.returncode != 0:
        log = nvrtc_hints(_translate_messages(r.stdout + r.stderr, filename, build))
        raise CompileError(log, log)
    tls = _readelf_tls(tmp)
    # metadata first, then the module, each renamed into place: a process that sees the module sees
    # complete metadata (two processes compiling the same source at once both write the same bytes)
    meta_tmp = build / "meta.json"
    meta_tmp.write_text(json.dumps({"tls": tls, "file": filename, "exports": [ex.name for ex in exports],
                                    "split": sorted({ex.base for ex in exports if ex.split})}))
    os.replace(meta_tmp, meta)
    os.replace(tmp, so)
    shutil.rmtree(build, ignore_errors=True)
    return Built(so, exports, tls, check, filename, src, time.perf_counter() - t0, False, specs)


def canonical_nan(check: bool) -> bool:
    """Whether float32 arithmetic that makes a NaN gives the GPU's NaN (nancanon.py): MINITORCH_EMU_CANONICAL_NAN=1
    or 0; unset, in check mode only (it costs about a tenth of the kernels' time: benchmarks/results/
    emu_speed_experiments-*.json)."""
    v = os.environ.get("MINITORCH_EMU_CANONICAL_NAN", "").strip().lower()
    return check if v == "" else v not in ("0", "off", "no", "false")


def _compile_object(flags: list[str], build: Path, nan: bool) -> subprocess.CompletedProcess[str]:
    """__emu_tu.cpp -> mod.o. On x86-64 through assembly, so that the 64-bit divisions get their 32-bit fast
    path (fastdiv.py): compiler messages are those of the first step, as with a direct ``-c``."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return _run([*flags, "-c", "__emu_tu.cpp", "-o", "mod.o"], build)
    r = _run([*flags, "-S", "__emu_tu.cpp", "-o", "mod.s"], build)
    if r.returncode != 0:
        return r
    asm, _ = fastdiv.rewrite((build / "mod.s").read_text())
    if nan:
        asm, _, _ = nancanon.rewrite(asm)
    (build / "mod.s").write_text(asm)
    return _run([flags[0], "-c", "mod.s", "-o", "mod.o"], build)


# Host <math.h>, <float.h> and <limits.h> names that NVRTC, the GPU's run-time compiler, does not have (the
# prelude undefines them so that a kernel compiles here only if it compiles on a GPU): what to write instead.
_INF, _FMAX = "__int_as_float(0x7f800000)", "__int_as_float(0x7f7fffff) (3.402823466e+38f)"
NVRTC_MISSING: dict[str, str] = {
    "INFINITY": f"{_INF} (-infinity: __int_as_float(0xff800000))",
    "HUGE_VALF": _INF, "HUGE_VAL": "__longlong_as_double(0x7ff0000000000000LL)", "HUGE_VALL": _INF,
    "MAXFLOAT": _FMAX, "NAN": "__int_as_float(0x7fffffff) (the GPU's own NaN)",
    "FLT_MAX": _FMAX, "FLT_MIN": "__int_as_float(0x00800000) (1.175494351e-38f)", "FLT_EPSILON": "1.192092896e-07f",
    "FLT_TRUE_MIN": "__int_as_float(1)", "DBL_MAX": "1.7976931348623157e+308", "DBL_MIN": "2.2250738585072014e-308",
    "DBL_EPSILON": "2.220446049250313e-16", "DBL_TRUE_MIN": "4.9406564584124654e-324",
    "M_PI": "3.14159265358979f (a literal)", "M_PI_2": "1.57079632679490f", "M_PI_4": "0.785398163397448f",
    "M_1_PI": "0.318309886183791f", "M_2_PI": "0.636619772367581f", "M_2_SQRTPI": "1.12837916709551f",
    "M_E": "2.71828182845905f", "M_LOG2E": "1.44269504088896f", "M_LOG10E": "0.434294481903252f",
    "M_LN2": "0.693147180559945f", "M_LN10": "2.30258509299405f", "M_SQRT2": "1.41421356237310f",
    "M_SQRT1_2": "0.707106781186548f",
    "CHAR_BIT": "8", "SCHAR_MIN": "-128", "SCHAR_MAX": "127", "UCHAR_MAX": "255", "SHRT_MIN": "-32768",
    "SHRT_MAX": "32767", "USHRT_MAX": "65535", "INT_MIN": "(-2147483647 - 1)", "INT_MAX": "2147483647",
    "UINT_MAX": "0xffffffffu", "LONG_MIN": "(-9223372036854775807LL - 1)", "LONG_MAX": "9223372036854775807LL",
    "ULONG_MAX": "0xffffffffffffffffull", "LLONG_MIN": "(-9223372036854775807LL - 1)",
    "LLONG_MAX": "9223372036854775807LL", "ULLONG_MAX": "0xffffffffffffffffull",
}
_UNDECLARED = re.compile(r"^(?P<at>[^\s:][^:]*:\d+:\d+): error: (?:['\u2018](?P<g>\w+)['\u2019] was not declared in "
                         r"this scope|use of undeclared identifier '(?P<c>\w+)').*$", re.M)


def nvrtc_hints(log: str) -> str:
    """The compiler's log, with a note after each "not declared" error whose name is one of NVRTC_MISSING."""
    def note(m: re.Match[str]) -> str:
        name = m.group("g") or m.group("c")
        if name not in NVRTC_MISSING:
            return m.group(0)
        return (f"{m.group(0)}\n{m.group('at')}: note: NVRTC, the GPU's compiler, has no {name} (it comes from the "
                f"host's C library headers, which a kernel compiled for the GPU cannot include), so the emulator has "
                f"none either: write {NVRTC_MISSING[name]} instead")
    return _UNDECLARED.sub(note, log)


def _translate_options(options: tuple[str, ...]) -> list[str]:
    """NVRTC options -> compiler flags: macros and include paths are kept, the rest ignored."""
    out: list[str] = []
    it = iter(options)
    for o in it:
        if o in ("-D", "--define-macro", "-I", "--include-path", "-U"):
            v = next(it, "")
            flag = {"--define-macro": "-D", "--include-path": "-I"}.get(o, o)
            out += [flag + v]
        elif o.startswith(("-D", "-U", "-I")):
            out.append(o)
        elif o.startswith("--define-macro="):
            out.append("-D" + o.split("=", 1)[1])
        elif o.startswith("--include-path="):
            out.append("-I" + o.split("=", 1)[1])
        elif re.match(r"-std=c\+\+(20|2a|23|2b)$", o):
            out.append(o)
    return out


def addr2line(so: Path, offsets: list[int]) -> list[tuple[str, int]]:
    """(file, line) for each code offset in the module; ("", 0) when unknown."""
    if not offsets or not shutil.which("addr2line"):
        return [("", 0)] * len(offsets)
    r = subprocess.run(["addr2line", "-i", "-a", "-e", str(so), *[hex(o) for o in offsets]],
                       capture_output=True, text=True)
    res: list[list[tuple[str, int]]] = []
    for ln in r.stdout.splitlines():
        if ln.startswith("0x"):
            res.append([])
            continue
        m = re.match(r"(.*):(\d+)", ln)
        if res and m:
            res[-1].append((os.path.basename(m.group(1)), int(m.group(2))))
    ours = {p.name for p in _runtime_files()}  # prefer the learner's frame to an inlined prelude function
    out = []
    for frames in res:
        pick = ("", 0)
        for f, ln_ in frames:
            if f and f not in ours and ln_ > 0:
                pick = (f, ln_)
                break
        if pick == ("", 0) and frames:
            pick = frames[0]
        out.append(pick)
    while len(out) < len(offsets):
        out.append(("", 0))
    return out


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(build_runtime())
    print(build_module(Path(sys.argv[1]).read_text(), (), None, sys.argv[1], False))
