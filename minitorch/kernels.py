"""Learner code: the workspace, the ``%%kernel`` / ``%%module`` cell magics, and kernel loading.

A lab cell that starts with ``%%kernel memory.cu`` writes its body into the learner's workspace
(atomically) and compiles it at once, so a compile error shows in that cell with the learner's line
numbers. Framework code then loads kernels by file and function name::

    fill = load_kernel("memory.cu", "fill")
    fill((blocks,), (threads,), (out, numpy.float32(1.0), numpy.int64(n)))

Modules are cached by backend and the SHA-256 of the source, so re-running a cell picks up the new
code and re-running an unchanged one costs nothing. Every launch is counted, so a grader can tell a
result computed by the learner's kernel from one computed some other way.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from minitorch import backend, watch

PACKAGE_DIR = Path(__file__).resolve().parent
LEARNER_SUFFIXES = (".cu", ".cuh", ".py")
TODO_MARKER = "MINITORCH_TODO"


@dataclass(frozen=True)
class LearnerFile:
    """Where a learner file is written: the phase, its lab notebook, and the cell's heading."""

    phase: str
    lab: str
    cell: str


# Every file a lab writes. A test checks this against the solution notebooks.
KERNEL_FILES: dict[str, LearnerFile] = {
    "memory.cu": LearnerFile("phase1", "labs/phase1_memory.ipynb", "Exercise 2: fill and copy kernels"),
    "memory.py": LearnerFile("phase1", "labs/phase1_memory.ipynb", "Exercise 3: launching your kernels"),
    **{name: LearnerFile("phase2", "labs/phase2_kernels.ipynb", cell) for name, cell in (
        ("elementwise.cu", "Exercise 1: elementwise kernels"),
        ("elementwise.py", "Exercise 2: launching elementwise kernels"),
        ("transpose.cu", "Exercise 3: transpose, naive and tiled"),
        ("transpose.py", "Exercise 4: launching a 2-D grid"),
        ("matmul.cu", "Exercise 5: naive matmul"),
        ("matmul.py", "Exercise 6: launching matmul"))},
    **{name: LearnerFile("phase3a", "labs/phase3a_forward.ipynb", cell) for name, cell in (
        ("forward.cu", "Exercise 1: bias and sigmoid kernels"),
        ("forward.py", "Exercise 2: launching the forward kernels"))},
    **{name: LearnerFile("phase3b", "labs/phase3b_backward.ipynb", cell) for name, cell in (
        ("backward.cu", "Exercise 1: backward kernels"),
        ("backward.py", "Exercise 2: launching the backward kernels"),
        ("sgd.cu", "Exercise 3: the SGD update"),
        ("sgd.py", "Exercise 4: launching the SGD update"),
        ("backprop.py", "Exercise 6: a tape-based autograd"))},
    **{name: LearnerFile("phase4", "labs/phase4_reductions.ipynb", cell) for name, cell in (
        ("reduce.cu", "Exercise 1: the reduction ladder"),
        ("reduce.py", "Exercise 2: launching reductions"))},
    "gemm.cu": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 1: the SGEMM ladder"),
    "gemm.py": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 2: launching the ladder"),
    "adam.cu": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 4: the fused Adam update"),
    "adam.py": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 5: launching the Adam update"),
    "pool.py": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 6: a caching allocator"),
    "init.cu": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 7: Philox and Box-Muller in CUDA C"),
    "init.py": LearnerFile("phase5", "labs/phase5_fast.ipynb", "Exercise 8: launching the generator"),
    **{name: LearnerFile("phase6", "labs/phase6_cnn.ipynb", cell) for name, cell in (
        ("softmax.cu", "Exercise 1: softmax, log-softmax and cross-entropy"),
        ("softmax.py", "Exercise 2: launching the row kernels"),
        ("conv.cu", "Exercise 3: the convolution ladder"),
        ("conv.py", "Exercise 4: launching convolutions"),
        ("maxpool.cu", "Exercise 5: max pooling"),
        ("maxpool.py", "Exercise 6: launching max pooling"))},
    **{name: LearnerFile("phase7", "labs/phase7_gpt.ipynb", cell) for name, cell in (
        ("gelu.cu", "Exercise 1: GELU kernels"),
        ("gelu.py", "Exercise 2: launching GELU"),
        ("layernorm.cu", "Exercise 3: LayerNorm kernels"),
        ("layernorm.py", "Exercise 4: launching LayerNorm"),
        ("embedding.cu", "Exercise 5: embedding kernels"),
        ("embedding.py", "Exercise 6: launching the embedding kernels"),
        ("attention.cu", "Exercise 7: attention kernels"),
        ("attention.py", "Exercise 8: launching the attention kernels"),
        ("online_softmax.cu", "Exercise 9b: the online softmax"),
        ("clip.cu", "Exercise 10: clipping kernels"),
        ("clip.py", "Exercise 11: launching the clipping kernels"),
        ("recipe.cu", "Exercise 11b: dropout and the schedule"),
        ("recipe.py", "Exercise 11c: launching them"))},
    **{name: LearnerFile("phase8a", "labs/phase8a_tensor_cores.ipynb", cell) for name, cell in (
        ("convert.cu", "Exercise 1: conversions"),
        ("convert.py", "Exercise 2: launching the conversions"),
        ("hgemm.cu", "Exercise 3: the HGEMM ladder"),
        ("hgemm.py", "Exercise 4: launching the ladder"),
        ("hgemm_wgmma.cu", "Exercise 5: rung 6, wgmma fed by the TMA (Hopper)"),
        ("scaler.cu", "Exercise 7: a loss scaler on the device"),
        ("scaler.py", "Exercise 8: launching the loss scaler"))},
    **{name: LearnerFile("phase8b", "labs/phase8b_flash.ipynb", cell) for name, cell in (
        ("flash.cu", "Exercise 1: the ladder, the backward pass and dropout"),
        ("flash.py", "Exercise 2: launching the ladder"),
        ("flash_wgmma.cu", "Exercise 2b: rung 8, wgmma (Hopper)"))},
}


