"""Shared helpers for benchmarks: where results go, what device they came from, GPU timing.

A benchmark writes ``benchmarks/results/<name>-<device-slug>.json`` with the schema

    {"benchmark": str, "device": str, "date": "YYYY-MM-DD", "software": {...}, "results": [...]}

Book figures read these files at build time, so every number the book shows was measured.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import statistics
import sys
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


def write_results(name: str, device: str, results: list[dict[str, Any]], **extra: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{slug(device)}.json"
    doc = {"benchmark": name, "device": device, "date": _dt.date.today().isoformat(),
           "software": software(), **extra, "results": results}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
    return path


def time_gpu(fn: Callable[[], Any], *, warmup: int = 3, min_reps: int = 10, max_seconds: float = 1.0,
             flush: Callable[[], Any] | None = None) -> float:
    """Median seconds of ``fn`` on the GPU, timed with CUDA events; ``flush`` runs untimed between reps."""
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    times: list[float] = []
    spent = 0.0
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    while len(times) < min_reps or (spent < max_seconds and len(times) < 1000):
        if flush is not None:
            flush()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        t = cupy.cuda.get_elapsed_time(start, stop) * 1e-3
        times.append(t)
        spent += t
        if len(times) >= min_reps and spent >= max_seconds:
            break
    return statistics.median(times)


def l2_flusher() -> Callable[[], None]:
    """Writing a buffer twice the size of L2 evicts the previous repetition's data."""
    import cupy

    l2 = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"]
    scratch = cupy.empty(max(2 * int(l2), 1 << 20) // 4, dtype=np.float32)
    return lambda: scratch.fill(0)


def solution_sources(notebook: str) -> dict[str, str]:
    """The files a solution notebook's ``%%kernel``/``%%module`` cells write, keyed by file name."""
    cells = json.loads((ROOT / "solutions" / notebook).read_text())["cells"]
    files: dict[str, str] = {}
    for cell in cells:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        first, _, body = text.partition("\n")
        match = re.match(r"%%(kernel|module)\s+(\S+)\s*$", first)
        if cell["cell_type"] == "code" and match:
            files[match.group(2)] = body
    return files
