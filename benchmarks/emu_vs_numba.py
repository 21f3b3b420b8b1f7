#!/usr/bin/env python3
"""Emulator vs Numba's CUDA simulator on the same kernels.

Runs three kernels -- tiled SGEMM (16x16 shared tiles), a 1M-element sum reduction
(shared-memory tree, then a warp-shuffle stage) and a row softmax (one block per row) --
as CUDA C on ``minitorch.emu`` and as equivalent ``numba.cuda`` Python kernels under
Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), with the same algorithm and the
same launch configuration. Every output is checked against NumPy float64.

Numba's simulator runs each CUDA thread as a Python thread and needs minutes to hours
for the full grids, so it is timed on a sub-grid (the first ``b`` blocks, whose outputs
are verified) and extrapolated in proportion to the block count::

    t(N) = t(b) * N / b

Every block of these kernels does the same work, and a launch has no measurable fixed
cost next to a block (about a second). Subtracting a separately timed one-block launch
was tried and rejected: single-block times scattered by up to 2x between runs on a
small machine, and that noise is multiplied by N / b. Every result row says whether it was extrapolated and from
what fraction of the grid; one case is also run on the full grid to check the estimate.

Each measurement runs in a fresh worker process: ``NUMBA_ENABLE_CUDASIM`` must be set
before numba is first imported, and a fresh process keeps one case's memory and caches
from colouring the next. The emulator runs with its defaults (one worker thread, forward
schedule); check mode is ``MINITORCH_EMU_CHECK=1``.

Usage::

    python benchmarks/emu_vs_numba.py            # full run, writes benchmarks/results/
    python benchmarks/emu_vs_numba.py --quick    # smoke run at small sizes
    python benchmarks/emu_vs_numba.py --no-numba --output /tmp/x.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KERNEL_DIR = HERE / "kernels"
RESULTS_DIR = HERE / "results"

TILE = 16
RED_BLOCK = 256
RED_ELEMS = 4
SMX_BLOCK = 256

DEFAULT_CASES: list[tuple[str, int]] = [
    ("sgemm", 256),
    ("sgemm", 512),
    ("reduce", 1 << 20),
    ("softmax", 1024),
]
QUICK_CASES: list[tuple[str, int]] = [("sgemm", 64), ("reduce", 1 << 16), ("softmax", 64)]

# Small enough for the simulator to run in full (128 blocks, under a minute), to measure
# how far an extrapolation from 1/8 of the blocks is off.
VALIDATE_CASE: tuple[str, int] = ("reduce", 1 << 17)

SPEEDUP_GOAL = 1000.0
CHECK_RATIO_GOAL = 10.0


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Spec:
    """Launch geometry of one (kernel, size) case; ``grid(b)`` covers the first b blocks."""

    kernel: str
    size: int
    total_blocks: int
    block: tuple[int, int, int]
    problem: str

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def grid(self, blocks: int) -> tuple[int, int, int]:
        if self.kernel == "sgemm":
            gx = -(-self.size // TILE)
            # A strip along the first tile row, then whole tile rows.
            return (min(blocks, gx), max(1, blocks // gx), 1)
        return (blocks, 1, 1)

    def covered(self, blocks: int) -> int:
        g = self.grid(blocks)
        return g[0] * g[1] * g[2]


def spec(kernel: str, size: int) -> Spec:
    if kernel == "sgemm":
        g = -(-size // TILE)
        return Spec(kernel, size, g * g, (TILE, TILE, 1), f"{size}x{size} @ {size}x{size}")
    if kernel == "reduce":
        return Spec(kernel, size, -(-size // (RED_BLOCK * RED_ELEMS)), (RED_BLOCK, 1, 1),
                    f"{size:,} elements")
    if kernel == "softmax":
        return Spec(kernel, size, size, (SMX_BLOCK, 1, 1), f"{size}x{size}, one block per row")
    raise ValueError(f"unknown kernel {kernel!r}")


def make_inputs(kernel: str, size: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kernel == "sgemm":
        return {
            "A": rng.uniform(-1, 1, (size, size)).astype(np.float32),
            "B": rng.uniform(-1, 1, (size, size)).astype(np.float32),
        }
    if kernel == "reduce":
        # Positive values: the float32 sum then has a well-defined relative error.
        return {"x": rng.uniform(0, 1, size).astype(np.float32)}
    if kernel == "softmax":
        return {"x": (3 * rng.standard_normal((size, size))).astype(np.float32)}
    raise ValueError(kernel)


def verify(kernel: str, inputs: dict[str, np.ndarray], out: np.ndarray, sp: Spec,
           blocks: int) -> float:
    """Check the part of ``out`` computed by the first ``blocks`` blocks; return the error."""
    g = sp.grid(blocks)
    if kernel == "sgemm":
        a64 = inputs["A"].astype(np.float64)
        b64 = inputs["B"].astype(np.float64)
        r, c = min(sp.size, g[1] * TILE), min(sp.size, g[0] * TILE)
        ref = a64[:r] @ b64[:, :c]
        err = float(np.max(np.abs(out[:r, :c] - ref)))
        tol = 1e-5 * sp.size  # float32 accumulation over K terms of magnitude <= 1
    elif kernel == "reduce":
        covered = min(sp.size, g[0] * RED_BLOCK * RED_ELEMS)
        ref = float(np.sum(inputs["x"][:covered], dtype=np.float64))
        err = abs(float(out[0]) - ref) / ref
        tol = 1e-5
    else:
        x64 = inputs["x"][: g[0]].astype(np.float64)
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        err = float(np.max(np.abs(out[: g[0]] - ref) / (np.abs(ref) + 1e-30)))
        tol = 1e-4
    if not err <= tol:  # also catches NaN
        raise AssertionError(f"{kernel} size {sp.size}: error {err:.3g} exceeds {tol:.3g}")
    return err


# ------------------------------------------------------------------------ emulator


KERNEL_SOURCES = {"sgemm": "sgemm_tiled.cu", "reduce": "reduce_sum.cu", "softmax": "softmax_rows.cu"}
KERNEL_FUNCS = {"sgemm": "sgemm_tiled", "reduce": "reduce_sum", "softmax": "softmax_rows"}


def kernel_source(kernel: str) -> str:
    return (KERNEL_DIR / KERNEL_SOURCES[kernel]).read_text()


def _emu() -> Any:  # imported lazily: the Numba worker never needs the emulator
    from minitorch import emu

    return emu


Launch = Callable[[Any, int], None]


def _first_launch_seconds(kernel: str, src: str, launch: Launch) -> tuple[Any, float]:
    """RawModule + get_function + a one-block launch: what a learner waits for after editing.

    The emulator builds the normal variant in RawModule() and the check-mode variant at
    the first launch in check mode, so the one-block launch is part of "compile".
    """
    emu = _emu()
    t0 = time.perf_counter()
    fn = emu.RawModule(code=src).get_function(KERNEL_FUNCS[kernel])
    launch(fn, 1)
    emu.synchronize()
    return fn, time.perf_counter() - t0


def _emu_buffers(kernel: str, size: int, inputs: dict[str, np.ndarray]
                 ) -> tuple[Launch, Callable[[], np.ndarray]]:
    """Copy the inputs to the device; return launch(fn, blocks) and result()."""
    emu = _emu()
    sp = spec(kernel, size)
    n32 = np.int32(size)
    if kernel == "sgemm":
        da, db = emu.asarray(inputs["A"]), emu.asarray(inputs["B"])
        dc = emu.zeros((size, size), np.float32)

        def launch(fn: Any, blocks: int) -> None:
            fn(sp.grid(blocks), sp.block, (da, db, dc, n32, n32, n32))

        return launch, lambda: emu.asnumpy(dc)
    if kernel == "reduce":
        dx = emu.asarray(inputs["x"])
        dout = emu.zeros((1,), np.float32)

        def launch(fn: Any, blocks: int) -> None:
            dout.set(np.zeros(1, np.float32))  # atomicAdd accumulates into out[0]
            fn(sp.grid(blocks), sp.block, (dx, dout, n32))

        return launch, lambda: emu.asnumpy(dout)
    dx = emu.asarray(inputs["x"])
    dy = emu.zeros((size, size), np.float32)

    def launch(fn: Any, blocks: int) -> None:
        fn(sp.grid(blocks), sp.block, (dx, dy, n32, n32))

    return launch, lambda: emu.asnumpy(dy)


def emu_case(kernel: str, size: int, *, max_repeats: int = 5, check: bool | None = None
             ) -> dict[str, Any]:
    """Compile (cold, then cached), launch the full grid, verify; time the launches.

    ``check`` turns check mode on or off for this call (default: MINITORCH_EMU_CHECK).
    Launch times are the minimum over up to ``max_repeats`` runs (fewer once 2 s have been
    spent), after a one-block warm-up launch.
    """
    emu = _emu()
    if check is None:
        check = os.environ.get("MINITORCH_EMU_CHECK", "").strip().lower() not in ("", "0", "false", "no", "off")
    with emu.check_mode(check):
        sp = spec(kernel, size)
        src = kernel_source(kernel)
        inputs = make_inputs(kernel, size)
        launch, result = _emu_buffers(kernel, size, inputs)
        # Builds the runtime library if needed and fills the cache for the plain source.
        _first_launch_seconds(kernel, src, launch)
        # A nonce comment changes the source hash, so this build cannot hit any cache.
        _, cold = _first_launch_seconds(kernel, src + f"\n// nonce {time.time_ns()}\n", launch)
        fn, cached = _first_launch_seconds(kernel, src, launch)
        times: list[float] = []
        while len(times) < max_repeats and sum(times) < 2.0:
            t0 = time.perf_counter()
            launch(fn, sp.total_blocks)
            emu.synchronize()
            times.append(time.perf_counter() - t0)
        err = verify(kernel, inputs, result(), sp, sp.total_blocks)
    return {
        "kernel": kernel,
        "size": size,
        "seconds": min(times),
        "runs": times,
        "compile_cold_s": cold,
        "compile_cached_s": cached,
        "error": err,
        "check_mode": check,
        "workers": int(os.environ.get("MINITORCH_EMU_WORKERS", "1") or 1),
    }


# --------------------------------------------------------------------- Numba side

NUMBA_NOTE_REDUCE = (
    "Numba's CUDA simulator implements no warp shuffles (numba.cuda.shfl_down_sync is "
    "absent under NUMBA_ENABLE_CUDASIM), so the Numba reduction finishes the last 32 "
    "values with the same shared-memory tree and __syncthreads instead of the emulator "
    "kernel's __shfl_down_sync stage."
)


def numba_case(kernel: str, size: int, *, target_s: float = 15.0, repeats: int = 3,
               blocks: int | None = None) -> dict[str, Any]:
    """Time the Numba-simulator kernel on a sub-grid and extrapolate to the full grid.

    A timed one-block launch t(1) (which also warms up) sizes the sub-grid: b blocks, about
    ``target_s`` per launch (or ``blocks``). t(b) is the best of ``repeats`` launches --
    best-of-n as for the emulator, since interference from the rest of the machine only
    ever adds time -- and t(N) = t(b) * N / b. If b reaches the full grid the
    measurement is direct, not extrapolated.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("numba_case needs NUMBA_ENABLE_CUDASIM=1 set before numba is imported")
    from numba import cuda

    # The simulator swaps the module-global name `cuda` of each kernel for its fake
    # module, so the kernels live at the top level of a module of their own.
    sys.path.insert(0, str(HERE))
    import numba_kernels

    sp = spec(kernel, size)
    fn = numba_kernels.KERNELS[kernel]
    inputs = make_inputs(kernel, size)
    n = np.int32(size)
    if kernel == "sgemm":
        da, db = cuda.to_device(inputs["A"]), cuda.to_device(inputs["B"])
        dout = cuda.to_device(np.zeros((size, size), np.float32))
        args: tuple[Any, ...] = (da, db, dout, n, n, n)
    elif kernel == "reduce":
        dout = cuda.to_device(np.zeros(1, np.float32))
        args = (cuda.to_device(inputs["x"]), dout, n)
    else:
        dout = cuda.to_device(np.zeros((size, size), np.float32))
        args = (cuda.to_device(inputs["x"]), dout, n, n)

    def launch(blocks: int) -> float:
        if kernel == "reduce":
            dout.copy_to_device(np.zeros(1, np.float32))
        t0 = time.perf_counter()
        fn[sp.grid(blocks), sp.block](*args)
        cuda.synchronize()
        return time.perf_counter() - t0

    t1 = launch(1)
    want = blocks if blocks is not None else max(1, int(round(target_s / max(t1, 1e-6))))
    blocks = sp.covered(min(want, sp.total_blocks))
    runs = [launch(blocks) for _ in range(repeats)]
    tb = min(runs)
    err = verify(kernel, inputs, dout.copy_to_host(), sp, blocks)
    total = sp.total_blocks
    est, extrapolated = tb * total / blocks, blocks < total
    return {
        "kernel": kernel,
        "size": size,
        "seconds": est,
        "extrapolated": extrapolated,
        "measured_blocks": blocks,
        "total_blocks": total,
        "fraction": blocks / total,
        "measured_s": tb,
        "measured_runs_s": runs,
        "one_block_s": t1,
        "error": err,
    }


