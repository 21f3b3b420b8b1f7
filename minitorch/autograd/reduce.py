"""The Functions of reductions: sum and mean."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class Sum(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        ctx.shape = x.shape
        return ops.sum(x)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.expand(grad, ctx.shape)


class Mean(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        if x.size == 0:
            raise ValueError(f"mean: the mean of no elements is undefined (shape {x.shape})")
        ctx.shape, ctx.n = x.shape, x.size
        return ops.scalar_mul(ops.sum(x), 1.0 / x.size)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.expand(ops.scalar_mul(grad, 1.0 / ctx.n), ctx.shape)
