"""The Functions of elementwise ops: +, -, *, a scalar, ReLU, sigmoid, a bias added to every row."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function, host_value, mark_host_value
from minitorch.tensor import DTYPE, FLOAT64, Tensor


def add(a: Tensor, b: Tensor) -> Tensor:
    """``a + b``: elementwise for equal shapes; a (cols,) vector is added to every row of a (rows, cols) matrix."""
    if a.shape == b.shape:
        return Add.apply2(a, b)
    if a.ndim == 2 and b.shape == (a.shape[1],):
        return AddBias.apply(a, b)
    if b.ndim == 2 and a.shape == (b.shape[1],):
        return AddBias.apply(b, a)
    raise ValueError(f"+: shapes {a.shape} and {b.shape} do not match; minitorch adds tensors of one shape, "
                     f"or a (cols,) vector to every row of a (rows, cols) matrix")


class Add(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        return ops.add(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, grad


class AddBias(Function):
    """x (rows, cols) + bias (cols,): the bias is added to every row."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, bias: Tensor) -> Tensor:
        return ops.add_bias(x, bias)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        # Each bias element was added to a whole column: its gradient is that column's sum (on a side branch of a
        # captured graph where that is on: ops.set_concurrent_weight_grads).
        if not ctx.needs_input_grad[1]:
            return grad, None
        with ops.weight_grad_branch(grad.device):
            return grad, ops.bias_grad(grad)


class Sub(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        if a.shape != b.shape:
            raise ValueError(f"-: shapes {a.shape} and {b.shape} differ; minitorch subtracts tensors of one shape")
        return ops.add(a, ops.scalar_mul(b, -1.0))

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        return grad, ops.scalar_mul(grad, -1.0) if ctx.needs_input_grad[1] else None


class Mul(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return ops.mul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        return (ops.mul(grad, b) if ctx.needs_input_grad[0] else None,
                ops.mul(grad, a) if ctx.needs_input_grad[1] else None)


class ScalarMul(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, s: float) -> Tensor:
        ctx.scale = s
        return ops.scalar_mul(a, s)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        out = ops.scalar_mul(grad, ctx.scale)
        known = host_value(grad)
        if known is not None and grad.dtype in (DTYPE, FLOAT64):
            # a scaled loss (GradScaler, a mean): the host still knows the value, rounded as the kernel
            # rounds it, so a loss's backward that takes it as a float reads nothing from the device
            t = grad.dtype.type
            mark_host_value(out, float(t(known) * t(ctx.scale)))
        return out


class ReLU(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)  # the gradient passes where the input was positive
        return ops.relu(x)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return ops.relu_backward(x, grad)


class Sigmoid(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        y = ops.sigmoid(x)
        ctx.save_for_backward(y)  # sigmoid'(x) = y (1 - y): the output is all the backward needs
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return ops.sigmoid_backward(y, grad)