PHASE_ORDER = ("phase1", "phase2", "phase3a", "phase3b", "phase4", "phase5", "phase6", "phase7", "phase8a",
               "phase8b")


def phase_index(phase: str) -> int:
    """The position of a phase in the course (``PHASE_ORDER``); unknown names sort last."""
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)


class _ShortTraceback:
    """In a notebook, IPython shows ``_render_traceback_`` instead of the traceback: the message alone. A
    ``%%kernel`` cell's traceback would otherwise open with the whole cell, passed to the magic as a string."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class KernelNotWrittenError(_ShortTraceback, FileNotFoundError):
    """The learner has not yet run the lab cell that writes this file."""


class KernelStubError(_ShortTraceback, NotImplementedError):
    """A ``%%kernel`` / ``%%module`` cell still holds TODO stubs: nothing was written."""


class KernelCompileError(RuntimeError):
    """The learner's CUDA C did not compile (same type on every device)."""


class KernelLaunchError(RuntimeError):
    """A launch failed; the message names the kernel and its file."""


# ---------------------------------------------------------------------------------------------
# Workspace

# The variables below are read on every launch (the grader changes them between tests). On POSIX,
# os.environ keeps its entries in a plain dict of bytes (``_data``, updated by every assignment);
# reading it directly costs a dictionary lookup instead of the key and value conversions.
_ENV_DATA: dict | None = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _getenv(key: str) -> str | None:
    if _ENV_DATA is not None:
        value = _ENV_DATA.get(key.encode() if key not in _ENV_KEYS else _ENV_KEYS[key])
        return None if value is None else value.decode()
    return os.environ.get(key)


_ENV_KEYS = {k: k.encode() for k in ("MINITORCH_WORKSPACE", "MINITORCH_LAUNCH_TRACE", "MINITORCH_SYNC_LAUNCHES",
                                      "MINITORCH_PHASE")}
_workspace: tuple[str | None, Path] | None = None  # (MINITORCH_WORKSPACE as last read, resolved path)
_paths: dict[tuple[Path, str], str] = {}


def workspace_dir() -> Path:
    """``MINITORCH_WORKSPACE`` if set, else ``minitorch/csrc`` inside the package.

    Resolved once per value of the variable: a ``Path.resolve()`` on every launch cost more than the
    launch itself.
    """
    global _workspace
    env = _getenv("MINITORCH_WORKSPACE")
    cached = _workspace
    if cached is None or cached[0] != env:
        cached = _workspace = (env, Path(env).expanduser().resolve() if env else PACKAGE_DIR / "csrc")
    return cached[1]


def _check_filename(filename: str) -> str:
    if not filename or os.sep in filename or (os.altsep and os.altsep in filename) or filename.startswith("."):
        raise ValueError(f"expected a plain file name such as 'memory.cu', got {filename!r}")
    if not filename.endswith(LEARNER_SUFFIXES):
        raise ValueError(f"expected a file ending in {', '.join(LEARNER_SUFFIXES)}, got {filename!r}")
    return filename


