"""ops.matmul's dispatch: Phase 2's kernel until the learner's Phase 5 GEMM exists, then the GEMM with
transposed operands read in place (no transpose kernel in the backward), and the phase being graded
(MINITORCH_PHASE) keeps earlier phases on their own kernels."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import kernels, ops
from tests.phase3_support import write_solutions

# A stand-in for the learner's gemm.cu/gemm.py (one thread per output, both layouts): enough to test
# the framework's dispatch without Phase 5's solution.
GEMM_CU = r'''
extern "C" __global__ void gemm_ref(const float* A, const float* B, float* C, int M, int N, int K,
                                    int ta, int tb) {
    int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += (ta ? A[k * M + row] : A[row * K + k]) * (tb ? B[col * K + k] : B[k * N + col]);
    C[row * N + col] = acc;
}
'''
GEMM_PY = '''
import numpy as np
from minitorch.kernels import load_kernel

def gemm(a, b, out, variant="best", transpose_a=False, transpose_b=False):
    m, n = out.shape
    k = a.shape[0] if transpose_a else a.shape[1]
    grid = ((n + 15) // 16, (m + 15) // 16)
    load_kernel("gemm.cu", "gemm_ref")(grid, (16, 16), (a, b, out, np.int32(m), np.int32(n), np.int32(k),
                                                          np.int32(transpose_a), np.int32(transpose_b)))
'''


@pytest.fixture
def emu_workspace(workspace, monkeypatch):
    write_solutions(workspace)
    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    previous = minitorch.get_device()
    minitorch.set_device("emu")
    yield workspace
    minitorch.set_device(previous)


def _launched() -> set[tuple[str, str]]:
    return {key for key, n in kernels.launch_counts().items() if n}


@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_transposed_operands_match_numpy(emu_workspace, ta, tb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 5) if ta else (5, 7)).astype(np.float32)
    b = rng.standard_normal((3, 7) if tb else (7, 3)).astype(np.float32)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    for with_gemm in (False, True):
        if with_gemm:
            (emu_workspace / "gemm.cu").write_text(GEMM_CU)
            (emu_workspace / "gemm.py").write_text(GEMM_PY)
        kernels.reset_launch_counts()
        got = ops.matmul(minitorch.tensor(a), minitorch.tensor(b), transpose_a=ta, transpose_b=tb).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        launched = _launched()
        if with_gemm:
            assert launched == {("gemm.cu", "gemm_ref")}  # transposes read in place
        else:
            assert ("matmul.cu", "matmul_naive") in launched
            assert (("transpose.cu", "transpose_tiled") in launched) == (ta or tb)
    cpu = ops.matmul(minitorch.tensor(a, "cpu"), minitorch.tensor(b, "cpu"), transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(cpu.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_backward_uses_no_transpose_kernel_with_gemm(emu_workspace):
    (emu_workspace / "gemm.cu").write_text(GEMM_CU)
    (emu_workspace / "gemm.py").write_text(GEMM_PY)
    rng = np.random.default_rng(1)
    x = minitorch.tensor(rng.standard_normal((6, 4)).astype(np.float32), requires_grad=True)
    w = minitorch.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    kernels.reset_launch_counts()
    (x @ w).backward(minitorch.tensor(np.ones((6, 3), np.float32)))
    assert not any(file == "transpose.cu" for file, _ in _launched())
    ones = np.ones((6, 3))
    np.testing.assert_allclose(x.grad.numpy(), ones @ w.numpy().T.astype(np.float64), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T.astype(np.float64) @ ones, rtol=1e-5)


def test_an_earlier_phase_is_graded_on_its_own_kernel(emu_workspace, monkeypatch):
    (emu_workspace / "gemm.cu").write_text(GEMM_CU)
    (emu_workspace / "gemm.py").write_text(GEMM_PY)
    monkeypatch.setenv("MINITORCH_PHASE", "phase3a")
    kernels.reset_launch_counts()
    ops.matmul(minitorch.tensor(np.ones((2, 2), np.float32)), minitorch.tensor(np.ones((2, 2), np.float32)))
    assert _launched() == {("matmul.cu", "matmul_naive")}
    monkeypatch.setenv("MINITORCH_PHASE", "phase5")
    assert ops.linalg.uses_gemm()


def test_inner_dimension_mismatch_names_the_transposed_shapes(emu_workspace):
    with pytest.raises(ValueError, match=r"aᵀ is \(3, 2\).*got \(4, 5\)"):
        ops.matmul(minitorch.tensor(np.ones((2, 3), np.float32)), minitorch.tensor(np.ones((4, 5), np.float32)),
                   transpose_a=True)
