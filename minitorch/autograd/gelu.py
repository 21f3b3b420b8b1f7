"""The Function of GELU (tanh approximation)."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class GELU(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)  # gelu'(x) needs the input
        return ops.gelu(x)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return ops.gelu_backward(x, grad)