def _path_str(filename: str) -> str:
    """The learner file's path as a string, checked and joined once per workspace."""
    key = (workspace_dir(), filename)
    path = _paths.get(key)
    if path is None:
        path = _paths[key] = str(key[0] / _check_filename(filename))
    return path


def source_path(filename: str) -> Path:
    return Path(_path_str(filename))


def _not_written(filename: str) -> KernelNotWrittenError:
    where = KERNEL_FILES.get(filename)
    if where is None:
        return KernelNotWrittenError(f"{filename} does not exist in your workspace ({workspace_dir()}).")
    return KernelNotWrittenError(
        f"{filename} has not been written yet: run the cell starting with "
        f"'%%{'module' if filename.endswith('.py') else 'kernel'} {filename}' under "
        f"\"{where.cell}\" in {where.lab} (workspace: {workspace_dir()}).")


# A file whose stubs compile says so with the line `#define MINITORCH_TODO(message)`; each stub then expands
# to nothing, and load_kernel refuses a kernel that is not written yet (or calls a function that is not).
TODO_DEFINE = "#define MINITORCH_TODO(message)"
_TODO_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+" + TODO_MARKER + r"[ \t]*\(", re.M)
_CALL = re.compile(r"\b(\w+)\s*\(")
_NOT_NAMES = {"__launch_bounds__", "__align__", "alignas", "__attribute__", "decltype", "sizeof", "if", "for",
              "while", "switch", "return", "float", "int", "double", "void", "unsigned", "long", "char"}


def stubs_compile(text: str) -> bool:
    """Whether the source defines ``MINITORCH_TODO`` itself: its unwritten parts compile to nothing."""
    return bool(_TODO_DEFINE.search(text))


def _blank_comments_and_strings(text: str) -> str:
    """The source with comments and string literals blanked out, every newline kept (lines still match)."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def functions(text: str) -> dict[str, tuple[int, int, str]]:
    """The functions a CUDA C source defines at its top level: name -> (first line, last line, body with
    comments and strings blanked). Templates and ``__launch_bounds__`` between the type and the name are
    understood; a brace at the top level that opens no function (an initialiser) is skipped."""
    code = _blank_comments_and_strings(text)
    found: dict[str, tuple[int, int, str]] = {}
    depth, header_start, open_at, name = 0, 0, 0, None
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                header = re.sub(r"^[ \t]*#[^\n]*", "", code[header_start:i], flags=re.M)
                names = [m.group(1) for m in _CALL.finditer(header) if m.group(1) not in _NOT_NAMES]
                name, open_at = (names[0] if names else None), header_start
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                if name is not None:
                    first = len(code) - len(code[open_at:].lstrip())  # the header's first character
                    start = code.count("\n", 0, first) + 1
                    found[name] = (start, code.count("\n", 0, i) + 1, code[open_at:i + 1])
                header_start, name = i + 1, None
        elif ch == ";" and depth == 0:
            header_start = i + 1
    return found


def todo_stubs(text: str) -> list[tuple[int, str]]:
    """(line, the function it is in) of every TODO stub of a CUDA C source, in order."""
    spans = functions(text)
    found = []
    for number, line in enumerate(_blank_comments_and_strings(text).splitlines(), 1):
        if TODO_MARKER + "(" in line and not line.lstrip().startswith("#"):
            inside = next((f for f, (first, last, _) in spans.items() if first <= number <= last),
                          "the file's top level")
            found.append((number, inside))
    return found


def unwritten_parts(text: str, function: str) -> list[tuple[int, str]]:
    """The TODO stubs that ``function`` (a kernel, or a template instantiation such as ``f<1, 2>``) would
    run: those in its own body and in every function it calls, directly or not."""
    spans = functions(text)
    stubs = todo_stubs(text)
    stubbed = {f for _, f in stubs}
    seen, todo = set(), [function.split("<", 1)[0].strip()]
    while todo:
        name = todo.pop()
        if name in seen or name not in spans:
            continue
        seen.add(name)
        body = spans[name][2]
        todo += [other for other in spans if other != name and re.search(rf"\b{re.escape(other)}\b", body)]
    return [(line, f) for line, f in stubs if f in seen and f in stubbed]


def _part_not_written(filename: str, function: str, left: list[tuple[int, str]]) -> KernelNotWrittenError:
    where = KERNEL_FILES.get(filename)
    cell = f'the cell "{where.cell}" in {where.lab}' if where else f"the cell that writes {filename}"
    base = function.split("<", 1)[0].strip()
    parts = ", ".join(f"{f} (line {line})" + ("" if f == base else ", which it calls") for line, f in left)
    return KernelNotWrittenError(
        f"{base} in {filename} is not written yet: {TODO_MARKER} is still in {parts}. Write it in {cell} "
        f"(your code replaces the {TODO_MARKER} line), run that cell, then run this one again (the other kernels "
        f"of {filename} run meanwhile).")


def _stub_error(filename: str, text: str) -> KernelStubError:
    where = KERNEL_FILES.get(filename)
    cell = f' ("{where.cell}" in {where.lab})' if where else ""
    stubs = todo_stubs(text)
    listed = ", ".join(f"{function} (line {line})" for line, function in stubs) or TODO_MARKER
    count = f"{len(stubs)} TODO stubs" if len(stubs) != 1 else "a TODO stub"
    return KernelStubError(
        f"{filename}: this cell{cell} still contains {count} ({TODO_MARKER}), so nothing was saved or "
        f"compiled. Left: {listed}. The file is saved and compiled as a whole: replace every stub with "
        f"your code, then run the cell again.")


def read_source(filename: str) -> str:
    path = source_path(filename)
    try:
        return path.read_text()
    except FileNotFoundError:
        raise _not_written(filename) from None


def write_source(filename: str, text: str) -> Path:
    """Write a learner file atomically (a crash mid-write never leaves half a kernel behind)."""
    path = source_path(filename)
    if TODO_MARKER in text and not stubs_compile(text):
        raise _stub_error(filename, text)
    global writes
    writes += 1  # what was derived from the workspace's files (minitorch.allocator) looks again
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{filename}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


writes = 0  # learner files written by write_source in this process


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Kernel signatures (for argument checks on every device)

_KERNEL_DEF = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
                         r'(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def kernel_signatures(source: str) -> dict[str, list[str]]:
    """``{name: [parameter declarations]}`` for every ``extern "C" __global__`` kernel in ``source``."""
    found: dict[str, list[str]] = {}
    for match in _KERNEL_DEF.finditer(_COMMENTS.sub(" ", source)):
        params = [" ".join(p.split()) for p in match.group(2).split(",") if p.strip()]
        found[match.group(1)] = [] if params == ["void"] else params
    return found


def _param_base_type(decl: str) -> str:
    """``'const float* __restrict__ x'`` -> ``'float*'``; ``'float value'`` -> ``'float'``."""
    words = [w for w in re.split(r"\s+|(?=\*)|(?<=\*)", decl) if w and w not in
             ("const", "volatile", "__restrict__", "restrict")]
    pointer = "*" if "*" in words else ""
    names = [w for w in words if w != "*"]
    base = " ".join(names[:-1]) if len(names) > 1 else (names[0] if names else "")
    return base + pointer


_FLOAT_PARAMS = {"float", "__half", "half", "__nv_bfloat16"}
_INT_PARAMS = {"int", "unsigned", "unsigned int", "int32_t", "uint32_t", "short", "char",
               "unsigned char", "bool"}


def check_args(filename: str, function: str, params: list[str] | None, args: Sequence[Any],
               kinds: Sequence[str] | None = None) -> None:
    """Catch the classic CuPy packing bugs before they turn into silent garbage.

    CuPy packs a Python ``float`` as a 64-bit double and a Python ``int`` as a 64-bit integer; a
    ``float`` or ``int`` parameter then reads half of it. The emulator checks this exactly; on
    ``cuda`` this best-effort check on the parsed signature gives the same advice.
    """
    if params is None:
        return
    signature = f"{function}({', '.join(params)})"
    if len(args) != len(params):
        raise TypeError(f"{signature} in {filename} takes {len(params)} arguments, got {len(args)}")
    if kinds is None:
        kinds = [_param_base_type(p) for p in params]
    for i, (arg, kind) in enumerate(zip(args, kinds, strict=False)):
        if isinstance(arg, bool):
            continue
        if isinstance(arg, float) and kind in _FLOAT_PARAMS:
            raise TypeError(f"argument #{i} of {signature}: a Python float is packed as a 64-bit double "
                            f"but the parameter is `{kind}`, which would read half of it. "
                            f"Pass numpy.float32(x) instead.")
        if isinstance(arg, int) and kind in _INT_PARAMS:
            raise TypeError(f"argument #{i} of {signature}: a Python int is packed as a 64-bit integer "
                            f"but the parameter is `{kind}`. Pass numpy.int32(x) (or declare the "
                            f"parameter `long long`).")
        if isinstance(arg, np.ndarray):
            raise TypeError(f"argument #{i} of {signature}: got a NumPy (host) array; kernels need device "
                            f"arrays. Copy it first: minitorch.backend.asarray(a).")


# ---------------------------------------------------------------------------------------------
# Loading kernels

_modules: dict[tuple, Any] = {}
_launches: dict[tuple[str, str], int] = {}
_lock = threading.Lock()


def _compile_error(filename: str, device: str, exc: BaseException) -> KernelCompileError:
    log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
    # NVRTC names the source after a temporary file; name it after the learner's file instead.
    log = re.sub(r"[^\s:()]*?\.(?:cu|cpp|cc)(?=\(\d+\)|:\d+)", filename, log)
    return KernelCompileError(f"{filename} did not compile for the '{device}' device:\n{log}")


def _is_compile_exception(exc: BaseException) -> bool:
    return type(exc).__name__ in ("CompileException", "CompileError")


def compile_module(filename: str, source: str, options: Sequence[str] = (),
                   name_expressions: Sequence[str] | None = None) -> Any:
    """The backend's RawModule for this exact source, compiled once per (device, source, options)."""
    device = backend.get_device()
    opts = tuple(options)
    if device == "cuda" and "-lineinfo" not in opts:
        opts = opts + ("-lineinfo",)  # lets compute-sanitizer name the learner's source line
    key = (device, sha256_text(source), opts, tuple(name_expressions or ()))
    with _lock:
        module = _modules.get(key)
        if module is None:
            try:
                module = backend.RawModule(source, opts, name_expressions, filename=filename)
                if hasattr(module, "compile"):
                    module.compile()
            except Exception as exc:
                if _is_compile_exception(exc):
                    raise _compile_error(filename, device, exc) from None
                raise
            _modules[key] = module
    return module


@dataclass
class Launch:
    """One recorded launch: the kernel and exactly what it was given."""

    kernel: Kernel
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]
    shared_mem: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def replay(self, substitute: dict[int, Any] | None = None) -> None:
        """Launch again; ``substitute`` maps ``id(original argument)`` to the argument to pass instead
        (e.g. a fresh, poisoned output array)."""
        args = self.args if not substitute else tuple(substitute.get(id(a), a) for a in self.args)
        self.kernel(self.grid, self.block, args, shared_mem=self.shared_mem, **self.options)


