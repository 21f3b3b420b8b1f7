"""The Functions of matrix ops: matmul and transpose."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import DTYPE, Tensor


class MatMul(Function):
    """C = A @ B: dA = dC @ B^T, dB = A^T @ dC.

    Inside ``minitorch.amp.autocast`` float32 operands are rounded to its 16-bit dtype once: the forward
    multiplies the rounded copies and saves them (half the memory of float32 ones), and the backward
    rounds dC and multiplies it with them, in that dtype whether or not autocast is still on (as
    PyTorch's); every product comes out float32, so the gradients of float32 master weights are float32. Under
    autocast an ``a`` already in its 16-bit dtype is used as it is (no second rounding: the same bits), and its
    gradient comes in that dtype."""

    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.compute = compute = ops.product_dtype(a.dtype)
        ctx.grad_a_dtype = DTYPE
        if compute is None and a.dtype == ops.autocast_dtype() and b.dtype == DTYPE:
            # a already in the autocast dtype (an output kept rounded, e.g. flash attention's): used as it is, the
            # float32 b rounded; the gradient of a comes out in a's dtype (what its consumer rounds it to: the
            # product rounds its float32 sums once, as a conversion would)
            ctx.compute = compute = ctx.grad_a_dtype = a.dtype
        if compute is None:
            ctx.save_for_backward(a, b)
            return ops.matmul(a, b, compute_dtype=DTYPE if a.dtype == DTYPE else None)
        a16, b16 = ops.convert(a, compute), ops.convert(b, compute)
        ctx.save_for_backward(a16, b16)
        return ops.matmul(a16, b16, out_dtype=DTYPE)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        # Transposed operands are read in place where the learner's Phase 5 GEMM serves (ops.matmul).
        # dB (a weight's gradient: few output tiles, K = the rows) may run on a side branch of a captured graph,
        # concurrently with what follows (ops.set_concurrent_weight_grads)
        if ctx.compute is None:
            compute = DTYPE if grad.dtype == DTYPE else None  # recorded in float32: stays float32
            grad_a = ops.matmul(grad, b, transpose_b=True, compute_dtype=compute) if ctx.needs_input_grad[0] else None
            if not ctx.needs_input_grad[1]:
                return grad_a, None
            with ops.weight_grad_branch(grad.device):
                return grad_a, ops.matmul(a, grad, transpose_a=True, compute_dtype=compute)
        g16 = ops.convert(grad, ctx.compute)
        grad_a = ops.matmul(g16, b, transpose_b=True, out_dtype=ctx.grad_a_dtype) if ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:
            return grad_a, None
        with ops.weight_grad_branch(grad.device):
            return grad_a, ops.matmul(a, g16, transpose_a=True, out_dtype=DTYPE)


class LinearBias(Function):
    """y = x @ W + b under autocast (a Linear layer's forward): one product whose bias is added as it is
    stored (``ops.matmul(..., bias=b)``: on the tensor cores' rungs 5 and 6 no pass of its own over y). The
    gradients are MatMul's and AddBias's: dx = dy @ Wᵀ, dW = xᵀ @ dy (16-bit products, float32 results), db
    = the column sums of dy. One pass over dy rounds it for the products and sums its columns
    (``ops.convert_with_column_sums``) where AddBias and MatMul would read it twice; dx and dW are the same bits
    as theirs, db the same sums (added in another order where blocks of rows meet by atomics)."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, w: Tensor, b: Tensor, keep_rounded: bool = False) -> Tensor:
        # x float32 (rounded here), or already in the autocast dtype (used as it is, as MatMul does: its gradient
        # then comes out in that dtype). keep_rounded: y in the autocast dtype (rounded as it is stored), for a
        # consumer that would round it anyway; its gradient then comes in that dtype too
        ctx.compute = compute = ops.product_dtype(x.dtype) or x.dtype
        ctx.grad_x_dtype = x.dtype
        x16, w16 = ops.convert(x, compute), ops.convert(w, compute)
        ctx.save_for_backward(x16, w16)
        return ops.matmul(x16, w16, out_dtype=compute if keep_rounded else DTYPE, bias=b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x16, w16 = ctx.saved_tensors
        grad_b = None
        if ctx.needs_input_grad[2] and grad.dtype == DTYPE:  # one pass over dy: its 16-bit copy and column sums
            g16, grad_b = ops.convert_with_column_sums(grad, ctx.compute)
        elif ctx.needs_input_grad[2] and grad.dtype == ctx.compute:  # dy already rounded: only its column sums
            g16, grad_b = grad, ops.column_sums_16bit(grad)
        else:
            g16 = ops.convert(grad, ctx.compute)
        grad_x = (ops.matmul(g16, w16, transpose_b=True, out_dtype=ctx.grad_x_dtype) if ctx.needs_input_grad[0]
                  else None)
        with ops.weight_grad_branch(grad.device):
            grad_w = ops.matmul(x16, g16, transpose_a=True, out_dtype=DTYPE) if ctx.needs_input_grad[1] else None
            if ctx.needs_input_grad[2] and grad_b is None:
                grad_b = ops.bias_grad(ops.convert(grad, DTYPE))
        return grad_x, grad_w, grad_b


class Transpose(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor) -> Tensor:
        return ops.transpose(a)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.transpose(grad)
