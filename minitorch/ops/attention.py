"""The pieces of causal self-attention (Phase 7's ``attention.cu``), and attention made of them.

- ``bmm``: a batch of matrix products, operands optionally transposed (read in place on cuda/emu); inside
  ``minitorch.amp.autocast`` (or with ``compute_dtype=``) on 16-bit operands, one launch of the learner's
  ``hgemm.py`` for the whole batch (grid z = the batch index), fp32 accumulation and result (:func:`tensor_core_bmm`);
- ``attention_softmax`` / ``attention_softmax_backward``: scale, causal mask and softmax over the last
  dimension, fused;
- ``split_heads`` / ``merge_heads``: (B, T, parts * C) rows <-> (B, H, T, D) heads, C = H * D (16-bit tensors
  too: their bits moved as float32 words of two values);
- ``attention`` / ``attention_backward``: Y = softmax(Q Kᵀ / sqrt(D), causal) V for every head, from the
  fused projection qkv (B, T, 3C) (Q, K, V side by side) to y (B, T, C), and back. Under autocast its four
  (forward) and eight (backward) batched products run in 16 bits; the softmax and its backward stay fp32.
  With an :class:`AttentionDropout` the probabilities are dropped before P V (nanoGPT's ``attn_dropout``, the
  learner's ``dropout_apply``); the backward draws the same mask again instead of keeping the dropped P.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from minitorch import dtypes
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, real
from minitorch.ops.dropout import dropout as _dropout
from minitorch.ops.linalg import product_dtype, tensor_core_bmm
from minitorch.ops.precision import convert
from minitorch.ops.shape import reshape
from minitorch.tensor import DTYPE, HALF, Tensor


def _ndim(op: str, name: str, t: Tensor, ndim: int, what: str) -> tuple[int, ...]:
    if t.ndim != ndim:
        raise ValueError(f"{op}: `{name}` must be a {ndim}-D tensor {what}, got shape {t.shape}")
    return t.shape


def bmm(a: Tensor, b: Tensor, *, transpose_a: bool = False, transpose_b: bool = False,
        compute_dtype: Any = None) -> Tensor:
    """out[i] = op(a[i]) @ op(b[i]): (batch, M, K) @ (batch, K, N) -> (batch, M, N); with transpose_a, a is
    stored (batch, K, M), with transpose_b, b is stored (batch, N, K).

    ``compute_dtype`` (float16 or bfloat16; default: the autocast dtype, if any; float32: none) rounds the
    float32 operands and multiplies them on the tensor cores; the result stays float32."""
    device, dtype = check_tensors("bmm", a=a, b=b)
    _ndim("bmm", "a", a, 3, "(batch, M, K)")
    _ndim("bmm", "b", b, 3, "(batch, K, N)")
    batch, m, k = (a.shape[0], a.shape[2], a.shape[1]) if transpose_a else a.shape
    k2, n = (b.shape[2], b.shape[1]) if transpose_b else b.shape[1:]
    if b.shape[0] != batch or k != k2:
        raise ValueError(f"bmm: op(a) is ({batch}, {m}, {k}) (a has shape {a.shape}), so op(b) must be "
                         f"({batch}, {k}, N); got b of shape {b.shape}{' (transposed)' if transpose_b else ''}")
    compute = product_dtype(dtype, compute_dtype)
    if compute is not None:
        return tensor_core_bmm(a, b, compute, (batch, m, n, k), transpose_a, transpose_b)
    if device == "cpu":
        av = np.swapaxes(a.data, 1, 2) if transpose_a else a.data
        bv = np.swapaxes(b.data, 1, 2) if transpose_b else b.data
        return cpu_result(np.matmul(av, bv), dtype)
    out = empty(device, (batch, m, n))
    if out.size:
        launch(device, "attention.py", "bmm", a.data, b.data, out, transpose_a, transpose_b, outputs=(2,))
    return Tensor(out, device)


def _check_square(op: str, t: Tensor, causal: bool) -> None:
    if t.ndim < 1 or (causal and (t.ndim < 2 or t.shape[-1] != t.shape[-2])):
        raise ValueError(f"{op}: causal scores must end in two equal dimensions (T, T) (query, key), "
                         f"got shape {t.shape}")


def attention_softmax(scores: Tensor, scale: float = 1.0, *, causal: bool = True) -> Tensor:
    """softmax(scale * scores) over the last dimension; with ``causal``, scores ends in (T, T) and query t
    sees keys 0..t only (the rest get probability 0)."""
    device, dtype = check_tensors("attention_softmax", scores=scores)
    scale = real("attention_softmax", "scale", scale)
    _check_square("attention_softmax", scores, causal)
    if device == "cpu":
        z = scores.data * dtype.type(scale)
        if causal:
            t = scores.shape[-1]
            z = np.where(np.tril(np.ones((t, t), bool)), z, dtype.type(-np.inf))
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return cpu_result(e / e.sum(axis=-1, keepdims=True), dtype)
    out = empty(device, scores.shape)
    if scores.size:
        launch(device, "attention.py", "softmax_forward", scores.data, out, scale, causal, outputs=(1,))
    return Tensor(out, device)


def attention_softmax_backward(probs: Tensor, grad_probs: Tensor, scale: float = 1.0, *,
                               causal: bool = True) -> Tensor:
    """The gradient of the scores: scale * p * (dp - sum(p * dp)) per row (0 where masked)."""
    device, dtype = check_tensors("attention_softmax_backward", probs=probs, grad_probs=grad_probs)
    scale = real("attention_softmax_backward", "scale", scale)
    if grad_probs.shape != probs.shape:
        raise ValueError(f"attention_softmax_backward: `grad_probs` must have the shape of probs, {probs.shape}; "
                         f"got {grad_probs.shape}")
    _check_square("attention_softmax_backward", probs, causal)
    if device == "cpu":
        p, dp = probs.data, grad_probs.data
        return cpu_result(dtype.type(scale) * p * (dp - (p * dp).sum(axis=-1, keepdims=True)), dtype)
    out = empty(device, probs.shape)
    if probs.size:
        launch(device, "attention.py", "softmax_backward", probs.data, grad_probs.data, out, scale, causal,
               outputs=(2,))
    return Tensor(out, device)


def _words(t: Tensor) -> Tensor:
    """A 16-bit tensor's storage read as float32 words, two values a word (its last dimension halved)."""
    return Tensor(t.data.view(np.float32), t.device)