_recordings: list[list[Launch]] = []


class _Latest(list):
    """A list of launches that keeps only the latest `limit` of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = max(1, int(limit))

    def append(self, launch: Launch) -> None:
        super().append(launch)
        if len(self) > self.limit:
            del self[0]


@contextlib.contextmanager
def recording(limit: int | None = None) -> Iterator[list[Launch]]:
    """Record every launch made inside the block, in order (the launches still run)::

        with kernels.recording() as launches:
            launcher(a, b, out)
        for launch in launches:
            launch.replay({id(out): fresh})

    ``limit``: keep only the latest ``limit`` launches (and the arrays they hold), e.g. to look back at
    what a long test launched last."""
    launches: list[Launch] = [] if limit is None else _Latest(limit)
    _recordings.append(launches)
    try:
        yield launches
    finally:
        # By identity: nested recordings of the same launches are equal lists, and list.remove would take
        # the outer one (a graph captured inside a recording, say).
        del _recordings[next(i for i, r in enumerate(_recordings) if r is launches)]


class Kernel:
    """A learner's kernel, called exactly like a CuPy RawKernel: ``k(grid, block, args, shared_mem=0)``.

    What a launch buys (argument checks, the launch count, the crash trace) is paid once where it can
    be: arguments are checked once per combination of argument types, the count is a dictionary
    increment, and the trace is written only when the grader asks for one.
    """

    def __init__(self, filename: str, function: str, raw: Any, params: list[str] | None) -> None:
        self.filename = filename
        self.function = function
        self.params = params
        self._kinds = [_param_base_type(p) for p in params] if params is not None else None
        self._raw = raw
        self._key = (filename, function)
        self._checked: set[tuple[type, ...]] = set()
        # The emulator checks arguments against the compiled types itself; CuPy does not.
        self._check = not backend.get_backend().checks_kernel_args

    def __repr__(self) -> str:
        return f"<Kernel {self.function} from {self.filename}>"

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        """The dynamic shared memory a block of this kernel may use (CuPy's attribute): more than the
        default 48 KiB only after a launcher raises it (Phase 8a's pipelined HGEMM uses 64 KiB)."""
        return int(self._raw.max_dynamic_shared_size_bytes)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        self._raw.max_dynamic_shared_size_bytes = int(nbytes)

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0, **kwargs: Any) -> None:
        args = tuple(args)
        if self._check:
            types_ = tuple(map(type, args))
            if types_ not in self._checked:
                check_args(self.filename, self.function, self.params, args, self._kinds)
                self._checked.add(types_)
        grid, block = _as_dims(grid), _as_dims(block)
        trace = _getenv("MINITORCH_LAUNCH_TRACE")
        if trace:  # the grader reads this to name the kernel that was running when a test hung or crashed
            _trace_launch(trace, f"{self.filename}:{self.function} grid={grid} block={block}\n")
        key = self._key
        with _lock:
            _launches[key] = _launches.get(key, 0) + 1
        if _recordings:
            launch = Launch(self, grid, block, args, shared_mem, kwargs)
            for launches in _recordings:
                launches.append(launch)
        try:
            self._raw(grid, block, args, shared_mem=shared_mem, **kwargs)
            # Surfaces asynchronous faults here, attributed to this kernel; not while a graph is being
            # captured, when nothing runs and the stream cannot be waited for.
            if _getenv("MINITORCH_SYNC_LAUNCHES") == "1" and not backend.get_backend().capturing:
                backend.synchronize()
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            if _is_compile_exception(exc):
                raise _compile_error(self.filename, backend.get_device(), exc) from None
            raise KernelLaunchError(f"kernel `{self.function}` from {self.filename} failed "
                                    f"(grid={grid}, block={block}): {exc}") from exc


_trace_file: tuple[str, int, int] | None = None  # (path, open descriptor, inode)
_trace_last = ""


def _trace_launch(path: str, line: str) -> None:
    """Record the launch in one open file, rewritten in place only when the line changes: reopening
    the file on every launch cost ~180 us, more than an emulated launch. A stat (~2 us) notices when
    the grader has removed or emptied the file between tests."""
    global _trace_file, _trace_last
    with _lock:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if _trace_file is None or _trace_file[0] != path or st is None or st.st_ino != _trace_file[2]:
            if _trace_file is not None:
                os.close(_trace_file[1])
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            _trace_file, _trace_last = (path, fd, os.fstat(fd).st_ino), ""
        elif st.st_size == 0:
            _trace_last = ""
        if line != _trace_last:
            data = line.encode()
            os.pwrite(_trace_file[1], data, 0)
            os.ftruncate(_trace_file[1], len(data))
            _trace_last = line


def _as_dims(dims: Any) -> tuple[int, ...]:
    if type(dims) is tuple:  # the usual (blocks,) / (threads,): nothing to convert
        for d in dims:
            if type(d) is not int:
                break
        else:
            return dims
    if isinstance(dims, (int, np.integer)):
        return (int(dims),)
    return tuple(int(d) for d in dims)


def _stamp(filename: str) -> tuple[str, tuple[int, int, int]]:
    """The file's path and (mtime, size, inode), read so that a file rewritten by a cell, an editor or
    another process is picked up at the next launch (``file_stamp``)."""
    path = _path_str(filename)
    try:
        stamp = file_stamp(path)
    except FileNotFoundError:
        raise _not_written(filename) from None
    for used in _file_trackers:
        used[path] = stamp
    return path, stamp


_held: dict[str, int] = {}  # learner file -> a descriptor open on it
_known: dict[str, tuple[int, tuple[int, int, int]]] = {}  # path -> (watch generation, stamp) (minitorch.watch)
_parents: dict[str, str] = {}


def file_stamp(path: str) -> tuple[int, int, int]:
    """(mtime, size, inode) of the file at ``path``. While nothing changed in its directory since the stamp
    was last read (:mod:`minitorch.watch`, one ``poll``), the stamp read then; otherwise an ``fstat`` of
    a descriptor held open on it (half the cost of a ``stat`` by name). A file replaced by a rename
    (``write_source``, most editors) leaves the held inode with no links: the name is then opened again.
    Raises FileNotFoundError."""
    parent = _parents.get(path)
    if parent is None:
        parent = _parents[path] = os.path.dirname(path)
    current = watch.generation(parent)
    if current is not None:
        known = _known.get(path)
        if known is not None and known[0] == current:
            return known[1]
        stamp = _fstat_stamp(path)
        _known[path] = (current, stamp)
        return stamp
    return _fstat_stamp(path)


def _fstat_stamp(path: str) -> tuple[int, int, int]:
    fd = _held.get(path)
    if fd is not None:
        st = os.fstat(fd)
        if st.st_nlink:
            return (st.st_mtime_ns, st.st_size, st.st_ino)
        del _held[path]
        os.close(fd)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if len(_held) >= 256:  # never hold more than a few hundred: forget the oldest
        os.close(_held.pop(next(iter(_held))))
    _held[path] = fd
    return (st.st_mtime_ns, st.st_size, st.st_ino)


_file_trackers: list[dict[str, tuple[int, int, int]]] = []


@contextlib.contextmanager
def tracking_files() -> Iterator[dict[str, tuple[int, int, int]]]:
    """``{path: stamp}`` of every learner file loaded inside the block (kernels and modules), so that
    whatever was derived from them can be dropped when one changes (minitorch.plans)."""
    used: dict[str, tuple[int, int, int]] = {}
    _file_trackers.append(used)
    try:
        yield used
    finally:
        _file_trackers.remove(used)


_kernels: dict[tuple, tuple[tuple[int, int, int], Kernel]] = {}


def load_kernel(filename: str, function: str, options: Sequence[str] = (),
                name_expressions: Sequence[str] | None = None) -> Kernel:
    """The current version of ``function`` from the learner's ``filename``, compiled for the active device.

    Cheap enough to call before every launch: the compiled kernel is reused until the file changes.
    """
    if _learner_loaders is not None:
        return _learner_loaders[1](filename, function, options, name_expressions)
    path, stamp = _stamp(filename)
    key = (path, function, backend.get_device(), tuple(options), tuple(name_expressions) if name_expressions else ())
    cached = _kernels.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    source = read_source(filename)
    if stubs_compile(source) and (left := unwritten_parts(source, function)):
        raise _part_not_written(filename, function, left)
    module = compile_module(filename, source, options, name_expressions)
    signatures = kernel_signatures(source)
    if function not in signatures and not name_expressions:
        defined = ", ".join(sorted(signatures)) or "none"
        raise KernelCompileError(f"{filename} defines no kernel `extern \"C\" __global__ void {function}(...)` "
                                 f"(kernels defined: {defined}).")
    try:
        raw = module.get_function(function)
    except Exception as exc:
        if _is_compile_exception(exc):
            raise _compile_error(filename, backend.get_device(), exc) from None
        raise
    kernel = Kernel(filename, function, raw, signatures.get(function))
    # How it was loaded, to load it again elsewhere (the grader replays a record of it in its learner process).
    kernel.options, kernel.name_expressions = tuple(options), tuple(name_expressions or ())
    _kernels[key] = (stamp, kernel)
    return kernel


def note_launches(counts: dict[tuple[str, str], int], launches: Sequence[Launch]) -> None:
    """Launches made elsewhere on this process's behalf (the grader's learner process): added to the counts
    and to the recordings open here, as if made here."""
    with _lock:
        for key, n in counts.items():
            _launches[key] = _launches.get(key, 0) + n
    for launch in launches:
        for recorded in _recordings:
            recorded.append(launch)


def launch_count(filename: str, function: str) -> int:
    """How many times ``function`` from ``filename`` was launched since the last reset."""
    return _launches.get((filename, function), 0)


def launch_counts() -> dict[tuple[str, str], int]:
    """``{(file, function): launches}`` since the last reset."""
    with _lock:
        return dict(_launches)


def reset_launch_counts() -> None:
    with _lock:
        _launches.clear()


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Launches made inside the block are neither counted nor seen by the recordings around it: a dry run (the
    grader captures a launcher's call into a graph it throws away, to see whether it copies between host and
    device, then makes the call for real)."""
    with _lock:
        counts = dict(_launches)
    outer = _recordings[:]
    _recordings.clear()
    try:
        yield
    finally:
        _recordings[:] = outer + _recordings  # (a recording opened inside has closed itself by now)
        with _lock:
            _launches.clear()
            _launches.update(counts)


# ---------------------------------------------------------------------------------------------
# Loading Python modules written by the learner

_py_modules: dict[str, tuple[tuple[int, int, int], types.ModuleType]] = {}


# While the grader runs the graded tests, the learner's code runs in a process of its own
# (grader/learner_process.py): these two load stand-ins for its modules and kernels instead.
_learner_loaders: tuple[Any, Any] | None = None


def set_learner_loaders(load_module_: Any, load_kernel_: Any) -> None:
    """Route ``load_module`` and ``load_kernel`` to the given functions (None, None: back to importing and
    compiling here)."""
    global _learner_loaders
    _learner_loaders = None if load_module_ is None else (load_module_, load_kernel_)


def learner_code_elsewhere() -> bool:
    """True while the learner's modules and kernels run in another process (the grader's learner process): this
    process then holds none of the learner's objects (the device allocator stays the default one)."""
    return _learner_loaders is not None


