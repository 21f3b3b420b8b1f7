"""minitorch.emu: run CUDA C kernels on a CPU, with the launch API of CuPy.

The emulator compiles the *same* CUDA C source a lab writes for the GPU with the system C++
compiler, runs each CUDA thread of a block as a fiber, and turns a learner's bug into a Python
exception instead of a crashed kernel. It is for correctness, not speed.

Quick start::

    import numpy as np
    from minitorch import emu

    mod = emu.RawModule(code=r'''
    extern "C" __global__ void scale(float* x, float a, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }''', filename="scale.cu")
    k = mod.get_function("scale")
    x = emu.asarray(np.arange(1000, dtype=np.float32))
    k((4,), (256,), (x, np.float32(2.0), np.int64(1000)))
    print(emu.asnumpy(x)[:4])

Public API (as CuPy's, so the same lab code runs on both):

- ``RawModule(code=..., options=(), name_expressions=None, filename=None)``;
  ``.get_function(name)`` (an ``extern "C"`` kernel, or a string given in ``name_expressions``
  such as ``"scale<float>"``); call ``kernel(grid, block, args, shared_mem=0)`` with grid/block an
  int or a tuple of 1 to 3 ints. ``kernel.max_dynamic_shared_size_bytes`` opts in to more than
  48 KB of shared memory (up to 227 KB).
- ``asarray``, ``asnumpy``, ``empty``, ``zeros``, ``synchronize`` (a no-op: launches are
  synchronous), ``begin_capture()`` / ``end_capture() -> Graph`` / ``Graph.launch()`` (graph
  capture as CuPy's ``Stream.begin_capture``: work is recorded, then replayed), ``DeviceArray`` (``shape dtype size nbytes ndim get() set() copy() reshape()``;
  ``numpy.asarray(device_array)`` raises ``TypeError``, as with CuPy).
- Allocators, as CuPy's: ``malloc(nbytes) -> int`` / ``free(ptr)`` (``cudaMalloc`` / ``cudaFree``),
  ``set_allocator(fn)`` / ``get_allocator()`` (``fn(nbytes)`` returns an ``UnownedMemory(ptr, size,
  owner)`` inside a block from ``malloc``; ``None``: one buffer per array, the default),
  ``blocks_in_use()``. A block backs one live array at a time, else ``AllocatorError``.
- Errors: ``CompileError`` (compiler output with the learner's file name and line numbers;
  unsupported features such as inline PTX other than the tensor-core lab's (mma.sync, ldmatrix,
  cp.async), grid-wide cooperative groups, dynamic parallelism and textures are reported as needing
  an NVIDIA GPU),
  ``LaunchError`` (CUDA error names, e.g. ``cudaErrorInvalidConfiguration``), ``KernelFault``
  (memory fault, assert, abort, trap, integer division by zero, barrier divergence, check-mode
  findings; attributes ``kernel block thread argument offset nbytes file line kind findings``),
  ``TypeError`` for argument packing mistakes in strict mode.
- Warnings: ``ArgumentWarning`` (CuPy mode packing mismatch), ``BarrierWarning`` (early return
  before a ``__syncthreads()``).

Arguments follow CuPy's packing: device arrays are pointers, NumPy scalars keep their type, a
Python ``int`` is packed as int64 and a Python ``float`` as float64. Strict mode (the default)
raises ``TypeError`` where that does not match the parameter (e.g. a Python float for a ``float``
parameter: pass ``numpy.float32(x)``); CuPy mode reproduces what a GPU would read, with a warning.

Settings (environment, or in code):

- ``MINITORCH_EMU_ARGS=strict|cupy`` / ``set_arg_mode("strict"|"cupy")``.
- ``MINITORCH_EMU_CHECK=1`` / ``with emu.check_mode():``: check mode reports shared-memory races
  (read-after-write, write-after-read, write-after-write in one barrier interval) and reads of
  uninitialised shared memory with the variable and both source lines, out-of-bounds accesses
  to device arrays exactly, and races on device arrays (two threads, one a plain write, not ordered
  by a barrier of their block; threads of different blocks never are), naming the array and index
  (compiled with ``-fsanitize=thread`` instrumentation, no libtsan). A misaligned vector access
  (``float4`` at an address that is not a multiple of 16) faults in every mode, as on a GPU; a
  misaligned scalar (through a cast of a byte pointer) in check mode, and outside it only in the
  functions that can make a wide access (``compiler.without_scalar_alignment_checks``).
- ``MINITORCH_EMU_SCHEDULE=forward|reverse|random`` (``MINITORCH_EMU_SEED``) /
  ``with emu.schedule("reverse"):``: the order in which threads and blocks run.
- ``fuzz_schedules(fn)``: calls ``fn()`` (which launches kernels and returns arrays) under the
  forward, reverse and random schedules and raises ``ScheduleMismatch`` if the results differ,
  which exposes a missing barrier that one order hides. Returns the forward result.
- ``MINITORCH_EMU_WORKERS=N`` / ``with emu.workers(N):``: blocks run on N threads (default 1,
  deterministic; ``auto`` or 0: one per core, faster, but float ``atomicAdd`` from different blocks
  then adds in a varying order, as on a GPU).
- ``MINITORCH_EMU_CACHE``: compile cache directory (default ``~/.cache/minitorch/emu``).
- ``MINITORCH_EMU_STACK_KB``: stack per CUDA thread (default 32 KB).
- ``MINITORCH_EMU_TIMEOUT=seconds`` / ``with emu.time_limit(s):``: a launch that runs longer
  (an endless loop) is stopped with a ``KernelFault`` naming the thread and line (default: no
  limit). Ctrl-C (a Jupyter interrupt) stops a running launch with ``KeyboardInterrupt``.
- ``MINITORCH_EMU_FIBERS=1``: run every kernel with fibers (if a kernel reaches a barrier through
  code the emulator's source scan did not see).
- ``MINITORCH_EMU_SPLIT=0``: no kernel split at its barriers. By default a kernel whose only
  synchronisation is ``__syncthreads()`` in its own body runs each CUDA thread as a C++ coroutine
  instead of a fiber (``split.py``), outside check mode: same results bit for bit, same barrier
  diagnostics.
- ``MINITORCH_EMU_SPECIALIZE=seconds|0`` / ``with emu.specialization(s):``: once a module has spent
  that long in launches (default 2 s), its launches repeated with the same integer arguments (a
  training loop's) run code compiled in the background with those arguments as constants
  (``specialize.py``: divisions by sizes become multiplications); ``0``: never. Same results bit
  for bit, same checks and diagnostics; check mode always runs the generic code.
- ``MINITORCH_EMU_CANONICAL_NAN=1|0``: float32 add, subtract, multiply, divide, square root,
  negation, fabsf and the C library's float functions that make a NaN give the GPU's NaN,
  0x7fffffff (``nancanon.py``), not x86's (which keeps an operand's payload and sign, or makes
  0xffc00000). Unset: in check mode only (it costs about a tenth of the kernels' time).

Names NVRTC does not have are not defined either (``INFINITY``, ``NAN``, ``HUGE_VALF``, ``FLT_MAX``,
``M_PI``, ``INT_MAX`` and the rest of the host's ``<math.h>``, ``<float.h>`` and ``<limits.h>``): a
kernel using one fails to compile, as on a GPU, with a note saying what to write instead
(``__int_as_float(0x7f800000)`` for infinity).

Memory checks: every device array ends flush against a ``PROT_NONE`` guard page, so a read or
write past its end faults at once and is reported with the argument, byte offset, block, thread
and line; a write into the few alignment bytes before the guard page, or just before the start,
is found after the launch (a canary). Static ``__shared__`` arrays sit between red zones that are
checked after each block (a write past their end is reported, never corrupts the process);
dynamic shared memory ends against a guard page. Check mode reports all of these exactly,
including reads before the start of an array, with the thread and line.

Not supported: ``RawModule.get_global`` (set ``__constant__`` data by passing arguments
instead), cubin/PTX input, and the GPU-only features listed under ``CompileError``.

Execution model: blocks run one after another on each worker; a block's threads run as fibers
that switch at barriers and warp primitives (kernels without either run as a plain loop).
``__shared__`` memory is per block and poisoned with 0xFF bytes (NaN) at each block start. Barrier
divergence (threads at different ``__syncthreads()``, or exiting after a barrier while others
wait) is an error; an early ``return`` before the first barrier is a ``BarrierWarning``. Kernel
``printf`` output is printed by Python after the launch (so it appears in Jupyter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import graph
from .compiler import CompileError
from .config import check_mode, set_arg_mode, specialization, time_limit
from .config import schedule_order as schedule
from .config import worker_count as workers
from .errors import (
    AllocatorError,
    ArgumentWarning,
    BarrierWarning,
    EmuWarning,
    KernelFault,
    LaunchError,
    RaceWarning,
    ScheduleMismatch,
)
from .graph import Graph, begin_capture, end_capture, is_capturing
from .launch import Kernel, RawModule
from .memory import (
    DeviceArray,
    UnownedMemory,
    asarray,
    asnumpy,
    blocks_in_use,
    empty,
    free,
    get_allocator,
    malloc,
    set_allocator,
    zeros,
)
from .specialize import specialize_now

__all__ = [
    "AllocatorError", "UnownedMemory", "blocks_in_use", "free", "get_allocator", "malloc", "set_allocator",
    "ArgumentWarning", "BarrierWarning", "CompileError", "DeviceArray", "EmuWarning", "Graph", "Kernel",
    "KernelFault", "LaunchError", "RaceWarning", "RawKernel", "RawModule", "ScheduleMismatch", "asarray", "asnumpy",
    "begin_capture", "check_mode", "empty", "end_capture", "fuzz_schedules", "get_arg_mode", "is_capturing",
    "is_device_array", "schedule", "set_arg_mode", "specialization", "specialize_now", "synchronize", "time_limit",
    "workers", "zeros",
]


def synchronize() -> None:
    """Launches are synchronous on the emulator: nothing to wait for. While a graph is being captured,
    raises as CUDA does (a capturing stream cannot be waited for)."""
    graph.refuse_during_capture("synchronizing the stream")


def is_device_array(x: Any) -> bool:
    return isinstance(x, DeviceArray)


def get_arg_mode() -> str:
    from .config import arg_mode

    return arg_mode()


def RawKernel(code: str, name: str, options: tuple[str, ...] = (), **kw: Any) -> Kernel:  # noqa: N802 (CuPy's name)
    """``cupy.RawKernel(code, name)``: a module with one kernel."""
    return RawModule(code=code, options=options, **kw).get_function(name)


def _host(x: Any) -> Any:
    if isinstance(x, DeviceArray):
        return x.get()
    if isinstance(x, (list, tuple)):
        return [_host(v) for v in x]
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return np.asarray(x) if isinstance(x, (np.ndarray, np.generic, int, float)) else x


def _diff(a: Any, b: Any, rtol: float, atol: float, path: str = "output") -> str | None:
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = _diff(x, y, rtol, atol, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict):
        for k in a:
            d = _diff(a[k], b.get(k), rtol, atol, f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(a, np.ndarray):
        b = np.asarray(b)
        if a.shape != b.shape:
            return f"{path}: shapes {a.shape} and {b.shape}"
        if a.dtype.kind in "fc":
            ok = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = a == b
        if not np.all(ok):
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            return f"{path}{list(idx)}: {a[idx]!r} vs {b[idx]!r} ({int((~ok).sum())} element(s) differ)"
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def fuzz_schedules(fn: Callable[[], Any], schedules: tuple[str, ...] = ("forward", "reverse", "random"),
                   seeds: tuple[int, ...] = (1, 2), rtol: float = 1e-5, atol: float = 1e-6) -> Any:
    """Run ``fn()`` under several thread/block orders and compare what it returns.

    ``fn`` launches kernels (on fresh inputs each call) and returns device or NumPy arrays (or a
    list/tuple/dict of them). A result that depends on the order in which threads run means a
    missing ``__syncthreads()``/``__syncwarp()`` or a race: ``ScheduleMismatch`` names the first
    differing element. Returns the forward-order result (on the host).
    """
    runs: list[tuple[str, Any]] = []
    for s in schedules:
        for seed in (seeds if s == "random" else (0,)):
            with schedule(s, seed):
                runs.append((s if s != "random" else f"random(seed={seed})", _host(fn())))
    ref_name, ref = runs[0]
    for name, out in runs[1:]:
        d = _diff(ref, out, rtol, atol)
        if d:
            raise ScheduleMismatch(
                f"the result depends on the order in which threads run ({ref_name} vs {name}): {d}. A "
                "__syncthreads() is probably missing between a write to shared memory and a read of it by another "
                "thread (or a __syncwarp() inside a warp: warp-synchronous code that relies on lanes running in "
                "lockstep is not safe since Volta GPUs); run with MINITORCH_EMU_CHECK=1 to find the lines.",
                kind="schedule")
    return ref

