"""Matrix ops: transpose and matmul (Phase 2's ``transpose.cu`` and ``matmul.cu``)."""

from __future__ import annotations

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix
from minitorch.tensor import DTYPE, Tensor


def transpose(a: Tensor) -> Tensor:
    """The transpose of a 2-D tensor, as a new contiguous tensor."""
    device, dtype = check_tensors("transpose", a=a)
    rows, cols = matrix("transpose", "a", a)
    if device == "cpu":
        return cpu_result(a.data.T, dtype)
    out = empty(device, (cols, rows))
    if a.size:
        launch(device, "transpose.py", "transpose", a.data, out)
    return Tensor(out, device)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """(M, K) @ (K, N) -> (M, N)."""
    device, dtype = check_tensors("matmul", a=a, b=b)
    m, k = matrix("matmul", "a", a)
    k2, n = matrix("matmul", "b", b)
    if k != k2:
        raise ValueError(f"matmul: the inner dimensions must agree: a is {a.shape} (M, K), so b must be "
                         f"({k}, N); got {b.shape}")
    if device == "cpu":
        return cpu_result(np.matmul(a.data, b.data), dtype)
    if k == 0:  # a sum of no products: zeros, nothing to launch
        return Tensor(backend.get_backend(device).zeros((m, n), DTYPE), device)
    out = empty(device, (m, n))
    if m and n:
        launch(device, "matmul.py", "matmul", a.data, b.data, out)
    return Tensor(out, device)
