"""Helpers for graded tests: seeds, odd sizes, poisoning, comparisons, launch records, GPU timing.

Everything here imports minitorch lazily, so `grader status` and `grader labs` work without it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from grader import paths

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

# Sizes that are not multiples of any block size: 1, primes, and a large prime-ish size.
ODD_SIZES: tuple[int, ...] = (1, 7, 31, 257, 4099, 1_000_003)
PERF_BYTES = 256 << 20  # 256 MiB: large enough that launch overhead is noise on any GPU


class GradeError(AssertionError):
    """A graded check failed; the message is written for the learner."""


class WrongValuesError(GradeError):
    """A value check failed (not a contract: a launch shape, a launch count, an error message): what the
    emulator's check mode finds in the launches behind it explains it (grader/tests/conftest.py)."""


# The words of a value check's failure (assert_close, assert_bitwise_equal), kept when a test re-raises it
# as a plain GradeError with more to say.
WRONG_VALUES_WORDS = ("values differ (rtol=", "values are not bit-identical")


# ---------------------------------------------------------------- seeds

_seed: int | None = None


def seed() -> int:
    """This run's seed: GRADER_SEED if set (to reproduce a run), else fresh. Printed once."""
    global _seed
    if _seed is None:
        env = os.environ.get("GRADER_SEED")
        _seed = int(env) if env else secrets.randbits(31)
        print(f"grader seed: {_seed} (reproduce with GRADER_SEED={_seed})", file=sys.stderr)
    return _seed


def rng(*salt: object) -> np.random.Generator:
    """A generator from the run's seed and a salt (e.g. the test and size), independent per check."""
    key = [seed()] + [zlib.crc32(repr(s).encode()) for s in salt]
    return np.random.default_rng(key)


# ---------------------------------------------------------------- devices


def gpu_available() -> bool:
    """True when the active minitorch device is a real GPU (cuda)."""
    from minitorch import backend

    return backend.get_device() == "cuda"


def device_description() -> str:
    from minitorch import backend

    return backend.get_backend().describe()


def to_host(x: Any) -> np.ndarray:
    """NumPy copy of a device array, a Tensor or a host array."""
    from minitorch import backend

    if hasattr(x, "numpy") and hasattr(x, "device") and not isinstance(x, np.ndarray):
        return x.numpy()
    if isinstance(x, np.ndarray):
        return x
    return backend.asnumpy(x)


# The poison: a quiet NaN with a payload no arithmetic produces (0/0 gives 0x7FFFFFFF on a GPU,
# 0xFFC00000 on a CPU), so "never written" can be told from "a NaN the kernel computed".
POISON_BITS = {np.dtype(np.float32): (np.uint32, 0x7FC0DEAD), np.dtype(np.float64): (np.uint64, 0x7FF80000DEAD0000)}


