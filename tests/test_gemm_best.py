"""Phase 5's `best()` (the given part of the lab's gemm.py): on the emulator rung 10 (`regtile`) for every shape,
transposed or not, without split-K; on a GPU the rule the committed measurements chose, unchanged by rung 10
(`benchmarks/results/phase5_gemm_defaults-*.json`: rung 9's tiles and split-K for each product measured, the
Phase 7 GPT's among them)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests.solution_files import solution_files

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
# The Phase 7 GPT lab's products (M = B·T = 4096 rows; d_model 64, 3·64, 4·64, a vocabulary of 65) and
# MNIST's two linear layers (batch 64, 784 -> 64 -> 10): forward, dX = dY·Wᵀ, dW = Xᵀ·dY.
GPT = [(4096, n, k, False, False) for n, k in ((192, 64), (64, 64), (256, 64), (64, 256), (65, 64))] + [
    (4096, k, n, False, True) for n, k in ((192, 64), (64, 64), (256, 64), (64, 256), (65, 64))] + [
    (k, n, 4096, True, False) for n, k in ((192, 64), (64, 64), (256, 64), (64, 256), (65, 64))]
MNIST = [(64, 64, 784, False, False), (64, 10, 64, False, False), (64, 784, 64, False, True),
         (64, 64, 10, False, True), (784, 64, 64, True, False), (64, 10, 64, True, False)]


def gemm_module(device: str, gpu_name: str = "NVIDIA H200") -> types.ModuleType:
    """The solution's gemm.py, its device `device` for best() (a GPU's name and 132 SMs, as an H100 or H200)."""
    module = types.ModuleType("gemm_solution")
    exec(compile(solution_files("phase5_fast.ipynb")["gemm.py"], "gemm.py", "exec"), module.__dict__)
    module.backend = types.SimpleNamespace(get_device=lambda: device)
    module.device_name = lambda: gpu_name if device == "cuda" else device
    module.sm_count = lambda: 132 if device == "cuda" else module.SMS_WITHOUT_GPU
    return module


@pytest.mark.parametrize("m, n, k, ta, tb", GPT + MNIST, ids=str)
def test_the_emulator_runs_rung_10_for_every_shape_without_split_k(workspace, m, n, k, ta, tb):
    gm = gemm_module("emu")
    assert gm.best(m, n, ta or tb) == ("regtile", None)
    assert "regtile" in gm.TRANSPOSING
    name, grid, block = gm._plan("regtile", None, ta, tb, m, n, k)
    tm, tn, threads = gm.REGTILE
    tiles = -(-m // tm) * -(-n // tn)
    assert name == "sgemm_10_regtile" and block == (threads,) and len(grid) == 1  # no z: no split
    assert grid[0] * threads >= tiles > (grid[0] - 1) * threads, (grid, tiles)  # every tile, one thread each


def test_the_emulator_ignores_a_gpus_tuning_file(workspace):
    """autotune()'s winners are a GPU's: on the emulator best() still runs rung 10."""
    (workspace / "gemm_tuning.json").write_text(json.dumps(
        {"emu": {"4096": {"variant": "double_buffered", "config": [128, 128, 8, 64, 32]}},
         "NVIDIA H200": {"4096": {"variant": "autotuned", "config": [128, 128, 8, 8, 8]}}}))
    assert gemm_module("emu").best(4096, 4096, False) == ("regtile", None)
    assert gemm_module("cuda").best(4096, 4096, False) == ("autotuned", (128, 128, 8, 8, 8))


@pytest.mark.parametrize("path", sorted(RESULTS.glob("phase5_gemm_defaults-*.json")), ids=lambda p: p.stem)
def test_the_gpu_rule_is_the_measured_one(workspace, path):
    """On a GPU, untuned, best() and split_k() choose for every measured product what the measurements chose
    (rung 9, its tiles, its split of K): rung 10 changed nothing there."""
    doc = json.loads(path.read_text())
    gm = gemm_module("cuda", doc["device"])
    rows = [r for r in doc["results"] if r["kind"] == "best"]
    assert rows, f"{path.name} has no chosen configuration"
    for r in rows:
        m, n, k, ta, tb = r["M"], r["N"], r["K"], r["transpose_a"], r["transpose_b"]
        variant, config = gm.best(m, n, ta or tb)
        assert (variant, list(config)) == ("double_buffered", r["config"]), r
        assert gm.split_k(m, n, k, config, ta, tb) == r["splits"], r


@pytest.mark.parametrize("m, n, k, ta, tb", GPT + MNIST, ids=str)
def test_the_gpu_never_runs_rung_10_by_itself(workspace, m, n, k, ta, tb):
    gm = gemm_module("cuda")
    variant, config = gm.best(m, n, ta or tb)
    assert variant == "double_buffered" and config == gm.default_config(m, n)
    if ta and not tb and k >= 2 * gm.SPLIT_MIN_DEPTH:  # the weight gradients: still split on a GPU
        assert gm.split_k(m, n, k, config, ta, tb) > 1


def test_regtile_is_a_variant_that_reads_transposed_operands(workspace):
    gm = gemm_module("emu")
    assert gm.VARIANTS[-1] == "regtile" and gm.KERNELS["regtile"] == "sgemm_10_regtile"
    assert gm.threads_of("regtile", None) == gm.REGTILE[2]
    assert gm.launch_shape("regtile", None, 1, 1) == ((1,), (gm.REGTILE[2],))
    # the kernel's tile is gemm.py's: R10_TM x R10_TN in gemm.cu
    cu = solution_files("phase5_fast.ipynb")["gemm.cu"]
    assert f"#define R10_TM {gm.REGTILE[0]}\n" in cu and f"#define R10_TN {gm.REGTILE[1]}\n" in cu
    with pytest.raises(ValueError, match="split-K"):
        gm._plan("regtile", None, True, False, 64, 64, 4096, splits=4)
