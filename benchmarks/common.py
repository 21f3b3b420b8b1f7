"""Shared helpers for benchmarks: where results go, what device they came from, GPU timing.

A benchmark writes ``benchmarks/results/<name>-<device-slug>.json`` with the schema

    {"benchmark": str, "device": str, "date": "YYYY-MM-DD", "software": {...}, "results": [...]}

Book figures read these files at build time, so every number the book shows was measured.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def gpu_name() -> str:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def emulator_name() -> str:
    """'CUDA C emulator on <CPU model>, <n> cores': the device name of a benchmark run on the emulator."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CUDA C emulator on {model}, {os.cpu_count()} cores"


def software() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import cupy

        info["cupy"] = cupy.__version__
        info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:  # CPU-only benchmarks
        pass
    return info


def write_results(name: str, device: str, results: list[dict[str, Any]], path: str | Path | None = None,
                  **extra: Any) -> Path:
    """Writes the results document to ``path`` (default ``benchmarks/results/<name>-<device slug>.json``)."""
    path = Path(path) if path else RESULTS / f"{name}-{slug(device)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "device": device, "date": _dt.date.today().isoformat(),
           "software": software(), **extra, "results": results}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def time_gpu(fn: Callable[[], Any], *, max_seconds: float = 0.5, flush: bool = True,
             hide_host_overhead: bool = True) -> float:
    """Median seconds of ``fn`` on the GPU: the grader's own timing (CUDA events, warm-up, L2 flushed)."""
    from grader.checks import time_cuda

    return time_cuda(fn, max_time_s=max_seconds, flush_l2=flush, hide_host_overhead=hide_host_overhead)


def solution_sources(notebook: str) -> dict[str, str]:
    """The files a solution notebook's ``%%kernel``/``%%module`` cells write, keyed by file name."""
    from grader.labs import learner_files

    return learner_files(ROOT / "solutions" / notebook)


def kernel_resources(driver: Any, pointers: dict[str, int]) -> dict[str, dict[str, int]]:
    """Registers, local (spill) bytes and static shared memory of each kernel (name -> its CUfunction), read from
    the driver (``driver.lib.cuFuncGetAttribute``, errors through ``driver.check``): the benchmarks' register reports."""
    import ctypes

    out = {}
    for name, ptr in pointers.items():
        values = {}
        for key, attr in (("registers", 4), ("local_bytes", 3), ("static_smem_bytes", 1)):  # CU_FUNC_ATTRIBUTE_*
            value = ctypes.c_int()
            driver.check(driver.lib.cuFuncGetAttribute(ctypes.byref(value), attr, ctypes.c_void_p(ptr)),
                         "cuFuncGetAttribute")
            values[key] = value.value
        out[name] = values
    return out


def emu_cpu_seconds(fn, repeats: int = 3, warm: int = 3) -> float:
    """The best of ``repeats`` runs of ``fn`` in CPU time of this thread (the emulator with one worker), after
    ``warm`` runs, the emulator's compiles for their integer arguments (what a training loop's steps run) and
    one more run."""
    from minitorch.emu.specialize import specialize_now

    for _ in range(warm):
        fn()
    specialize_now()
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best

