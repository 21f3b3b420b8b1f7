"""The Function of 2-D convolution: its backward is three kernels (input, weight, bias)."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import DTYPE, Tensor


class Conv2d(Function):
    """y = conv2d(x, w) + b; ``b`` may be None (then the Function has two inputs). Under autocast the
    forward's product and both backward products run in its 16-bit dtype (recorded by the forward: the
    backward multiplies as the forward did, autocast or not); the results and gradients are float32."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, w: Tensor, b: Tensor | None, stride: int, padding: int) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.stride, ctx.padding, ctx.has_bias = stride, padding, b is not None
        ctx.compute = c = ops.product_dtype(x.dtype) or DTYPE
        return ops.conv2d(x, w, b, stride, padding, compute_dtype=c)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        # The first layer's input (the images) needs no gradient: skip that kernel.
        c = ctx.compute
        dx = ops.conv2d_backward_input(grad, w, x.shape, ctx.stride, ctx.padding, compute_dtype=c) if needs[0] else None
        dw = ops.conv2d_backward_weight(x, grad, w.shape, ctx.stride, ctx.padding, compute_dtype=c) if needs[1] else None
        if not ctx.has_bias:
            return dx, dw
        return dx, dw, ops.conv2d_bias_grad(grad) if needs[2] else None
