"""The Function of an embedding lookup: gradients flow to the table, never to the ids."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class Embedding(Function):
    """weight[idx]: (vocab, dim) table, int32 ids of any shape -> idx.shape + (dim,)."""

    @staticmethod
    def forward(ctx: Context, weight: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.vocab = weight.shape[0]
        return ops.embedding(idx, weight)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, None]:
        (idx,) = ctx.saved_tensors
        return ops.embedding_backward(idx, grad, ctx.vocab), None