def _halves(t: Tensor, dtype: Any) -> Tensor:
    """The inverse of _words: float32 words read as the 16-bit values of ``dtype`` they hold."""
    return Tensor(t.data.view(dtypes.storage(dtype)), t.device)


def split_heads(x: Tensor, n_head: int, parts: int = 1) -> tuple[Tensor, ...]:
    """x (B, T, parts * C) -> ``parts`` tensors (B, H, T, D), H = n_head, D = C / H: part p is the columns
    p * C ... (p + 1) * C of each row, cut into heads of D columns.

    float32 (float64 on cpu); and float16 / bfloat16, whose bits only move: with D even, the learner's float32
    kernel moves them as words of two values (the heads of the words are the words of the heads), so a
    16-bit layout change costs what a float32 one of half the width does; with D odd, through float32
    (exact both ways)."""
    device, dtype = check_tensors("split_heads", half=True, x=x)
    batch, t, width = _ndim("split_heads", "x", x, 3, "(B, T, columns)")
    if n_head < 1 or parts < 1 or width % (parts * n_head):
        raise ValueError(f"split_heads: {width} columns do not split into {parts} part(s) of {n_head} heads")
    d = width // (parts * n_head)
    if device == "cpu":
        heads = x.data.reshape(batch, t, parts, n_head, d).transpose(2, 0, 3, 1, 4)
        return tuple(Tensor(np.ascontiguousarray(heads[p]), "cpu") for p in range(parts))
    if dtype in HALF:
        if d % 2:
            return tuple(convert(h, dtype) for h in split_heads(convert(x, DTYPE), n_head, parts))
        return tuple(_halves(h, dtype) for h in split_heads(_words(x), n_head, parts))
    outs = []
    for p in range(parts):
        out = empty(device, (batch, n_head, t, d))
        if out.size:
            launch(device, "attention.py", "split_heads", x.data, out, p, outputs=(1,))
        outs.append(Tensor(out, device))
    return tuple(outs)


def merge_heads(*ys: Tensor) -> Tensor:
    """The inverse of split_heads: tensors (B, H, T, D) -> (B, T, len(ys) * H * D), side by side (16-bit ones
    as split_heads moves them)."""
    if not ys:
        raise ValueError("merge_heads: expected at least one (B, H, T, D) tensor")
    device, dtype = check_tensors("merge_heads", half=True, **{f"y{i}": y for i, y in enumerate(ys)})
    shape = _ndim("merge_heads", "y0", ys[0], 4, "(B, H, T, D)")
    for i, y in enumerate(ys):
        if y.shape != shape:
            raise ValueError(f"merge_heads: every part must have the shape of y0, {shape}; y{i} has {y.shape}")
    batch, h, t, d = shape
    if device == "cpu":
        stacked = np.stack([y.data for y in ys])  # (parts, B, H, T, D)
        return Tensor(np.ascontiguousarray(stacked.transpose(1, 3, 0, 2, 4).reshape(batch, t, len(ys) * h * d)),
                      "cpu")
    if dtype in HALF:
        if d % 2:
            return convert(merge_heads(*(convert(y, DTYPE) for y in ys)), dtype)
        return _halves(merge_heads(*(_words(y) for y in ys)), dtype)
    out = empty(device, (batch, t, len(ys) * h * d))
    if out.size:
        for p, y in enumerate(ys):
            launch(device, "attention.py", "merge_heads", y.data, out, p, outputs=(1,))
    return Tensor(out, device)


