"""Elementwise ops: the learner's Phase 2 (``elementwise.cu``), 3a (``forward.cu``) and 3b (``backward.cu``) kernels."""

from __future__ import annotations

import numpy as np

from minitorch.ops.dispatch import binary, check_tensors, cpu_result, empty, launch, matrix, real
from minitorch.ops.precision import via_float32
from minitorch.tensor import HALF, Tensor


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b, elementwise (same shape)."""
    return binary("add", "elementwise.py", ("a", "b"), a, b, lambda x, y, _: x + y)


def mul(a: Tensor, b: Tensor) -> Tensor:
    """a * b, elementwise (same shape)."""
    return binary("mul", "elementwise.py", ("a", "b"), a, b, lambda x, y, _: x * y)


def scalar_mul(a: Tensor, s: float) -> Tensor:
    """s * a."""
    device, dtype = check_tensors("scalar_mul", half=True, a=a)
    if dtype in HALF:  # computed in float32, rounded back once
        return via_float32(scalar_mul, a, s)
    s = real("scalar_mul", "s", s)
    if device == "cpu":
        return cpu_result(a.data * dtype.type(s), dtype)
    out = empty(device, a.shape)
    if a.size:
        launch(device, "elementwise.py", "scalar_mul", a.data, s, out, outputs=(2,))
    return Tensor(out, device)


def relu(a: Tensor) -> Tensor:
    """max(a, 0), elementwise."""
    device, dtype = check_tensors("relu", half=True, a=a)
    if dtype in HALF:  # computed in float32, rounded back once
        return via_float32(relu, a)
    if device == "cpu":
        return cpu_result(np.where(a.data > 0, a.data, dtype.type(0)), dtype)
    out = empty(device, a.shape)
    if a.size:
        launch(device, "elementwise.py", "relu", a.data, out, outputs=(1,))
    return Tensor(out, device)


def relu_backward(x: Tensor, grad_out: Tensor) -> Tensor:
    """grad_out where x > 0, else 0; x is the forward input."""
    return binary("relu_backward", "backward.py", ("x", "grad_out"), x, grad_out,
                   lambda x_, g, dtype: np.where(x_ > 0, g, dtype.type(0)))


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), elementwise, without overflow for large |x|."""
    device, dtype = check_tensors("sigmoid", half=True, x=x)
    if dtype in HALF:  # computed in float32, rounded back once
        return via_float32(sigmoid, x)
    if device == "cpu":
        e = np.exp(-np.abs(x.data))  # never overflows: exp of a non-positive number
        return cpu_result(np.where(x.data >= 0, 1 / (1 + e), e / (1 + e)), dtype)
    out = empty(device, x.shape)
    if x.size:
        launch(device, "forward.py", "sigmoid", x.data, out, outputs=(1,))
    return Tensor(out, device)


def sigmoid_backward(y: Tensor, grad_out: Tensor) -> Tensor:
    """grad_out * y * (1 - y), where y = sigmoid(x) is the forward output."""
    return binary("sigmoid_backward", "backward.py", ("y", "grad_out"), y, grad_out,
                   lambda y_, g, _: g * y_ * (1 - y_))


def add_bias(x: Tensor, bias: Tensor) -> Tensor:
    """out[r, c] = x[r, c] + bias[c]: x (rows, cols), bias (cols,)."""
    device, dtype = check_tensors("add_bias", half=True, x=x, bias=bias)
    if dtype in HALF:  # computed in float32, rounded back once
        return via_float32(add_bias, x, bias)
    rows, cols = matrix("add_bias", "x", x)
    if bias.shape != (cols,):
        raise ValueError(f"add_bias: `bias` must have shape ({cols},), one value per column of x {x.shape}; "
                         f"got {bias.shape}")
    if device == "cpu":
        return cpu_result(x.data + bias.data, dtype)
    out = empty(device, x.shape)
    if x.size:
        launch(device, "forward.py", "add_bias", x.data, bias.data, out, outputs=(2,))
    return Tensor(out, device)
