"""The Function of 2-D max pooling: the forward keeps the argmax, the backward routes the gradient to it."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class MaxPool2d(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor, kernel_size: int, stride: int | None, padding: int) -> Tensor:
        y, argmax = ops.max_pool2d(x, kernel_size, stride, padding)
        ctx.argmax, ctx.x_shape = argmax, x.shape
        ctx.kernel_size, ctx.stride, ctx.padding = kernel_size, stride, padding
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.max_pool2d_backward(grad, ctx.argmax, ctx.x_shape, ctx.kernel_size, ctx.stride, ctx.padding)
