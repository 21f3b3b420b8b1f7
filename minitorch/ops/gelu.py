"""GELU in its tanh approximation (GPT-2's), forward and backward: Phase 7's ``gelu.cu``; and in 16 bits
under autocast (Phase 8a's ``convert.py``: ``gelu_16bit``, ``gelu_backward_16bit``): float32 in, the output
rounded as it is made; the backward from and to 16-bit gradients."""

from __future__ import annotations

from typing import Any

import numpy as np

from minitorch import dtypes
from minitorch.ops.dispatch import binary, check_tensors, cpu_result, empty, launch, provides
from minitorch.ops.precision import CONVERT_FILE, convert
from minitorch.tensor import DTYPE, HALF, Tensor

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
CUBIC = 0.044715


def _inner(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(SQRT_2_OVER_PI) * (x + x.dtype.type(CUBIC) * x * x * x)


def gelu(x: Tensor, out_dtype: Any = None) -> Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise. ``out_dtype`` (float16 or bfloat16, x
    float32): the result rounded to it, in one pass on cuda/emu (the same bits as gelu, then convert)."""
    device, dtype = check_tensors("gelu", x=x)
    out_dt = dtype if out_dtype is None else dtypes.resolve(out_dtype)
    if out_dt != dtype:
        if out_dt not in HALF or dtype != DTYPE:
            raise TypeError(f"gelu: out_dtype rounds a float32 x to float16 or bfloat16; got {dtype} -> {out_dt}")
        if device == "cpu" or not provides(CONVERT_FILE, "gelu_16bit"):  # (a convert.py from before it)
            return convert(gelu(x), out_dt)
        out = empty(device, x.shape, dtypes.storage(out_dt))
        if x.size:
            launch(device, CONVERT_FILE, "gelu_16bit", x.data, out, outputs=(1,), dtype=out_dt.name)
        return Tensor(out, device)
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
    """grad_out * gelu'(x); x is the forward's input. A float32 x with a 16-bit grad_out (the gradient of a
    16-bit GELU output, ``gelu(x, out_dtype=)``): the result in grad_out's dtype, rounded once."""
    if (isinstance(x, Tensor) and isinstance(grad_out, Tensor) and x.dtype == DTYPE and grad_out.dtype in HALF
            and x.device == grad_out.device):
        half = grad_out.dtype
        if x.shape != grad_out.shape:
            raise ValueError(f"gelu_backward: `grad_out` must have x's shape {x.shape}, got {grad_out.shape}")
        if x.device == "cpu" or not provides(CONVERT_FILE, "gelu_backward_16bit"):
            return convert(gelu_backward(x, convert(grad_out, DTYPE)), half)
        out = empty(x.device, x.shape, dtypes.storage(half))
        if x.size:
            launch(x.device, CONVERT_FILE, "gelu_backward_16bit", x.data, grad_out.data, out, outputs=(2,),
                   dtype=half.name)
        return Tensor(out, x.device)
    return binary("gelu_backward", "gelu.py", ("x", "grad_out"), x, grad_out, _gelu_grad)
