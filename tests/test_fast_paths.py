"""The reference solutions' fast paths for small outputs and tall reductions (on the emulator).

- Phase 5's ``gemm(variant="best")`` without a tuning file: on a GPU rung 9 with tiles measured for the size
  of C (``DEFAULT_TILES``), and split-K for a weight gradient Xᵀ·dY whose K is far deeper than C is wide (its
  rule run here on the emulator's kernels, ``gpu_rule``); on the emulator rung 10, unsplit;
- Phase 3b's ``bias_grad``: a column reduction whose grid cuts the rows into chunks (a 2-D grid), and still
  right when launched on a 1-D grid, as the graded small-grid test launches it;
- Phase 7's ``layernorm_param_grads`` launched with 32 row lanes a block.

Values against NumPy in float64; the launches are read from ``kernels.recording()``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from minitorch import backend, kernels
from tests.solution_files import solution_files


@pytest.fixture
def solution_workspace(workspace):
    for notebook in ("phase1_memory.ipynb", "phase3b_backward.ipynb", "phase5_fast.ipynb"):
        for name, text in solution_files(notebook).items():
            (workspace / name).write_text(text)
    previous = backend.get_device()
    backend.set_device("emu")
    yield workspace
    backend.set_device(previous)


def gpu_rule(monkeypatch, gm) -> None:
    """best() of the workspace's gemm.py as on a GPU of 132 SMs (an H100, nothing tuned); the kernels it
    picks still run on the emulator."""
    real = gm.backend
    attributes = {name: getattr(real, name) for name in dir(real) if not name.startswith("__")}
    monkeypatch.setattr(gm, "backend", types.SimpleNamespace(**{**attributes, "get_device": lambda: "cuda"}))
    monkeypatch.setattr(gm, "device_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(gm, "sm_count", lambda: 132)


def launches(call) -> list[kernels.Launch]:
    with kernels.recording() as made:
        call()
    return list(made)


def test_best_without_tuning_picks_small_tiles_for_a_small_output(solution_workspace, monkeypatch):
    gm = kernels.load_module("gemm.py")
    assert not gm.tuning(), "the test workspace has no gemm_tuning.json"
    gpu_rule(monkeypatch, gm)
    # a GPT layer's product: 4096 rows x 192 columns is 64 tiles of 128 x 128, half an H100's SMs
    variant, config = gm.best(4096, 192, False)
    assert variant == "double_buffered" and config[:2] == (64, 64)
    variant, config = gm.best(4096, 4096, False)
    assert variant == "double_buffered" and config[:2] == (128, 128)
    for least, tiles in gm.DEFAULT_TILES:
        assert gm.config_problem("double_buffered", tiles) is None, (least, tiles)


@pytest.mark.parametrize("m, n, k", [(64, 65, 1024), (7, 9, 700), (129, 130, 520)])
def test_weight_gradient_is_split_along_k_and_exact(solution_workspace, monkeypatch, m, n, k):
    gm = kernels.load_module("gemm.py")
    gpu_rule(monkeypatch, gm)
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (k, m)).astype(np.float32)  # X, stored (K, M): the product is Xᵀ·dY
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    out = backend.asarray(np.full((m, n), np.nan, np.float32))
    made = launches(lambda: gm.gemm(backend.asarray(a), backend.asarray(b), out, transpose_a=True))
    names = [launch.kernel.function for launch in made]
    assert names[0].startswith("sgemm_9_double_buffered<") and names[0].endswith(", 1, 0>"), names
    assert names[1:] == ["sgemm_sum_splits"], names
    splits = made[0].grid[2]
    assert splits == gm.split_k(m, n, k, gm.best(m, n, True)[1], True, False) > 1
    expected = a.T.astype(np.float64) @ b
    bound = k * np.finfo(np.float32).eps * (np.abs(a.T).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(backend.asnumpy(out) - expected) <= bound)


@pytest.mark.parametrize("m, n, k", [(64, 65, 1024), (7, 9, 700)])
def test_weight_gradient_on_the_emulator_is_one_launch_of_rung_10(solution_workspace, m, n, k):
    """The emulator runs rung 10 for variant="best", without split-K (which exists for a GPU's idle SMs)."""
    gm = kernels.load_module("gemm.py")
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (k, m)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    out = backend.asarray(np.full((m, n), np.nan, np.float32))
    made = launches(lambda: gm.gemm(backend.asarray(a), backend.asarray(b), out, transpose_a=True))
    assert [launch.kernel.function for launch in made] == ["sgemm_10_regtile"], made
    expected = a.T.astype(np.float64) @ b
    bound = k * np.finfo(np.float32).eps * (np.abs(a.T).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(backend.asnumpy(out) - expected) <= bound)


def test_split_k_more_chunks_than_steps_leaves_no_chunk_unsummed(solution_workspace):
    gm = kernels.load_module("gemm.py")
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (20, 5)).astype(np.float32), rng.uniform(-1, 1, (20, 6)).astype(np.float32)
    for splits in (2, 3, 7, 40):  # 20 rows are 3 steps of 8: at most 3 chunks hold rows
        out = backend.asarray(np.full((5, 6), np.nan, np.float32))
        gm.gemm(backend.asarray(a), backend.asarray(b), out, "double_buffered", transpose_a=True, splits=splits)
        np.testing.assert_allclose(backend.asnumpy(out), a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant, ta, tb", [("double_buffered", False, False), ("double_buffered", False, True),
                                             ("double_buffered", True, True), ("shared", False, False)])
