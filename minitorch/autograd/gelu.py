"""The Function of GELU (tanh approximation)."""

from __future__ import annotations

from typing import Any

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class GELU(Function):
    """gelu(x); ``out_dtype`` (float16 / bfloat16 for a float32 x, or None): the output rounded to it as it is
    made. The gradient comes back in the dtype that the output's gradient comes in (16 bits from a 16-bit
    product: rounded once, as that product's operands would be)."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, out_dtype: Any = None) -> Tensor:
        ctx.save_for_backward(x)  # gelu'(x) needs the input
        return ops.gelu(x, out_dtype)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return ops.gelu_backward(x, grad)
