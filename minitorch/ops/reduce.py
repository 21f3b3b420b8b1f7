"""Reductions (Phase 4's ``reduce.cu``; the bias gradient, a column sum, from Phase 3b)."""

from __future__ import annotations

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix
from minitorch.tensor import DTYPE, Tensor


def sum(x: Tensor) -> Tensor:  # noqa: A001 (the name of the operation)
    """The sum of every element, as a 0-d tensor (Phase 4's ``reduce.sum`` on cuda/emu)."""
    device, dtype = check_tensors("sum", x=x)
    if device == "cpu":
        return cpu_result(np.sum(x.data), dtype)
    if x.size == 0:
        return Tensor(backend.get_backend(device).zeros((), DTYPE), device)
    out = empty(device, (1,))
    launch(device, "reduce.py", "sum", x.data.reshape(-1), out, outputs=(1,))
    return Tensor(out.reshape(()), device)


def max(x: Tensor) -> Tensor:  # noqa: A001
    """The largest element, as a 0-d tensor (Phase 4's ``reduce.max`` on cuda/emu)."""
    device, dtype = check_tensors("max", x=x)
    if x.size == 0:
        raise ValueError(f"max: an empty tensor (shape {x.shape}) has no largest element")
    if device == "cpu":
        return cpu_result(np.max(x.data), dtype)
    out = empty(device, (1,))
    launch(device, "reduce.py", "max", x.data.reshape(-1), out, outputs=(1,))
    return Tensor(out.reshape(()), device)


def column_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and population variance of each column of x (rows, cols): two (cols,) tensors."""
    device, dtype = check_tensors("column_mean_var", x=x)
    rows, cols = matrix("column_mean_var", "x", x)
    if rows == 0:
        raise ValueError(f"column_mean_var: the mean of no rows is undefined (x has shape {x.shape})")
    if device == "cpu":
        return cpu_result(x.data.mean(axis=0), dtype), cpu_result(x.data.var(axis=0), dtype)
    mean, var = empty(device, (cols,)), empty(device, (cols,))
    if cols:
        launch(device, "reduce.py", "column_mean_var", x.data, mean, var, outputs=(1, 2))
    return Tensor(mean, device), Tensor(var, device)


def bias_grad(grad_out: Tensor) -> Tensor:
    """The column sums of grad_out (rows, cols): the gradient of a bias added to every row."""
    device, dtype = check_tensors("bias_grad", grad_out=grad_out)
    rows, cols = matrix("bias_grad", "grad_out", grad_out)
    if device == "cpu":
        return cpu_result(grad_out.data.sum(axis=0), dtype)
    if rows == 0:  # a sum of no rows
        return Tensor(backend.get_backend(device).zeros((cols,), DTYPE), device)
    out = empty(device, (cols,))
    if cols:
        launch(device, "backward.py", "bias_grad", grad_out.data, out, outputs=(1,))
    return Tensor(out, device)