def test_split_k_elsewhere_is_refused(solution_workspace, variant, ta, tb):
    gm = kernels.load_module("gemm.py")
    a, b, out = backend.zeros((8, 8)), backend.zeros((8, 8)), backend.zeros((8, 8))
    with pytest.raises(ValueError, match="split-K"):
        gm.gemm(a, b, out, variant, transpose_a=ta, transpose_b=tb, splits=2)


@pytest.mark.parametrize("rows, cols", [(4096, 64), (1000, 257), (65, 3), (0, 5)])
def test_bias_grad_cuts_tall_columns_into_chunks(solution_workspace, rows, cols):
    bw = kernels.load_module("backward.py")
    g = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    out = backend.asarray(np.full(cols, np.nan, np.float32))
    made = launches(lambda: bw.bias_grad(backend.asarray(g), out))
    (launch,) = [m for m in made if m.kernel.function == "bias_grad"]
    grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    assert grid[1] == bw.bias_chunks(rows, -(-cols // bw.BIAS_COLS))
    if rows >= 2 * bw.BIAS_CHUNK_ROWS:
        assert grid[1] > 1, f"{rows} rows read by one block a column group: grid {launch.grid}"
    atol = 1e-6 * max(1.0, float(np.abs(g).sum(axis=0).max())) if g.size else 0.0
    np.testing.assert_allclose(backend.asnumpy(out), g.astype(np.float64).sum(axis=0), rtol=1e-5, atol=atol)


def test_bias_grad_on_a_1d_grid_writes_every_column(solution_workspace):
    """The graded small-grid launch: 3 blocks of 64 threads, one row lane, grad_bias poisoned (not zeroed)."""
    g = np.random.default_rng(2).standard_normal((5, 1001)).astype(np.float32)
    out = backend.asarray(np.full(1001, np.nan, np.float32))
    kernels.load_kernel("backward.cu", "bias_grad")((3,), (64,), (backend.asarray(g), out, np.int32(5),
                                                                  np.int32(1001)))
    np.testing.assert_allclose(backend.asnumpy(out), g.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- on a GPU: the speed these paths are for


@pytest.fixture
def gpu_solutions(workspace):
    for notebook in ("phase1_memory.ipynb", "phase3b_backward.ipynb", "phase5_fast.ipynb", "phase7_gpt.ipynb"):
        for name, text in solution_files(notebook).items():
            (workspace / name).write_text(text)
    previous = backend.get_device()
    backend.set_device("cuda")
    yield workspace
    backend.set_device(previous)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(64, 256), (256, 64), (64, 65)])
def test_gpu_weight_gradient_within_half_of_cublas(gpu_solutions, m, n):
    """dW = Xᵀ·dY of a GPT layer (K = 4,096 rows): unsplit on 128 x 128 tiles it ran at 0.03x cuBLAS on an
    H200; split-K measured 0.81-0.86x (benchmarks/results/phase5_gemm_defaults-nvidia-h200.json)."""
    import cupy

    from grader.checks import time_cuda

    gm = kernels.load_module("gemm.py")
    rng = np.random.default_rng(0)
    a = cupy.asarray(rng.uniform(-1, 1, (4096, m)).astype(np.float32))
    b = cupy.asarray(rng.uniform(-1, 1, (4096, n)).astype(np.float32))
    out = cupy.empty((m, n), np.float32)
    ours = time_cuda(lambda: gm.gemm(a, b, out, transpose_a=True), max_time_s=0.2)
    cupy.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-3)
    cublas = time_cuda(lambda: cupy.matmul(a.T, b, out=out), max_time_s=0.2)
    assert cublas / ours >= 0.5, f"{m} x {n} x 4096 (Aᵀ): {ours * 1e6:.1f} us, cuBLAS {cublas * 1e6:.1f} us"


@pytest.mark.gpu
def test_gpu_bias_grad_of_a_tall_batch_near_copy_speed(gpu_solutions):
    """4,096 x 256: one thread a column took 80 us on an H200 (phase7_step_profile_before); a column
    reduction over chunks of rows reads the 4 MiB in a few microseconds."""
    import cupy

    from grader.checks import time_cuda

    bw = kernels.load_module("backward.py")
    g = cupy.asarray(np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32))
    out = cupy.empty(256, np.float32)
    seconds = time_cuda(lambda: bw.bias_grad(g, out), max_time_s=0.2)
    cupy.testing.assert_allclose(out, g.sum(axis=0), rtol=1e-4, atol=1e-3)
    dst = cupy.empty_like(g)
    copy = time_cuda(lambda: cupy.copyto(dst, g), max_time_s=0.2)
    assert seconds <= 4 * copy + 10e-6, f"bias_grad {seconds * 1e6:.1f} us, a copy {copy * 1e6:.1f} us"
