"""The Functions of matrix ops: matmul and transpose."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import DTYPE, Tensor


class MatMul(Function):
    """C = A @ B: dA = dC @ B^T, dB = A^T @ dC.

    Inside ``minitorch.amp.autocast`` the forward product of float32 operands runs in its 16-bit dtype;
    the backward products run in the same dtype whether or not autocast is still on (as PyTorch's), and
    the gradients come out float32, for the float32 master weights."""

    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        ctx.compute = ops.product_dtype(a.dtype) or DTYPE
        return ops.matmul(a, b, compute_dtype=ctx.compute if a.dtype == DTYPE else None)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        compute = ctx.compute if grad.dtype == DTYPE else None
        # Transposed operands are read in place where the learner's Phase 5 GEMM serves (ops.matmul).
        return (ops.matmul(grad, b, transpose_b=True, compute_dtype=compute) if ctx.needs_input_grad[0] else None,
                ops.matmul(a, grad, transpose_a=True, compute_dtype=compute) if ctx.needs_input_grad[1] else None)


class Transpose(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor) -> Tensor:
        return ops.transpose(a)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.transpose(grad)
