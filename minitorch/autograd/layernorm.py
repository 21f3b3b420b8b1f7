"""The Function of LayerNorm over the last dimension of a tensor of any shape."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class LayerNorm(Function):
    """LayerNorm(x) * weight + bias over x's last dimension; the leading ones are rows (a view)."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        if x.ndim < 1 or x.shape[-1] == 0:
            raise ValueError(f"layer_norm: x must end in a dimension of at least one element (the normalised "
                             f"one), got shape {x.shape}")
        rows = ops.reshape(x, (-1, x.shape[-1]))
        out, mean, rstd = ops.layer_norm(rows, weight, bias, eps)
        ctx.save_for_backward(rows, weight, mean, rstd)
        return ops.reshape(out, x.shape)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        rows, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = ops.layer_norm_backward(ops.reshape(grad, rows.shape), rows, weight, mean, rstd)
        return (ops.reshape(dx, grad.shape) if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None,
                db if ctx.needs_input_grad[2] else None)
