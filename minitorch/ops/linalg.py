"""Matrix ops: transpose and matmul.

Phases 2-4 run matmul on Phase 2's naive kernel (``matmul.py``). From Phase 5 on, once the learner's
GEMM launcher (``gemm.py``) exists, matmul runs on it, with transposed operands read in place: the
backward products dX = dY·Wᵀ and dW = Xᵀ·dY then need no transpose kernel. The grader sets
``MINITORCH_PHASE`` to the phase it grades, so an earlier phase is graded on that phase's own kernels.
"""

from __future__ import annotations

import os

import numpy as np

from minitorch import backend, kernels
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix
from minitorch.tensor import DTYPE, Tensor

GEMM_FILE = "gemm.py"


def transpose(a: Tensor) -> Tensor:
    """The transpose of a 2-D tensor, as a new contiguous tensor."""
    device, dtype = check_tensors("transpose", a=a)
    rows, cols = matrix("transpose", "a", a)
    if device == "cpu":
        return cpu_result(a.data.T, dtype)
    out = empty(device, (cols, rows))
    if a.size:
        launch(device, "transpose.py", "transpose", a.data, out, outputs=(1,))
    return Tensor(out, device)


def uses_gemm() -> bool:
    """Whether matmul runs on the learner's Phase 5 GEMM: ``gemm.py`` is written, and the phase being
    graded (``MINITORCH_PHASE``, when set) is Phase 5 or later."""
    graded = os.environ.get("MINITORCH_PHASE")
    if graded and kernels.phase_index(graded) < kernels.phase_index(kernels.KERNEL_FILES.get(
            GEMM_FILE, kernels.LearnerFile("phase5", "", "")).phase):
        return False
    return os.path.exists(kernels.source_path(GEMM_FILE))


def matmul(a: Tensor, b: Tensor, *, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """op(a) @ op(b) -> (M, N), where op(a) = aᵀ if ``transpose_a`` (then a is (K, M)), else a (M, K);
    likewise op(b) is (K, N)."""
    device, dtype = check_tensors("matmul", a=a, b=b)
    rows_a, cols_a = matrix("matmul", "a", a)
    rows_b, cols_b = matrix("matmul", "b", b)
    (m, k), (k2, n) = ((cols_a, rows_a) if transpose_a else (rows_a, cols_a),
                       (cols_b, rows_b) if transpose_b else (rows_b, cols_b))
    if k != k2:
        what_a = f"a{'ᵀ' if transpose_a else ''}"
        raise ValueError(f"matmul: the inner dimensions must agree: {what_a} is ({m}, {k}) (M, K), so "
                         f"b{'ᵀ' if transpose_b else ''} must be ({k}, N); got {b.shape}")
    if device == "cpu":
        return cpu_result(np.matmul(a.data.T if transpose_a else a.data, b.data.T if transpose_b else b.data), dtype)
    if k == 0:  # a sum of no products: zeros, nothing to launch
        return Tensor(backend.get_backend(device).zeros((m, n), DTYPE), device)
    out = empty(device, (m, n))
    if not (m and n):
        return Tensor(out, device)
    if uses_gemm():
        launch(device, GEMM_FILE, "gemm", a.data, b.data, out, outputs=(2,), transpose_a=transpose_a,
               transpose_b=transpose_b)
        return Tensor(out, device)
    if transpose_a:  # Phase 2's kernel reads row-major operands: materialise the transposes
        a = transpose(a)
    if transpose_b:
        b = transpose(b)
    launch(device, "matmul.py", "matmul", a.data, b.data, out, outputs=(2,))
    return Tensor(out, device)