def poisoned_host(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A host array of the poison (floats: a NaN with the grader's payload; integers: their max value)."""
    host = np.empty(shape, dtype=dtype)
    if host.dtype in POISON_BITS:
        view, bits = POISON_BITS[host.dtype]
        host.view(view).fill(bits)
    else:
        host.fill(np.nan if np.issubdtype(host.dtype, np.floating) else np.iinfo(host.dtype).max)
    return host


def is_poison(values: np.ndarray) -> np.ndarray:
    """Which elements still hold the poison's exact bit pattern (never written since poisoned)."""
    values = np.asarray(values)
    if values.dtype not in POISON_BITS:
        return np.isnan(values) if np.issubdtype(values.dtype, np.floating) else np.zeros(values.shape, bool)
    view, bits = POISON_BITS[values.dtype]
    return np.ascontiguousarray(values).view(view) == bits


def poison(shape: int | tuple[int, ...], dtype: Any = np.float32) -> Any:
    """A device array full of the poison (see poisoned_host): anything left unwritten shows."""
    from minitorch import backend

    return backend.asarray(poisoned_host(shape, dtype))


def view_at_alignment(buffer: Any, n: int, aligned: bool) -> Any:
    """A view of n elements of the 1-D device array `buffer` (at least 8 elements longer) that starts at a
    16-byte boundary, or not: a launcher that takes 16-byte accesses must tell them apart (the grader's copies
    for the learner's process keep where an array starts)."""
    for start in range(8):
        view = buffer[start:start + n]
        if (view.data.ptr % 16 == 0) == aligned:
            return view
    raise AssertionError("no view of the wanted alignment")  # unreachable: elements of 2 or 4 bytes


def assert_untouched_around(buffer: Any, view: Any, what: str) -> None:
    """The elements of the poisoned `buffer` before and after its view `view` still hold the poison."""
    host = to_host(buffer)
    start = (view.data.ptr - buffer.data.ptr) // host.itemsize
    outside = np.concatenate([host[:start], host[start + view.size:]])
    if outside.tobytes() != poisoned_host(outside.shape, outside.dtype).tobytes():
        raise GradeError(f"{what}: an element outside the array was written (the array is a view of a larger "
                         f"buffer: the kernels wrote past its start or end)")


# ---------------------------------------------------------------- comparisons


def _fmt_index(idx: tuple[int, ...]) -> str:
    return str(idx[0]) if len(idx) == 1 else "(" + ", ".join(map(str, idx)) + ")"


def assert_close(got: Any, expected: Any, *, rtol: float = 1e-6, atol: Any = 0.0, what: str = "output") -> None:
    """Compare against an independent float64 reference; explain the first difference. ``atol``: a number, or an
    array of the reference's shape (a bound per element).

    NaN matches NaN and equal infinities match; a NaN where a number was expected is reported as
    "never written" because outputs are poisoned with NaN before launches.
    """
    got_h = np.asarray(to_host(got))
    exp = np.asarray(to_host(expected), dtype=np.float64)
    if got_h.shape != exp.shape:
        raise GradeError(f"{what}: shape {got_h.shape}, expected {exp.shape}")
    g = got_h.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isclose(g, exp, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return
    bad = ~ok
    n_bad = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if exp.ndim else ()
    e, v = exp[first].item(), g[first].item()
    note = ""
    if math.isnan(v) and not math.isnan(e):
        note = (" (still NaN: poisoned before the launch and never written)" if is_poison(got_h[first]).item()
                else " (a NaN computed by the kernel: 0/0, inf - inf, or the square root or log of a negative?)")
    finite = bad & np.isfinite(g) & np.isfinite(exp)
    lines = [
        f"{what}: {n_bad} of {exp.size} values differ (rtol={rtol:g}, atol="
        + (f"{atol:g}" if np.ndim(atol) == 0 else f"{float(np.broadcast_to(atol, exp.shape)[first]):g} there") + ")",
        f"  first bad index {_fmt_index(first) if first else '()'}: expected {e!r}, got {v!r}{note}",
    ]
    if finite.any():
        abs_err = np.abs(g[finite] - exp[finite])
        rel_err = abs_err / np.maximum(np.abs(exp[finite]), np.finfo(np.float64).tiny)
        max_abs, max_rel = float(abs_err.max()), float(rel_err.max())
        lines.append(f"  max abs error {max_abs:.3g}, max rel error {max_rel:.3g}")
        # Rounding, not a logic error: most values are off, each by a tiny relative amount that varies from
        # value to value (a logic error is usually far off somewhere, or off by one constant factor).
        spread = float(np.std(rel_err) / np.mean(rel_err)) if np.mean(rel_err) > 0 else 0.0
        if (finite.sum() == n_bad and n_bad >= max(2, exp.size // 4) and max_rel < 2e-3 and spread > 0.3):
            lines.append("  precision loss: the wrong values are within 1% of the right ones; is something computed or "
                         "stored in lower precision (half, a fast-math intrinsic) than float32?")
    else:
        lines.append("  max abs / rel error: not defined (every wrong value is NaN or infinite)")
    nan_bad = int((bad & np.isnan(g)).sum())
    if nan_bad and n_bad > 1:
        unwritten = int((bad & is_poison(got_h)).sum()) if got_h.shape == bad.shape else 0
        lines.append(f"  {'all' if nan_bad == n_bad else nan_bad} of them are NaN where a number was expected"
                     + (f" ({unwritten} never written)" if unwritten else " (computed, not left unwritten)"))
    raise WrongValuesError("\n".join(lines))


def assert_bitwise_equal(got: Any, expected: Any, *, what: str = "output") -> None:
    """Exact bit patterns: -0.0, NaN payloads and denormals must survive a copy."""
    got_h = np.ascontiguousarray(to_host(got))
    exp = np.ascontiguousarray(to_host(expected))
    if got_h.shape != exp.shape or got_h.dtype != exp.dtype:
        raise GradeError(f"{what}: got {got_h.dtype}{got_h.shape}, expected {exp.dtype}{exp.shape}")
    view = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(exp.dtype.itemsize, np.uint8)
    gb, eb = got_h.view(view), exp.view(view)
    bad = gb != eb
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if exp.ndim else ()
    width = exp.dtype.itemsize * 2
    raise WrongValuesError(
        f"{what}: {int(bad.sum())} of {exp.size} values are not bit-identical\n"
        f"  first bad index {_fmt_index(first) if first else '()'}: expected {exp[first].item()!r} "
        f"(0x{int(eb[first]):0{width}x}), got {got_h[first].item()!r} (0x{int(gb[first]):0{width}x})")


# ---------------------------------------------------------------- memory faults


# What went wrong, by the emulator's KernelFault.kind (and CUDA's error names): a headline and the fix
# to try first. Each fault class gets its own, so a barrier problem is never reported as a bad index.
FAULTS: dict[str, tuple[str, str]] = {
    "out-of-bounds": ("out-of-bounds memory access", "an index past n? the wrong argument? a missing bounds check?"),
    "illegal-address": ("illegal memory access", "a pointer that is not a device array, or an index far out of range"),
    "barrier-divergence": ("barrier divergence", "every thread of a block must reach each __syncthreads(): keep idle "
                           "threads in the loop and guard only their loads and stores, never return early"),
    "early-return": ("a thread returned before a __syncthreads() the others reached", "undefined behaviour in "
                     "CUDA: keep every thread alive up to the last __syncthreads() and guard only its loads and "
                     "stores"),
    "warp": ("warp primitive misuse", "the mask of a __shfl_*_sync / __syncwarp must name exactly the lanes that "
             "call it (0xffffffff when the whole warp does)"),
    "read-after-write": ("shared-memory race", "a __syncthreads() is missing between a write to shared memory and "
                         "another thread's read of it"),
    "write-after-read": ("shared-memory race", "a __syncthreads() is missing before shared memory is overwritten "
                         "while other threads may still read it"),
    "write-after-write": ("shared-memory race", "two threads write one shared-memory location with no "
                          "__syncthreads() in between"),
    "device-race": ("device-memory race", "threads that add into one element of device memory need atomicAdd (a "
                    "plain += loses updates on a GPU); otherwise give each element a single writer, and order "
                    "phases with __syncthreads() (one block) or a second launch (several blocks)"),
    "misaligned": ("misaligned address", "a float4 (or other vector) access needs an address that is a multiple of "
                   "its size: check the row starts and the tail, and take scalar loads where they are not aligned"),
    "uninitialised-read": ("read of uninitialised shared memory", "a thread reads shared memory no thread wrote: "
                           "check the loads into the tile (and the padding of the last tile), and that a second "
                           "stage reads only the slots the first wrote (one a warp: blockDim.x / 32 of them)"),
    "timeout": ("kernel never finished", "a loop that never ends: does every loop's counter advance?"),
    "division-by-zero": ("integer division by zero", "guard the divisor"),
    "stack-overflow": ("stack overflow", "a large per-thread array: put it in shared or global memory"),
    "assert": ("device assert failed", "read the assert's condition and its line"),
    "trap": ("kernel trapped", "read the message and the line"),
    "abort": ("kernel aborted", "read the message and the line"),
    "invalid-configuration": ("invalid launch configuration", "every grid and block dimension must be at least 1 "
                              "(a grid of 0 blocks for an empty input?) and a block at most 1024 threads"),
}


def fault_kind(exc: BaseException | None) -> str | None:
    """The kind of kernel fault behind `exc` (a key of FAULTS), or None if it is not one."""
    while exc is not None:
        kind = getattr(exc, "kind", None)
        if type(exc).__name__ == "KernelFault" and kind in FAULTS:
            return kind
        if type(exc).__name__ == "BarrierWarning":  # raised as an error by the grader's warning filter
            return "early-return"
        text = str(exc)
        if "cudaErrorInvalidConfiguration" in text or "invalid configuration argument" in text:
            return "invalid-configuration"
        if type(exc).__name__ == "KernelFault" or "IllegalAddress" in text or "illegal memory" in text:
            return "out-of-bounds"
        exc = exc.__cause__ or exc.__context__
    return None


def is_memory_fault(exc: BaseException | None) -> bool:
    """True when the emulator's KernelFault or a CUDA illegal-address error is behind `exc`."""
    while exc is not None:
        if type(exc).__name__ == "KernelFault" or "IllegalAddress" in str(exc) or "illegal memory" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def launch_checked(what: str, fn: Callable[[], Any]) -> Any:
    """Run a launch (or anything that launches) and synchronise; report a kernel fault under the
    headline of its own kind (FAULTS). The fault's own message names the kernel, its file and the
    launch configuration, and on the emulator the argument, byte offset, thread and source line."""
    from minitorch import backend

    try:
        result = fn()
        backend.synchronize()
    except Exception as exc:
        kind = fault_kind(exc)
        if kind is None:
            raise
        headline, fix = FAULTS[kind]
        raise GradeError(f"{what}: {headline}:\n  {exc}\n  what to check: {fix}") from exc
    return result


# Faults the emulator's check mode finds in a kernel whose values were wrong: each explains wrong values
# better than the failing test's own advice (a grid-stride hint for a sum that read unwritten shared slots).
_CHECK_MODE_KINDS = ("uninitialised-read", "read-after-write", "write-after-read", "write-after-write",
                     "out-of-bounds", "illegal-address", "barrier-divergence", "early-return", "warp")
CHECK_MODE_SOURCE = "the emulator's check mode"
CHECK_MODE_MAX_BYTES = 64 << 20  # a GPU test's arrays copied to the emulator at most (its check mode is slow)


def _latest_distinct(launches: list, limit: int) -> list:
    """The latest `limit` launches of distinct kernels and configurations, oldest first."""
    seen: set[tuple] = set()
    chosen = []
    for launch in reversed(list(launches)):
        key = (launch.kernel.filename, launch.kernel.function, launch.grid, launch.block)
        if key not in seen:
            seen.add(key)
            chosen.append(launch)
        if len(chosen) == limit:
            break
    return chosen[::-1]


def _check_mode_report(exc: BaseException, function: str, filename: str, grid: tuple, block: tuple) -> str | None:
    kind = fault_kind(exc)
    if kind not in _CHECK_MODE_KINDS:
        return None
    headline, fix = FAULTS[kind]
    detail = str(exc).split(": ", 1)[-1] if str(exc).startswith("kernel `") else str(exc)
    # Without the emulator's CUDA error code: the report would take the note for a crash of the CUDA context.
    detail = _without_error_code(detail)
    return (f"{CHECK_MODE_SOURCE}, running `{function}` ({filename}, grid {tuple(grid)}, block {tuple(block)}) again, "
            f"found why: {headline}:\n  {detail}\n  what to check: {fix}")


def check_mode_finding(launches: list, *, limit: int = 8, in_process: bool | None = None) -> str | None:
    """Launch the latest `limit` distinct launches of `launches` (a ``kernels.recording()`` list) again in
    the emulator's check mode, on copies of their arrays, and describe the first race, uninitialised
    shared-memory read or out-of-bounds access found ("{headline}: ... what to check: {fix}"), or None.

    For a failed value check: the values say something is wrong, the emulator says what. On the emulator it
    runs here; on a GPU (or with ``in_process=False``) in a subprocess on the emulator, the arrays copied to
    the host first (none past CHECK_MODE_MAX_BYTES in all), the learner's files compiled there again."""
    from minitorch import backend

    device = backend.get_device()
    if device not in ("emu", "cuda") or not launches:
        return None
    chosen = _latest_distinct(launches, limit)
    if in_process is None:
        in_process = device == "emu"
    if not in_process:
        return _check_mode_in_subprocess(chosen)
    from minitorch import emu

    for launch in chosen:
        copies = {id(a): a.copy() for a in launch.args if backend.is_device_array(a)}
        try:
            with emu.check_mode():
                launch.replay(copies)
        except Exception as exc:  # noqa: BLE001 - only a kernel fault found by the check matters
            found = _check_mode_report(exc, launch.kernel.function, launch.kernel.filename, launch.grid,
                                       launch.block)
            if found:
                return found
    return None


def _check_mode_in_subprocess(chosen: list, timeout_s: float = 120) -> str | None:
    import pickle
    import subprocess
    import tempfile
    from pathlib import Path

    from minitorch import backend

    payload, total = [], 0
    for launch in chosen:
        args = []
        for a in launch.args:
            if backend.is_device_array(a):
                total += a.nbytes
                args.append(("array", None if total > CHECK_MODE_MAX_BYTES else to_host(a)))
            else:
                args.append(("value", a))
        payload.append((launch.kernel.filename, launch.kernel.function, launch.grid, launch.block, args,
                        launch.shared_mem))
    if total > CHECK_MODE_MAX_BYTES:
        return None
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "MINITORCH_DEVICE": "emu",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("MINITORCH_LAUNCH_TRACE", None)  # the test process's record of its own last launch
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "launches.pickle"
        path.write_bytes(pickle.dumps(payload))
        try:
            proc = subprocess.run([sys.executable, "-c", "import sys; from grader.checks import _check_mode_worker; "
                                   "_check_mode_worker(sys.argv[1])", str(path)],
                                  capture_output=True, text=True, env=env, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError):  # a diagnosis only: without it the failure stands as it is
            return None
    return proc.stdout.strip() or None


def _check_mode_worker(path: str) -> None:
    """The subprocess of _check_mode_in_subprocess: each launch on the emulator, in check mode; prints the
    first finding."""
    import pickle

    from minitorch import backend, emu, kernels

    with open(path, "rb") as fh:
        payload = pickle.load(fh)  # noqa: S301 - written by the grader's own test process
    for filename, function, grid, block, args, shared_mem in payload:
        try:
            kernel = kernels.load_kernel(filename, function)
            values = [backend.asarray(v) if kind == "array" else v for kind, v in args]
            with emu.check_mode():
                kernel(grid, block, tuple(values), shared_mem=shared_mem)
        except Exception as exc:  # noqa: BLE001 - only a kernel fault found by the check matters
            found = _check_mode_report(exc, function, filename, grid, block)
            if found:
                print(found)
                return


# ---------------------------------------------------------------- grid-stride contracts

SMALL_GRID, SMALL_BLOCK = 3, 64  # 192 threads: far fewer than the elements of any grid-stride test
GRID_CAP_ELEMENTS = 16384 * 256 + 1001  # past what the labs' capped launchers cover with one element a thread


def assert_grid_stride(what: str, kernel: Any, args: tuple, outputs: dict[str, tuple[Any, Any]], *,
                       rtol: float = 1e-6, atol: float = 0.0, grid: int = SMALL_GRID, block: int = SMALL_BLOCK) -> None:
    """Launch the learner's `kernel` itself with a deliberately small grid (3 blocks of 64 threads) and
    check every element of each output ({name: (device array, float64 expected)}). A kernel written one
    thread per element (a bounds check, no loop) passes every test whose launcher gives it enough blocks,
    and leaves elements unwritten once the data outgrow the launcher's grid cap."""
    launch_checked(what, lambda: kernel((grid,), (block,), args))
    for name, (out, expected) in outputs.items():
        with grid_stride_advice(out, grid, block):
            assert_close(to_host(out), expected, rtol=rtol, atol=atol, what=f"{what}: {name}")


@contextlib.contextmanager
def grid_stride_advice(out: Any, grid: int = SMALL_GRID, block: int = SMALL_BLOCK) -> Iterator[None]:
    """Around the value check of a kernel launched with `grid` x `block` threads: when it fails with only
    part of the poisoned `out` written, add that count and the grid-stride advice to the error (for checks
    that compare values their own way, e.g. with per-op tolerances)."""
    try:
        yield
    except GradeError as err:
        host_out = np.asarray(to_host(out))
        written = int(np.count_nonzero(~is_poison(host_out)))
        if 0 < written < host_out.size:
            raise GradeError(f"{err}\n  only {written} of {host_out.size} elements were written by the "
                             f"{grid} x {block} = {grid * block} threads: a grid-stride loop "
                             f"(i += gridDim.x * blockDim.x) lets any grid cover any n") from None
        raise


# ---------------------------------------------------------------- launch records


def reset_launches() -> None:
    from minitorch import kernels

    kernels.reset_launch_counts()


def require_launch(file: str, function: str) -> None:
    """Fail unless the learner's kernel was launched (since the last reset_launches())."""
    from minitorch import kernels

    if kernels.launch_count(file, function) == 0:
        raise GradeError(f"no launch of `{function}` from {file} was recorded: "
                           f"the result was computed without your kernel")


@contextlib.contextmanager
def expect_launch(file: str, function: str) -> Iterator[None]:
    reset_launches()
    yield
    require_launch(file, function)


def _pointer(a: Any) -> int | None:
    """The device address of an array (CuPy: .data.ptr; the emulator: .ptr), None for anything else."""
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None) if data is not None and not isinstance(a, np.ndarray) else None
    if ptr is None:
        ptr = getattr(a, "ptr", None)
    return int(ptr) if isinstance(ptr, (int, np.integer)) else None


# The errors CUDA (and the emulator, which copies its wording) raises for work a graph cannot capture: a copy
# between host and device, or a wait for the device (every read back to the host waits).
# CUDA's refusals, and CuPy's own: CuPy refuses a transfer on a capturing stream before calling CUDA
# ("the current stream is capturing, so D2H transfers are disallowed"), seen on an H200.
_CAPTURE_REFUSALS = ("cudaErrorStreamCapture", "operation not permitted when stream is capturing",
                     "CUDA_ERROR_STREAM_CAPTURE", "the current stream is capturing")


def _capture_refusal(exc: BaseException | None) -> BaseException | None:
    """The error in `exc`'s chain that refused work during a graph capture, or None."""
    while exc is not None:
        if any(word in str(exc) for word in _CAPTURE_REFUSALS):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# In the failure of a launcher that copies between host and device (tests_step gives it its own hint).
HOST_COPY = "copied data between the host and the device"
HOST_COPY_HINT = ("compute the result with your kernels, on the device: the launcher only checks its arguments and "
                  "launches; nothing read back (.get(), asnumpy, .item()) or written from the host (.set(), asarray "
                  "of a NumPy result) before, after or instead of the launch")


def _without_error_code(exc: BaseException) -> str:
    """The refusal's words without CUDA's error code: the report reads a cudaError as a crash of the kernel."""
    return re.sub(r"\b(cudaError\w*|CUDA_ERROR_\w*):?\s*", "", str(exc)).strip()


def run_without_host_transfers(what: str, call: Callable[[], Any]) -> Any:
    """Run a launcher call, refusing it if it copies between host and device; return what it returned.

    The call is first captured into a graph (``minitorch.graph.capture``) that is thrown away, its launches
    neither counted nor recorded: a launcher that only checks its arguments and launches kernels captures
    cleanly, while a host-to-device write (``.set()``, ``asarray`` of a NumPy result, ``copyto`` from the host)
    or a read back (``.get()``, ``asnumpy``, ``.item()``, a synchronisation) is refused during the capture, as
    in a captured training step, on the emulator and on a GPU alike. A result computed on the host and written
    over (or instead of) the kernel's is refused even when it equals the kernel's to the last bit, which no
    comparison of values can tell. Then the call is made for real (so a kernel fault is reported at its own
    launch, naming its kernel). A refused call that launches no kernel at all is made as it is, for the
    caller's launch checks to name the kernel that never ran."""
    from minitorch import backend, graph, kernels

    if backend.get_device() not in ("cuda", "emu"):
        return launch_checked(what, call)
    refusal = None
    with kernels.unrecorded():
        try:
            graph.capture(call)
        except Exception as exc:  # noqa: BLE001 - anything but a refused copy is the real call's to raise
            refusal = _capture_refusal(exc)
    if refusal is None:
        return launch_checked(what, call)
    with kernels.recording() as eager:
        result = launch_checked(what, call)
    if not eager:
        return result
    raise GradeError(
        f"{what}: the launcher {HOST_COPY} during the call, which a captured step refuses "
        f"({_without_error_code(refusal)}). Its result must come from your kernels, computed on the device: nothing "
        f"read back (.get(), asnumpy, .item()) or written from the host (.set(), asarray of a NumPy result, copyto) "
        f"after or instead of the launch")


def assert_computed_on_device(what: str, call: Callable[[], Any], inputs: tuple = (), outputs: tuple = (),
                              in_place: tuple = (), *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Run a launcher, then launch the kernels it launched again, by the grader, into fresh buffers, and
    require the same results: a result the launcher wrote another way (computed on the host with NumPy and
    copied in after a launch, say) is not what its kernels compute.

    `inputs` are the arrays given to the launcher that it must only read; `outputs` are written (their
    fresh copies start at zero, as do the launcher's own scratch buffers, which are found by address);
    `in_place` are read and written (their fresh copies start at the values they had before the call)."""
    from grader import learner_process

    before = {_pointer(a): to_host(a).copy() for a in in_place}
    # (isolated on a GPU: the call's arrays stay mapped at the same addresses in the learner's process until the
    # replays are done, for launches that pass device addresses in data)
    with learner_process.mappings_kept():
        fresh = _call_and_replay(what, call, inputs, before)
    if fresh is None:
        return
    for name, a in [(f"output {i}", a) for i, a in enumerate(outputs)] + [
            (f"in-place argument {i}", a) for i, a in enumerate(in_place)]:
        replayed = fresh.get(_pointer(a))
        if replayed is None:
            raise GradeError(f"{what}: {name} was passed to none of your kernels: it was written another way")
        got, again = np.asarray(to_host(a), np.float64), np.asarray(to_host(replayed), np.float64).reshape(
            np.shape(to_host(a)))
        with np.errstate(invalid="ignore"):
            same = np.isclose(got, again, rtol=rtol, atol=atol, equal_nan=True)
        if not same.all():
            i = int(np.flatnonzero(~same.reshape(-1))[0])
            raise GradeError(
                f"{what}: {name} holds values your kernels did not compute: launching the same kernels again "
                f"gives {again.reshape(-1)[i]!r} at index {i} where the launcher left {got.reshape(-1)[i]!r}. "
                f"Compute the result on the device, with your kernel; do not write it from the host (NumPy, "
                f"CuPy, .set(), asarray) after the launch")


def _call_and_replay(what: str, call: Callable[[], Any], inputs: tuple,
                     before: dict[int, np.ndarray]) -> dict[int, Any] | None:
    """assert_computed_on_device's call and replays: {address: the fresh buffer its launches were replayed into},
    or None when there is nothing to compare (an address seen with two sizes)."""
    from minitorch import backend, kernels

    with kernels.recording() as launches:
        run_without_host_transfers(what, call)
    if not launches:
        raise GradeError(f"{what}: no kernel launch was recorded: the result was computed without your kernels")
    keep = {_pointer(a) for a in inputs}
    fresh: dict[int, Any] = {}  # address -> a fresh buffer standing in for the one at that address
    substitute: dict[int, Any] = {}  # id(argument) -> the fresh view to pass instead
    for launch in launches:
        for arg in launch.args:
            ptr = _pointer(arg)
            if ptr is None or ptr in keep or id(arg) in substitute:
                continue
            base = fresh.get(ptr)
            if base is None:
                base = fresh[ptr] = (backend.asarray(before[ptr]) if ptr in before
                                     else backend.zeros(arg.shape, arg.dtype))
            if base.size != arg.size:
                return None  # the same address seen with another size (a slice): nothing this check can compare
            substitute[id(arg)] = base.reshape(arg.shape)
    backend.synchronize()
    for launch in launches:
        launch.replay(substitute)
    backend.synchronize()
    return fresh


def expect_error(what: str, fn: Callable[[], Any], error: type[Exception], *must_name: str) -> None:
    """`fn` must raise `error` naming each of `must_name` (what was expected and what came), before
    launching any kernel: a launcher checks its arguments first."""
    from minitorch import kernels

    reset_launches()
    try:
        fn()
    except error as err:
        missing = [s for s in must_name if s not in str(err)]
        if missing:
            raise GradeError(f"{what}: the {error.__name__} must name what was expected and what came "
                             f"({', '.join(missing)} missing): {err}") from None
    else:
        raise GradeError(f"{what}: expected a {error.__name__} naming {', '.join(must_name)}, got no error")
    launched = [f"{file}:{function}" for (file, function), n in kernels.launch_counts().items() if n]
    if launched:
        raise GradeError(f"{what}: a kernel ({launched[0]}) was launched before the {error.__name__}: "
                         f"check the arguments first")


# ---------------------------------------------------------------- thresholds


def thresholds() -> dict[str, Any]:
    path = os.environ.get("GRADER_THRESHOLDS") or paths.THRESHOLDS_TOML
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def threshold(key: str) -> float:
    """A value of grader/thresholds.toml by dotted key, e.g. 'phase1.fill'."""
    node: Any = thresholds()
    for part in key.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError):
            raise KeyError(f"threshold {key!r} is missing from {paths.THRESHOLDS_TOML}") from None
    return float(node)


# ---------------------------------------------------------------- GPU timing


_GRADING_ONLY_ENV = ("MINITORCH_SYNC_LAUNCHES", "MINITORCH_LAUNCH_TRACE")


@contextlib.contextmanager
def _async_launches() -> Iterator[None]:
    """The grader makes every launch synchronous and traced (to attribute faults and hangs);
    timing needs plain asynchronous launches."""
    saved = {k: os.environ.pop(k) for k in _GRADING_ONLY_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def l2_flush_buffer() -> Any:
    """A device buffer twice the L2 size: reading it evicts whatever the last repetition cached.

    Reading, not writing: a written flush leaves L2 full of dirty lines, and the timed kernel would
    then pay for writing them back (seen on an H200: a 64 MiB copy timed at half its bandwidth)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    l2 = int(props.get("l2CacheSize", 0)) or (50 << 20)
    return cupy.empty(max(2 * l2, 1 << 20) // 4, dtype=np.float32)


_SPIN_SOURCE = r"""
extern "C" __global__ void grader_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def _gpu_delay(seconds: float = 200e-6) -> Callable[[], None]:
    """Enqueue a kernel that keeps the GPU busy for `seconds`.

    Launched before the start event, it lets the host enqueue fn() (Python launch overhead,
    load_kernel's file read) while the GPU is busy, so events time the GPU work only.
    """
    import cupy

    kernel = cupy.RawKernel(_SPIN_SOURCE, "grader_spin")
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    cycles = np.int64(int(props.get("clockRate", 1_500_000)) * 1000 * seconds)  # clockRate is in kHz
    return lambda: kernel((1,), (1,), (cycles,))


def time_with_fresh_inputs(launcher: Callable[..., Any], make_call: Callable[[int], tuple[tuple, dict]],
                           check: Callable[[int, tuple, Any], None], *, reps: int = 5, warmup: int = 1) -> float:
    """Seconds one call of the learner's `launcher` takes, by the grader's own clock: `warmup` calls, then `reps`
    calls run back to back, each on fresh inputs (``make_call(i) -> (args, kwargs)``; negative i for the warm-up),
    in the learner's process when its code is isolated (``learner_process.timed_calls``: one request, the clock
    around it). Then every timed call's outputs are checked (``check(i, args, result)`` raises GradeError): a
    launcher that keeps a result and hands it back for later calls fails here as in any value check, and a timer
    patched by the learner's code is not this one."""
    from grader import learner_process

    learner_process.timed_calls(launcher, [make_call(-1 - i) for i in range(warmup)])
    calls = [make_call(i) for i in range(reps)]
    seconds, results = learner_process.timed_calls(launcher, calls)
    for i, ((args, _), result) in enumerate(zip(calls, results, strict=True)):
        check(i, args, result)
    return seconds / max(reps, 1)


def time_cuda(fn: Callable[[], Any], *, warmup: int = 3, min_reps: int = 10, max_reps: int = 200,
              max_time_s: float = 2.0, flush_l2: bool = True, hide_host_overhead: bool = True) -> float:
    """Median seconds of fn() by CUDA events, after warm-up, L2 flushed before each repetition.

    ``hide_host_overhead`` keeps the GPU busy while the host enqueues fn(), so only GPU work is
    timed. Turn it off for host<->device copies: the driver stages a pageable copy on the host, and
    that host work must count.

    Repeats adaptively: at least min_reps, then until max_time_s or max_reps.
    """
    import cupy

    flush = l2_flush_buffer() if flush_l2 else None
    delay = _gpu_delay() if hide_host_overhead else (lambda: None)
    with _async_launches():
        for _ in range(warmup):
            fn()
        cupy.cuda.get_current_stream().synchronize()
        times: list[float] = []
        start_wall = time.perf_counter()
        while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() - start_wall < max_time_s):
            if flush is not None:
                flush.max()  # a read of every line; its result is never needed
            delay()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
    return statistics.median(times)


def _time_learner(name: str, learner_fn: Callable[[], Any], **options: Any) -> tuple[float, int | None]:
    """Seconds of one call of `learner_fn`: by the judge's clock around replays of the learner's calls on fresh
    inputs when the learner's code runs in its own process (``learner_process.time_replayed``), by CUDA events
    here otherwise (or when `learner_fn` calls none of the learner's code, a framework copy say). Second: the
    number of fresh sets of arrays the replays went through, None when they went through none."""
    from grader import learner_process
    from minitorch import kernels

    if kernels.learner_code_elsewhere():
        learner_process.last_timing.clear()
        seconds = learner_process.time_replayed(learner_fn, what=name)
        if seconds is not None:
            return seconds, learner_process.last_timing.get("reps")
    return time_cuda(learner_fn, **options), None


def _is_device_array(v: Any) -> bool:
    """A CuPy array or a PyTorch tensor on the GPU that a fresh set may stand in for: contiguous, and (for a tensor)
    no part of an autograd graph (a tensor a graph recorded cannot be swapped for another without breaking it)."""
    if type(v).__module__.startswith("cupy") and hasattr(v, "data") and hasattr(v, "flags"):
        return bool(v.flags.c_contiguous)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return bool(v.is_cuda and v.is_contiguous() and not v.requires_grad and v.grad_fn is None)
    return False


def arrays_in_closure(fn: Callable[..., Any], is_array: Callable[[Any], bool] = _is_device_array) -> dict[int, Any]:
    """The arrays (by id) a callable reaches through its closure's cells, through nested functions' too: what a
    reference such as ``lambda: cupy.copyto(dst, src)`` reads and writes."""
    import types

    found: dict[int, Any] = {}
    seen: set[int] = set()

    def walk(f: Any) -> None:
        if not isinstance(f, types.FunctionType) or id(f) in seen:
            return
        seen.add(id(f))
        for cell in f.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            if is_array(v):
                found.setdefault(id(v), v)
            else:
                walk(v)

    walk(fn)
    return found


def rebind_closure(fn: Callable[..., Any], subst: dict[int, Any]) -> Callable[..., Any]:
    """`fn` with the arrays of its closure (and its nested functions' closures) whose ids are keys of `subst`
    replaced by their values; the code and everything else it refers to are the same."""
    import types

    def rebind(f: Any, memo: dict[int, Any]) -> Any:
        if not isinstance(f, types.FunctionType) or not f.__closure__:
            return f
        if id(f) in memo:
            return memo[id(f)]
        cells = []
        for cell in f.__closure__:
            try:
                v = cell.cell_contents
            except ValueError:
                cells.append(cell)
                continue
            if id(v) in subst:
                cells.append(types.CellType(subst[id(v)]))
            elif isinstance(v, types.FunctionType):
                cells.append(types.CellType(rebind(v, memo)))
            else:
                cells.append(cell)
        g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, tuple(cells))
        g.__kwdefaults__ = f.__kwdefaults__
        memo[id(f)] = g
        return g

    return rebind(fn, {})


def _device_sets(arrays: dict[int, Any], reps: int) -> list[dict[int, Any]]:
    """`reps` sets of arrays like `arrays` (CuPy arrays or PyTorch tensors), all pieces of one allocation, each
    512-byte aligned: as learner_process._fresh_sets makes the learner's."""
    import cupy

    step = {key: -(-int(a.nbytes) // 512) * 512 for key, a in arrays.items()}
    arena = cupy.empty(max(1, reps * sum(step.values())), dtype=np.uint8)
    torch = sys.modules.get("torch")
    sets, offset = [], 0
    for _ in range(reps):
        views = {}
        for key, a in arrays.items():
            piece = arena[offset:offset + int(a.nbytes)]
            if torch is not None and isinstance(a, torch.Tensor):
                views[key] = torch.as_tensor(piece, device="cuda").view(a.dtype).reshape(a.shape)
            else:
                views[key] = piece.view(a.dtype).reshape(a.shape)
            offset += step[key]
        sets.append(views)
    return sets


def _fill_set(dst: dict[int, Any], arrays: dict[int, Any]) -> None:
    import cupy

    for key, a in arrays.items():
        if hasattr(dst[key], "copy_"):  # a PyTorch tensor
            dst[key].copy_(a)
        else:
            cupy.copyto(dst[key], a)


def time_reference_over_sets(reference_fn: Callable[[], Any], reps: int) -> tuple[float, int] | None:
    """Seconds one call of a performance check's reference takes timed as the learner's calls are when its code
    runs in its own process (learner_process._time_sets): over `reps` fresh sets of the arrays the reference's
    closure holds (pieces of one allocation, so each call reads its inputs cold from memory, not from the L2 the
    previous repetition left warm), every set's contents written again before each round, the calls of a round
    back to back, REPLAY_ROUNDS timed rounds after an untimed one, the fastest round divided by the sets. Second:
    the number of sets (fewer than `reps` when they would not fit). None when the closure holds no array.

    Fair both ways: the reference pays what the learner's replays pay (fresh memory every call, the write-back of
    the previous call's dirty lines, a round's contents written just before it) and nothing more: its host's launch
    overhead is hidden (a spin kernel holds the GPU while the round is enqueued, as the learner's calls are one CUDA
    graph), and CUDA events time it, without the request's round trip the learner's figure carries (under a
    millisecond, shared by the sets)."""
    import cupy

    from grader import learner_process

    arrays = arrays_in_closure(reference_fn)
    if not arrays:
        return None
    nbytes = sum(int(a.nbytes) for a in arrays.values()) or 1
    reps = max(2, min(reps, int(learner_process._replay_budget() // nbytes) - 1))
    sets = _device_sets(arrays, reps)
    calls = [rebind_closure(reference_fn, s) for s in sets]
    device = cupy.cuda.Device()
    seconds: list[float] = []
    enqueue = 0.0
    with _async_launches():
        for r in range(learner_process.REPLAY_ROUNDS + 1):
            for s in sets:
                _fill_set(s, arrays)
            device.synchronize()
            if r == 0:  # untimed: first touches of the sets' memory, libraries' plans; how long the host takes
                start_host = time.perf_counter()
                for call in calls:
                    call()
                enqueue = time.perf_counter() - start_host
                device.synchronize()
                continue
            _gpu_delay(min(0.05, 1.5 * enqueue + 200e-6))()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for call in calls:
                call()
            stop.record()
            stop.synchronize()
            seconds.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3 / reps)
    device.synchronize()
    del calls, sets
    cupy.get_default_memory_pool().free_all_blocks()
    return min(seconds), reps


REPORTED = "reported"   # grader/thresholds.toml: a figure measured and shown (INFO), never required


def is_reported(threshold_key: str) -> bool:
    """True when grader/thresholds.toml marks `threshold_key` as reported only: no bar, never a check."""
    node: Any = thresholds()
    for part in threshold_key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node == REPORTED


def perf_ratio(name: str, learner_fn: Callable[[], Any], reference_fn: Callable[[], Any], nbytes: float,
               threshold_key: str, record_property: Callable[[str, Any], None], *, unit: str = "GB/s",
               reference_name: str = "CuPy", flush_l2: bool = True,
               reference_nbytes: float | None = None, hide_host_overhead: bool = True) -> dict[str, Any]:
    """Time learner and reference; record and enforce learner/reference >= threshold. When the learner's calls are
    timed over fresh sets of arrays (its code in its own process), so is the reference (time_reference_over_sets).
    A figure that grader/thresholds.toml marks "reported" is recorded with no threshold
    (``"reported": true``) and enforced against nothing: the report shows it as INFO, not as a pass.

    `nbytes` is the work of one call (bytes moved, or FLOPs with unit 'GFLOP/s'); `reference_nbytes`
    that of the reference when it differs (e.g. a fill measured against a copy's bandwidth).
    """
    import pytest

    if not gpu_available():
        pytest.skip("not measured (no GPU)")
    limit = None if is_reported(threshold_key) else threshold(threshold_key)
    from minitorch import kernels

    t_ref, ref_sets = None, None
    if not kernels.learner_code_elsewhere():  # the learner's code in this process: as the thresholds were calibrated
        t_ref = time_cuda(reference_fn, flush_l2=flush_l2, hide_host_overhead=hide_host_overhead)
    t_learner, sets = _time_learner(name, learner_fn, flush_l2=flush_l2, hide_host_overhead=hide_host_overhead)
    if t_ref is None and sets is not None and hide_host_overhead:
        # the learner's calls were replayed over fresh sets (its code in its own process): the reference is timed
        # over as many fresh sets, or a kernel read cold is measured against a reference that is not (issue #27)
        t_ref, ref_sets = time_reference_over_sets(reference_fn, sets) or (None, None)
    if t_ref is None:  # no fresh sets for the learner's calls, or a reference whose closure holds no array
        t_ref = time_cuda(reference_fn, flush_l2=flush_l2, hide_host_overhead=hide_host_overhead)
    ref_work = nbytes if reference_nbytes is None else reference_nbytes
    measured, reference = nbytes / t_learner / 1e9, ref_work / t_ref / 1e9
    record = {"name": name, "unit": unit, "measured": measured, "reference": reference,
              "reference_name": reference_name, "ratio": measured / reference, "threshold": limit,
              "threshold_key": threshold_key, "seconds": t_learner, "reference_seconds": t_ref}
    if sets is not None:
        record.update(sets=sets, reference_sets=ref_sets)
    if limit is None:
        record["reported"] = True
    record_property("perf", record)
    if limit is not None and record["ratio"] < limit:
        raise GradeError(f"{name}: {measured:.1f} {unit} is {record['ratio']:.2f}x {reference_name}'s "
                           f"{reference:.1f} {unit}; at least {limit:.2f}x is needed ({threshold_key} in "
                           f"grader/thresholds.toml)")
    return record
