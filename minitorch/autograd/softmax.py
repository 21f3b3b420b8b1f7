"""The Functions of softmax, log-softmax and the fused softmax cross-entropy."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.autograd.precision import times_upstream
from minitorch.tensor import Tensor


class Softmax(Function):
    """softmax of each row; the backward needs only the output y."""

    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        y = ops.softmax(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return ops.softmax_backward(y, grad)


class LogSoftmax(Function):
    """log softmax of each row; the backward needs only the output y."""

    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        y = ops.log_softmax(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return ops.log_softmax_backward(y, grad)


class CrossEntropy(Function):
    """mean over the rows of -log softmax(logits)[r, t_r]: a 0-d tensor. ``targets`` is an integer tensor
    (ops.class_indices); it gets no gradient. The backward recomputes softmax from the logits (one more
    read of them) instead of keeping a (rows, classes) matrix of probabilities alive."""

    @staticmethod
    def forward(ctx: Context, logits: Tensor, targets: Tensor) -> Tensor:
        ctx.save_for_backward(logits, targets)
        return ops.cross_entropy(logits, targets)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, None]:
        logits, targets = ctx.saved_tensors
        # The kernel takes the upstream gradient as a float: known on the host for loss.backward()'s seed
        # (no copy from the device, so the step can be captured into a graph).
        g = (times_upstream(lambda s: ops.cross_entropy_backward(logits, targets, s), grad)
             if ctx.needs_input_grad[0] else None)
        return g, None