# ------------------------------------------------------------------ orchestration


def _worker(args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {' '.join(args)} failed (rc={proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_string() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def software_versions(with_numba: bool) -> dict[str, str]:
    sw = {"python": platform.python_version(), "numpy": np.__version__,
          "os": f"{platform.system()} {platform.release()}"}
    cxx = os.environ.get("CXX", "g++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
        sw["cxx"] = out.stdout.splitlines()[0] if out.stdout else cxx
    except (OSError, subprocess.SubprocessError):
        sw["cxx"] = f"{cxx} (not found)"
    try:
        import minitorch
        from minitorch.emu import compiler

        # The runtime digest hashes the emulator's C++ runtime and the compiler version.
        sw["minitorch"] = str(getattr(minitorch, "__version__", "unversioned"))
        sw["minitorch.emu_runtime"] = compiler.runtime_digest()[:16]
    except Exception as exc:  # noqa: BLE001 - metadata only: recorded, not fatal
        sw["minitorch.emu_runtime"] = f"unavailable ({exc.__class__.__name__}: {exc})"
    if with_numba:
        import llvmlite
        import numba

        sw["numba"] = numba.__version__
        sw["llvmlite"] = llvmlite.__version__
    return sw


def numba_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def run(cases: list[tuple[str, int]], *, with_numba: bool, numba_target_s: float,
        verbose: bool = True, validate: tuple[str, int] | None = None) -> dict[str, Any]:
    """Measure every case; with ``validate``, also check the extrapolation on that case."""
    results = []
    for kernel, size in cases:
        sp = spec(kernel, size)
        t_case = time.perf_counter()
        normal = _worker(["--worker", "emu", "--kernel", kernel, "--size", str(size)],
                         {"MINITORCH_EMU_CHECK": "0"}, 900)
        checked = _worker(["--worker", "emu", "--kernel", kernel, "--size", str(size)],
                          {"MINITORCH_EMU_CHECK": "1"}, 900)
        row: dict[str, Any] = {
            "kernel": kernel,
            "size": size,
            "problem": sp.problem,
            "threads": sp.total_blocks * sp.threads_per_block,
            "blocks": sp.total_blocks,
            "block": list(sp.block),
            "emu_s": normal["seconds"],
            "emu_runs_s": normal["runs"],
            "emu_workers": normal["workers"],
            "emu_check_s": checked["seconds"],
            "check_ratio": checked["seconds"] / normal["seconds"],
            "compile_cold_s": normal["compile_cold_s"],
            "compile_cached_s": normal["compile_cached_s"],
            "compile_cold_check_s": checked["compile_cold_s"],
            "emu_error": normal["error"],
            "numba_sim_s": None,
            "speedup": None,
            "numba_extrapolated": None,
        }
        if with_numba:
            nb = _worker(["--worker", "numba", "--kernel", kernel, "--size", str(size),
                          "--numba-target", str(numba_target_s)],
                         {"NUMBA_ENABLE_CUDASIM": "1"}, 1800)
            row.update({
                "numba_sim_s": nb["seconds"],
                "speedup": nb["seconds"] / normal["seconds"],
                "numba_extrapolated": nb["extrapolated"],
                "numba_measured_blocks": nb["measured_blocks"],
                "numba_fraction": nb["fraction"],
                "numba_measured_s": nb["measured_s"],
                "numba_measured_runs_s": nb["measured_runs_s"],
                "numba_one_block_s": nb["one_block_s"],
                "numba_error": nb["error"],
            })
        results.append(row)
        if verbose:
            sp_txt = f"{row['speedup']:.0f}x" if row["speedup"] else "-"
            nb_txt = f"{row['numba_sim_s']:.1f}" if row["numba_sim_s"] else "-"
            print(f"{kernel:8s} {sp.problem:32s} emu {row['emu_s']:.3f}s  "
                  f"check {row['emu_check_s']:.3f}s ({row['check_ratio']:.1f}x)  "
                  f"numba {nb_txt}s  speedup {sp_txt}  "
                  f"[{time.perf_counter() - t_case:.0f}s]", flush=True)
    check = None
    if with_numba and validate is not None:
        check = validate_extrapolation(*validate, verbose=verbose)
    notes = [
        "emu_s and emu_check_s: minimum over up to 5 full-grid launches (fewer once 2 s "
        "have been spent), after a one-block warm-up; kernel time only, data already on the "
        "device. emu_check_s is the same with MINITORCH_EMU_CHECK=1.",
        "compile_cold_s: RawModule + get_function + a one-block launch of source with a nonce "
        "comment (no cache hit possible; compile_cold_check_s adds the check-mode build); "
        "compile_cached_s: the same for the unchanged source, whose build is in the emulator's "
        "disk cache.",
        "The emulator ran with its defaults: one worker thread (MINITORCH_EMU_WORKERS=1), "
        "forward schedule. Numba's simulator also runs one block at a time.",
        "numba_sim_s: Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1), same algorithm and "
        "launch configuration. When numba_extrapolated is true it was timed on the first "
        "numba_measured_blocks blocks (numba_fraction of the grid, outputs of those blocks "
        "verified) and extrapolated as t(b) * N / b, t(b) being the best of 3 launches "
        "(numba_measured_runs_s). Single launches varied by up to 2x between runs of this script "
        "on this machine; taking the best of 3 errs in Numba's favour. "
        "numba_extrapolation_check compares that estimate with a full-grid run of one case.",
        NUMBA_NOTE_REDUCE,
        "All outputs are checked against NumPy float64 before any time is recorded.",
        "The emulator's timings say nothing about GPU performance.",
    ]
    return {
        "benchmark": "emu_vs_numba",
        "device": device_string(),
        "date": _dt.date.today().isoformat(),
        "software": software_versions(with_numba),
        "goals": {"speedup_min": SPEEDUP_GOAL, "check_ratio_max": CHECK_RATIO_GOAL},
        "notes": notes,
        "numba_extrapolation_check": check,
        "results": results,
    }


def validate_extrapolation(kernel: str, size: int, *, verbose: bool = True) -> dict[str, Any]:
    """Time one case on Numba both ways (sub-grid + extrapolation, and the full grid)."""
    env = {"NUMBA_ENABLE_CUDASIM": "1"}
    base = ["--worker", "numba", "--kernel", kernel, "--size", str(size)]
    total = spec(kernel, size).total_blocks
    sub = _worker([*base, "--numba-blocks", str(max(1, total // 8))], env, 1800)
    full = _worker([*base, "--numba-blocks", str(total), "--numba-repeats", "2"], env, 1800)
    assert not full["extrapolated"]
    res = {
        "kernel": kernel,
        "size": size,
        "total_blocks": full["total_blocks"],
        "measured_blocks": sub["measured_blocks"],
        "extrapolated_s": sub["seconds"],
        "full_grid_s": full["seconds"],
        "relative_error": sub["seconds"] / full["seconds"] - 1.0,
    }
    if verbose:
        print(f"extrapolation check: {kernel} {size}: extrapolated {res['extrapolated_s']:.1f}s "
              f"from {res['measured_blocks']}/{res['total_blocks']} blocks, full grid "
              f"{res['full_grid_s']:.1f}s ({100 * res['relative_error']:+.1f}%)", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, short Numba timing")
    ap.add_argument("--no-numba", action="store_true", help="emulator side only")
    ap.add_argument("--output", type=Path, help="JSON path (default: benchmarks/results/...)")
    ap.add_argument("--numba-target", type=float, default=None,
                    help="seconds to spend timing each Numba sub-grid (default 15, quick 0.5)")
    ap.add_argument("--worker", choices=["emu", "numba"], help=argparse.SUPPRESS)
    ap.add_argument("--kernel", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--numba-blocks", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--numba-repeats", type=int, default=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if str(ROOT) not in sys.path:  # run as a script: make `minitorch` importable
        sys.path.insert(0, str(ROOT))

    if a.worker == "emu":
        print(json.dumps(emu_case(a.kernel, a.size)))
        return 0
    if a.worker == "numba":
        print(json.dumps(numba_case(a.kernel, a.size, target_s=a.numba_target or 15.0,
                                    repeats=a.numba_repeats, blocks=a.numba_blocks)))
        return 0

    with_numba = not a.no_numba
    if with_numba and not numba_available():
        print("numba is not installed: pip install numba, or pass --no-numba", file=sys.stderr)
        return 2
    target = a.numba_target if a.numba_target is not None else (0.5 if a.quick else 15.0)
    report = run(QUICK_CASES if a.quick else DEFAULT_CASES, with_numba=with_numba,
                 numba_target_s=target, validate=None if a.quick else VALIDATE_CASE)
    out = a.output or RESULTS_DIR / f"emu_vs_numba-{slug(report['device'])}.json"
    if a.quick and a.output is None:  # smoke runs must not land among committed results
        out = Path(tempfile.gettempdir()) / out.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