class AttentionDropout(NamedTuple):
    """The dropout of attention's probabilities: element i of P (B H, T, T) is kept when the Philox uniform
    u_i under ``seed`` at stream ``step[0] << 16`` is at least ``p`` (minitorch.ops.dropout, site 0);
    ``step_used`` (one int64) receives the step the kernel read, so a backward regenerates that mask."""

    p: float
    seed: int
    step: Any
    step_used: Any


def attention(qkv: Tensor, n_head: int, compute_dtype: Any = None,
              dropout: AttentionDropout | None = None) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Causal multi-head self-attention of qkv (B, T, 3C), Q | K | V side by side: (y (B, T, C), saved),
    saved = (q, k, v, probs) for attention_backward (probs before any dropout). ``compute_dtype``: the
    products' format, as bmm's. ``dropout``: P V becomes dropout(P) V."""
    check_tensors("attention", qkv=qkv)
    if qkv.ndim != 3 or qkv.shape[2] % (3 * n_head):
        raise ValueError(f"attention: qkv must be (B, T, 3C) with C a multiple of n_head = {n_head}, "
                         f"got shape {qkv.shape}")
    batch, t, width = qkv.shape
    d = width // (3 * n_head)
    q, k, v = split_heads(qkv, n_head, parts=3)                         # (B, H, T, D) each
    flat = (batch * n_head, t, d)
    scores = bmm(reshape(q, flat), reshape(k, flat), transpose_b=True,  # Q Kᵀ: (B H, T, T)
                 compute_dtype=compute_dtype)
    probs = attention_softmax(scores, 1.0 / math.sqrt(d))                # fp32, under autocast too
    kept = probs if dropout is None else _dropout(probs, dropout.p, dropout.seed, 0, dropout.step,
                                                  dropout.step_used)
    y = bmm(kept, reshape(v, flat), compute_dtype=compute_dtype)        # P V: (B H, T, D)
    return merge_heads(reshape(y, (batch, n_head, t, d))), (q, k, v, probs)


def attention_backward(grad_y: Tensor, saved: tuple[Tensor, ...], compute_dtype: Any = None,
                       dropout: AttentionDropout | None = None) -> Tensor:
    """The gradient of qkv (B, T, 3C) from that of y (B, T, C) and attention's saved tensors;
    ``compute_dtype``: the products' format (the autograd Function passes the forward's). ``dropout``: the
    forward's, its ``step`` the step the forward recorded (and ``step_used`` a scratch slot): the mask is
    drawn again, dP = mask ⊙ (dY Vᵀ) / (1 - p) and dV = (mask ⊙ P / (1 - p))ᵀ dY."""
    q, k, v, probs = saved
    batch, n_head, t, d = q.shape
    flat = (batch * n_head, t, d)
    (grad_heads,) = split_heads(grad_y, n_head)                     # (B, H, T, D)
    g = reshape(grad_heads, flat)
    c = compute_dtype
    grad_probs = bmm(g, reshape(v, flat), transpose_b=True, compute_dtype=c)        # dP = dY Vᵀ
    kept = probs
    if dropout is not None:  # the forward's mask, regenerated: on the gradient of P, and on P for dV
        drop = (dropout.p, dropout.seed, 0, dropout.step, dropout.step_used)
        grad_probs, kept = _dropout(grad_probs, *drop), _dropout(probs, *drop)
    grad_v = bmm(kept, g, transpose_a=True, compute_dtype=c)                        # dV = Pᵀ dY
    grad_scores = attention_softmax_backward(probs, grad_probs, 1.0 / math.sqrt(d))
    grad_q = bmm(grad_scores, reshape(k, flat), compute_dtype=c)                    # dQ = dS K
    grad_k = bmm(grad_scores, reshape(q, flat), transpose_a=True, compute_dtype=c)  # dK = dSᵀ Q
    shape = (batch, n_head, t, d)
    return merge_heads(reshape(grad_q, shape), reshape(grad_k, shape), reshape(grad_v, shape))