def load_module(filename: str) -> types.ModuleType:
    """Import the learner's ``filename`` (e.g. ``memory.py``), re-importing whenever the file changes."""
    if _learner_loaders is not None:
        return _learner_loaders[0](filename)
    if not filename.endswith(".py"):
        raise ValueError(f"expected a Python file name such as 'memory.py', got {filename!r}")
    path, stamp = _stamp(filename)
    cached = _py_modules.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    name = f"minitorch.workspace.{Path(filename).stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _py_modules[path] = (stamp, module)
    return module


# ---------------------------------------------------------------------------------------------
# Cell magics

def _summary(path: Path, text: str) -> str:
    return f"wrote {path.name} ({len(text.splitlines())} lines, sha256 {sha256_text(text)[:12]}) to {path.parent}"


def arch_missing(arch: str) -> str | None:
    """Why the active device cannot run code built for ``arch`` (``"sm_90a"``: Hopper's wgmma, TMA and
    setmaxnreg, which run on compute capability 9.0 only), or None when it can."""
    device = backend.get_device()
    match = re.fullmatch(r"sm_(\d+)a?", arch)
    if match is None:
        raise ValueError(f"--arch must name a GPU architecture such as sm_90a, got {arch!r}")
    if device != "cuda":
        return f"the '{device}' device is not a GPU"
    import cupy

    capability = cupy.cuda.Device().compute_capability
    if capability != match.group(1):
        return f"this GPU is sm_{capability}"
    return None


