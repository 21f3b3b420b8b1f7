"""Scaled dot-product attention as one Function on FlashAttention (Phase 8b): the forward keeps q, k, v, its
output and the rows' logsumexp, never the T x T probabilities; the backward recomputes them (and dropout's
mask, from the same seed and offset)."""

from __future__ import annotations

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


class ScaledDotProductAttention(Function):
    """o = dropout(softmax(q kᵀ / √D, causal)) v on (B, H, T, D) tensors; dq, dk, dv by flash.py's backward."""

    @staticmethod
    def forward(ctx: Context, q: Tensor, k: Tensor, v: Tensor, causal: bool, dropout_p: float, seed: int,
                offset: int) -> Tensor:
        o, lse = ops.flash_attention(q, k, v, causal=causal, dropout_p=dropout_p, seed=seed, offset=offset)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, dropout_p=dropout_p, seed=seed, offset=offset)
        return o

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, o, lse = ctx.saved_tensors
        if grad.dtype != o.dtype:  # a gradient that arrives in another dtype (a float32 loss): o's, as the kernels'
            grad = ops.convert(grad, o.dtype)
        return ops.flash_attention_backward(q, k, v, o, lse, grad, **ctx.options)
