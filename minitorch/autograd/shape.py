"""The Function of reshape (a view; its gradient is the gradient reshaped back)."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class Reshape(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        ctx.shape = x.shape
        return ops.reshape(x, shape)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.reshape(grad, ctx.shape)
