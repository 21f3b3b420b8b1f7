"""Every kernel of the course's solutions gives the same results on the emulator and on a GPU.

Each case builds inputs with NumPy, runs one solution kernel, and returns the output. On ``emu`` the
output is compared with a NumPy float64 reference (CI); on a GPU the cuda and emu outputs must agree
bit for bit (``make test-gpu``). A new solution kernel without a case here fails the coverage test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from minitorch import backend, kernels
from tests.solution_files import all_kernel_sources, solution_files

SIZES = [1, 31, 256, 257, 4099, 100_003]


def _fill(n: int, rng: np.random.Generator):
    value = np.float32(rng.standard_normal())
    out = backend.asarray(np.full(n, np.nan, np.float32))
    grid = max(1, min((n + 255) // 256, 8))  # a small grid: the grid-stride loop must cover the rest
    kernels.load_kernel("memory.cu", "fill")((grid,), (256,), (out, value, np.int64(n)))
    return backend.asnumpy(out), np.full(n, value, np.float64)


def _copy(n: int, rng: np.random.Generator):
    src = rng.standard_normal(n).astype(np.float32)
    dst = backend.asarray(np.full(n, np.nan, np.float32))
    kernels.load_kernel("memory.cu", "copy")((3,), (128,), (backend.asarray(src), dst, np.int64(n)))
    return backend.asnumpy(dst), src.astype(np.float64)


CASES: dict[tuple[str, str], Callable] = {
    ("memory.cu", "fill"): _fill,
    ("memory.cu", "copy"): _copy,
}


@pytest.fixture
def solution_workspace(workspace):
    for notebook in ("phase1_memory.ipynb",):
        for name, text in solution_files(notebook).items():
            kernels.write_source(name, text)
    return workspace


def test_every_solution_kernel_has_a_parity_case():
    defined = {(f, k) for f, src in all_kernel_sources().items() for k in kernels.kernel_signatures(src)}
    assert defined == set(CASES), f"kernels without a case: {defined - set(CASES)}"


def _run(device: str, case, n: int, seed: int):
    previous = backend.get_device()
    backend.set_device(device)
    try:
        return case(n, np.random.default_rng(seed))
    finally:
        backend.set_device(previous)


@pytest.mark.parametrize("key", sorted(CASES))
@pytest.mark.parametrize("n", SIZES)
def test_emulator_matches_numpy(solution_workspace, key, n):
    got, expected = _run("emu", CASES[key], n, seed=n)
    np.testing.assert_array_equal(got.astype(np.float64), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CASES))
@pytest.mark.parametrize("n", SIZES)
def test_gpu_matches_emulator(solution_workspace, key, n):
    on_gpu, expected = _run("cuda", CASES[key], n, seed=n)
    on_emu, _ = _run("emu", CASES[key], n, seed=n)
    assert on_gpu.tobytes() == on_emu.tobytes()
    np.testing.assert_array_equal(on_gpu.astype(np.float64), expected)
