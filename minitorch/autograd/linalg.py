"""The Functions of matrix ops: matmul and transpose."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class MatMul(Function):
    """C = A @ B: dA = dC @ B^T, dB = A^T @ dC."""

    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return ops.matmul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        # Transposed operands are read in place where the learner's Phase 5 GEMM serves (ops.matmul).
        return (ops.matmul(grad, b, transpose_b=True) if ctx.needs_input_grad[0] else None,
                ops.matmul(a, grad, transpose_a=True) if ctx.needs_input_grad[1] else None)


class Transpose(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor) -> Tensor:
        return ops.transpose(a)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.transpose(grad)
