"""The Functions of attention: batched matmul, the masked softmax, head split/merge, and causal
self-attention as one Function made of them (it keeps Q, K, V and the probabilities for its backward)."""

from __future__ import annotations

from typing import Any

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import DTYPE, Tensor


def _recorded_compute(dtype: object) -> object:
    """The format a Function's products run in, fixed at its forward: autocast's dtype, or float32 (so a
    backward run under a later autocast, or outside the forward's, multiplies as the forward did)."""
    return ops.product_dtype(dtype) or DTYPE


class BatchedMatMul(Function):
    """C[i] = A[i] @ B[i]: dA = dC Bᵀ, dB = Aᵀ dC, batch by batch (transposes read in place); under
    autocast all three products in its 16-bit dtype, fp32 results."""

    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        ctx.compute = c = _recorded_compute(a.dtype)
        return ops.bmm(a, b, compute_dtype=c)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        c = ctx.compute
        return (ops.bmm(grad, b, transpose_b=True, compute_dtype=c) if ctx.needs_input_grad[0] else None,
                ops.bmm(a, grad, transpose_a=True, compute_dtype=c) if ctx.needs_input_grad[1] else None)


class AttentionSoftmax(Function):
    """softmax(scale * scores) over the last dimension, causal by default."""

    @staticmethod
    def forward(ctx: Context, scores: Tensor, scale: float, causal: bool) -> Tensor:
        probs = ops.attention_softmax(scores, scale, causal=causal)
        ctx.save_for_backward(probs)  # the softmax's gradient needs only its output
        ctx.scale, ctx.causal = scale, causal
        return probs

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (probs,) = ctx.saved_tensors
        return ops.attention_softmax_backward(probs, grad, ctx.scale, causal=ctx.causal)


class SplitHeads(Function):
    """(B, T, C) -> (B, H, T, D): a layout change; its gradient is the inverse one."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, n_head: int) -> Tensor:
        (heads,) = ops.split_heads(x, n_head)
        return heads

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.merge_heads(grad)


class MergeHeads(Function):
    """(B, H, T, D) -> (B, T, H D)."""

    @staticmethod
    def forward(ctx: Context, y: Tensor) -> Tensor:
        ctx.n_head = y.shape[1]
        return ops.merge_heads(y)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (heads,) = ops.split_heads(grad, ctx.n_head)
        return heads


class CausalSelfAttention(Function):
    """y (B, T, C) = causal multi-head attention of qkv (B, T, 3C) (Q | K | V): one Function, so the tape
    keeps one entry and the backward reuses the forward's Q, K, V and probabilities. With dropout the
    backward regenerates the forward's mask from the step the forward's kernel recorded."""

    @staticmethod
    def forward(ctx: Context, qkv: Tensor, n_head: int, dropout_p: float = 0.0, seed: int = 0,
                step: Any = None) -> Tensor:
        ctx.compute = c = _recorded_compute(qkv.dtype)
        ctx.dropout = None
        if dropout_p:
            used = ops.dropout_step_slot(qkv.device)
            ctx.dropout = ops.AttentionDropout(dropout_p, seed, used, ops.dropout_step_slot(qkv.device))
            y, saved = ops.attention(qkv, n_head, compute_dtype=c,
                                     dropout=ops.AttentionDropout(dropout_p, seed, step, used))
        else:
            y, saved = ops.attention(qkv, n_head, compute_dtype=c)
        ctx.save_for_backward(*saved)
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.attention_backward(grad, ctx.saved_tensors, compute_dtype=ctx.compute, dropout=ctx.dropout)
