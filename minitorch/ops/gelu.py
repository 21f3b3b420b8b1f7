"""GELU in its tanh approximation (GPT-2's), forward and backward: Phase 7's ``gelu.cu``."""

from __future__ import annotations

import numpy as np

from minitorch.ops.dispatch import binary, check_tensors, cpu_result, empty, launch
from minitorch.tensor import Tensor

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
CUBIC = 0.044715


def _inner(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(SQRT_2_OVER_PI) * (x + x.dtype.type(CUBIC) * x * x * x)


def gelu(x: Tensor) -> Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise."""
    device, dtype = check_tensors("gelu", x=x)
    if device == "cpu":
        v = x.data
        return cpu_result(dtype.type(0.5) * v * (1 + np.tanh(_inner(v))), dtype)
    out = empty(device, x.shape)
    if x.size:
        launch(device, "gelu.py", "gelu_forward", x.data, out, outputs=(1,))
    return Tensor(out, device)


def _gelu_grad(x: np.ndarray, g: np.ndarray, dtype: np.dtype) -> np.ndarray:
    t = np.tanh(_inner(x))
    du = dtype.type(SQRT_2_OVER_PI) * (1 + dtype.type(3 * CUBIC) * x * x)
    half = dtype.type(0.5)
    return g * (half * (1 + t) + half * x * (1 - t * t) * du)


def gelu_backward(x: Tensor, grad_out: Tensor) -> Tensor:
    """grad_out * gelu'(x); x is the forward's input."""
    return binary("gelu_backward", "gelu.py", ("x", "grad_out"), x, grad_out, _gelu_grad)
