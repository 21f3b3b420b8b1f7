"""The Function of a change of dtype (``Tensor.to(dtype)``): its gradient converts back."""

from __future__ import annotations

from typing import Any

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class Cast(Function):
    """y = x in another dtype (rounded to nearest even when narrower); dx = dy in x's dtype."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, dtype: Any) -> Tensor:
        ctx.source = x.dtype
        return ops.convert(x, dtype)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.convert(grad, ctx.source)