def _magic_arguments(line: str) -> tuple[str, str | None]:
    """``memory.cu`` -> ("memory.cu", None); ``hgemm_wgmma.cu --arch=sm_90a`` -> (.., "sm_90a")."""
    filename, *flags = line.split() or [""]
    arch = None
    for flag in flags:
        if not flag.startswith("--arch="):
            raise ValueError(f"%%kernel {line.strip()}: unknown option {flag!r} (known: --arch=sm_XX)")
        arch = flag.removeprefix("--arch=")
    return filename, arch


def kernel_magic(line: str, cell: str) -> None:
    """``%%kernel memory.cu``: write the cell to the workspace, then compile it for the active device.
    ``%%kernel file.cu --arch=sm_90a``: a file built for one GPU architecture (load it with
    ``options=("--gpu-architecture=sm_90a",)``) is compiled only on such a GPU; elsewhere it is saved."""
    filename, arch = _magic_arguments(line)
    path = write_source(filename, cell)
    device = backend.get_device()
    if not backend.get_backend().runs_kernels:
        print(_summary(path, cell) + f"; not compiled (the '{device}' device runs no CUDA C)")
        return
    if arch is not None and (why := arch_missing(arch)):
        print(_summary(path, cell) + f"; not compiled: it is built for {arch}, and {why}")
        return
    compile_module(filename, cell, () if arch is None else (f"--gpu-architecture={arch}",))
    names = ", ".join(kernel_signatures(cell)) or "no extern \"C\" kernels"
    print(_summary(path, cell) + f"; compiled for '{device}': {names}")
    if stubs_compile(cell) and (stubs := todo_stubs(cell)):
        left = ", ".join(dict.fromkeys(f for _, f in stubs))
        print(f"not written yet (each refuses to run, the rest run): {left}")


def module_magic(line: str, cell: str) -> None:
    """``%%module memory.py``: write the cell to the workspace, then import it to surface errors now."""
    filename = line.strip()
    path = write_source(filename, cell)
    load_module(filename)
    print(_summary(path, cell))


def register_magics(ipython: Any) -> None:
    ipython.register_magic_function(kernel_magic, magic_kind="cell", magic_name="kernel")
    ipython.register_magic_function(module_magic, magic_kind="cell", magic_name="module")
