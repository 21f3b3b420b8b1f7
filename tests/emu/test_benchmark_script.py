"""Smoke test of benchmarks/emu_vs_numba.py at tiny sizes.

The emulator side always runs; the Numba side is skipped when numba is not installed
(it is not in requirements.txt, so CI skips it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "emu_vs_numba.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("emu_vs_numba", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["emu_vs_numba"] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


# Sizes that are not multiples of the tile/chunk, so the kernels' bounds checks matter.
TINY = [("sgemm", 40), ("reduce", 5000), ("softmax", 40)]


@pytest.mark.parametrize("check", [False, True], ids=["normal", "check"])
@pytest.mark.parametrize(("kernel", "size"), TINY)
def test_emulator_side_runs_and_verifies(bench: ModuleType, kernel: str, size: int, check: bool) -> None:
    r = bench.emu_case(kernel, size, max_repeats=1, check=check)
    assert r["kernel"] == kernel and r["size"] == size and r["check_mode"] is check
    assert r["seconds"] > 0 and r["compile_cold_s"] > 0 and r["compile_cached_s"] >= 0
    assert np.isfinite(r["error"])  # emu_case raises if the output is wrong


@pytest.mark.parametrize(("kernel", "size"), TINY)
def test_verification_rejects_wrong_output(bench: ModuleType, kernel: str, size: int) -> None:
    sp = bench.spec(kernel, size)
    inputs = bench.make_inputs(kernel, size)
    wrong = np.zeros((size, size) if kernel != "reduce" else (1,), np.float32)
    with pytest.raises(AssertionError):
        bench.verify(kernel, inputs, wrong, sp, sp.total_blocks)


def test_subgrid_geometry(bench: ModuleType) -> None:
    sp = bench.spec("sgemm", 512)
    assert sp.total_blocks == 32 * 32 and sp.threads_per_block == 256
    assert sp.grid(5) == (5, 1, 1) and sp.covered(5) == 5
    assert sp.grid(70) == (32, 2, 1) and sp.covered(70) == 64  # whole tile rows past one strip
    assert sp.covered(sp.total_blocks) == sp.total_blocks
    assert bench.spec("reduce", 1 << 20).total_blocks == 1024
    assert bench.spec("softmax", 1024).total_blocks == 1024


def test_report_schema_without_numba(bench: ModuleType) -> None:
    report = bench.run([("reduce", 3000)], with_numba=False, numba_target_s=0.1, verbose=False)
    assert report["benchmark"] == "emu_vs_numba"
    assert report["device"].endswith(f", {os.cpu_count()} cores")
    assert len(report["date"]) == 10 and set(report["software"]) >= {"python", "numpy", "cxx"}
    (row,) = report["results"]
    for key in ("kernel", "size", "emu_s", "emu_check_s", "numba_sim_s", "speedup", "threads",
                "numba_extrapolated"):
        assert key in row
    assert row["threads"] == 3 * 256 and row["emu_s"] > 0 and row["emu_check_s"] > 0
    json.dumps(report)


def test_numba_side_extrapolates_honestly() -> None:
    pytest.importorskip("numba")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--worker", "numba", "--kernel", "reduce", "--size", "4096",
         "--numba-blocks", "2", "--numba-repeats", "2"],
        env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    r = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    assert r["total_blocks"] == 4 and r["measured_blocks"] == 2 and len(r["measured_runs_s"]) == 2
    assert r["extrapolated"] is True and r["fraction"] == 0.5
    assert r["measured_s"] == min(r["measured_runs_s"])
    assert r["seconds"] == pytest.approx(r["measured_s"] * 4 / 2)  # t(N) = t(b) * N / b
