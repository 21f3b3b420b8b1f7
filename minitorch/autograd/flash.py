"""Attention by FlashAttention (Phase 8b) as autograd Functions: the forward keeps q, k, v, its output and the
rows' logsumexp, never the T x T probabilities; the backward recomputes them (and dropout's mask, from the same
seed and offset: with dropout the forward's kernel records the offset it read, in a slot of its own, and the
backward reads that record, so a counter advanced since, by another forward or a replay, changes nothing).

- ``ScaledDotProductAttention``: on (B, H, T, D) 16-bit tensors (``functional.scaled_dot_product_attention``);
- ``FlashSelfAttention``: a GPT's causal self-attention from its fused projection, qkv (B, T, 3C) float32, to
  y (B, T, C) float32, the heads split, rounded to 16 bits, attended and merged inside one Function
  (``functional.flash_self_attention``; ``nn.GPT(..., attention="flash")``).
"""

from __future__ import annotations

from typing import Any

from minitorch import ops
from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


def _attend(ctx: Context, q: Tensor, k: Tensor, v: Tensor, causal: bool, dropout_p: float, seed: int,
            offset: Any) -> tuple[Tensor, Tensor]:
    """flash_attention's (o, lse), with ctx.options set for the backward (the offset: the forward's record)."""
    from minitorch.ops import dropout  # here, not above: minitorch.ops imports the tensor, which imports autograd

    used = dropout.step_slot(q.device) if dropout_p else None
    o, lse = ops.flash_attention(q, k, v, causal=causal, dropout_p=dropout_p, seed=seed, offset=offset,
                                 offset_used=used)
    ctx.options = dict(causal=causal, dropout_p=dropout_p, seed=seed, offset=0 if used is None else used)
    return o, lse


class ScaledDotProductAttention(Function):
    """o = dropout(softmax(q kᵀ / √D, causal)) v on (B, H, T, D) tensors; dq, dk, dv by flash.py's backward."""

    @staticmethod
    def forward(ctx: Context, q: Tensor, k: Tensor, v: Tensor, causal: bool, dropout_p: float, seed: int,
                offset: Any) -> Tensor:
        o, lse = _attend(ctx, q, k, v, causal, dropout_p, seed, offset)
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, o, lse = ctx.saved_tensors
        if grad.dtype != o.dtype:  # a gradient that arrives in another dtype (a float32 loss): o's, as the kernels'
            grad = ops.convert(grad, o.dtype)
        return ops.flash_attention_backward(q, k, v, o, lse, grad, **ctx.options)


class FlashSelfAttention(Function):
    """y (B, T, C) = causal multi-head attention of qkv (B, T, 3C) (Q | K | V side by side, as Phase 7's
    CausalSelfAttention; float32, or float64 on cpu), computed by FlashAttention in ``dtype`` (float16 or
    bfloat16), with dropout of the probabilities (p, seed, offset: an int or a counter); y in qkv's dtype, or
    ``out_dtype`` (``dtype`` itself: the product that follows under autocast would round it to that anyway).
    The tape keeps one entry; the backward is the forward's mirror: the gradient of y rounded and split into
    heads, flash's backward, dq | dk | dv merged and widened. Every layout change moves 16-bit values (half the
    bytes of float32 ones): 7 launches forward, 9 backward."""

    @staticmethod
    def forward(ctx: Context, qkv: Tensor, n_head: int, dtype: Any, dropout_p: float, seed: int,
                offset: Any, out_dtype: Any = None) -> Tensor:
        # rounded whole first (one conversion), then split: 16-bit heads move as words of two values
        heads = ops.split_heads(ops.convert(qkv, dtype), n_head, parts=3)  # (B, H, T, D) each
        o, lse = _attend(ctx, *heads, True, dropout_p, seed, offset)
        ctx.save_for_backward(*heads, o, lse)
        ctx.dtype, ctx.out_dtype = dtype, qkv.dtype
        return ops.convert(ops.merge_heads(o), out_dtype or qkv.dtype)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        q, k, v, o, lse = ctx.saved_tensors
        (grad_heads,) = ops.split_heads(ops.convert(grad, ctx.dtype), q.shape[1])
        grads = ops.flash_attention_backward(q, k, v, o, lse, grad_heads, **ctx.options)
        return ops.convert(ops.merge_heads(*grads), ctx.out_dtype)  # dq | dk | dv, as qkv's Q | K | V
