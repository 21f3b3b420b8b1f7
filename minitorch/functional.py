"""Functions on tensors, recorded for autograd (PyTorch's ``torch.nn.functional``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minitorch import autograd
from minitorch.ops.softmax import class_indices, targets_for
from minitorch.tensor import DTYPE, Tensor

__all__ = ["mse_loss", "relu", "sigmoid",
           # Phase 6
           "accuracy", "class_indices", "conv2d", "cross_entropy", "log_softmax", "max_pool2d", "softmax"]


def _tensor(op: str, name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: `{name}` must be a minitorch Tensor, got {type(x).__name__}")
    return x


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    """The mean squared error over every element, a 0-d tensor; pred and target have one shape."""
    _tensor("mse_loss", "pred", pred)
    _tensor("mse_loss", "target", target)
    if pred.shape != target.shape:
        raise ValueError(f"mse_loss: target must have the shape of pred, {pred.shape}; got {target.shape}")
    return autograd.MSELoss.apply(pred, target)


def relu(x: Tensor) -> Tensor:
    """max(x, 0), elementwise."""
    return autograd.ReLU.apply(_tensor("relu", "x", x))


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), elementwise."""
    return autograd.Sigmoid.apply(_tensor("sigmoid", "x", x))


# ---------------------------------------------------------------- Phase 6: classification


def _over_last_dim(op: str, x: Tensor, dim: int, fn: type[autograd.Function]) -> Tensor:
    """Apply a row-wise Function over the last dimension of x (any number of dimensions >= 1)."""
    _tensor(op, "x", x)
    if x.ndim == 0 or dim not in (-1, x.ndim - 1):
        raise ValueError(f"{op}: only the last dimension is supported (dim=-1), got dim={dim} for shape {x.shape}")
    if x.ndim == 2:
        return fn.apply(x)
    return fn.apply(x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1])).reshape(x.shape)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along the last dimension (rows of a matrix)."""
    return _over_last_dim("softmax", x, dim, autograd.Softmax)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """log(softmax(x)) along the last dimension, computed as x - max - log(sum(exp(x - max)))."""
    return _over_last_dim("log_softmax", x, dim, autograd.LogSoftmax)


def cross_entropy(logits: Tensor, targets: Any) -> Tensor:
    """Softmax cross-entropy, the mean over the batch: mean_r(-log softmax(logits)[r, targets[r]]), a 0-d tensor.

    ``logits``: (N, C) float32 (float64 on cpu). ``targets``: (N,) integer class indices in 0 .. C-1, as
    an integer tensor on the logits' device (:func:`class_indices`: int32 on cuda/emu, int64 on cpu) or
    as a NumPy integer array (checked on the host and copied to the device on every call; a captured
    graph needs the tensor). A device tensor holding a target outside 0 .. C-1 gives a NaN loss.
    The backward is one fused kernel: (softmax(logits) - onehot(targets)) / N.
    """
    _tensor("cross_entropy", "logits", logits)
    if logits.ndim != 2:
        raise ValueError(f"cross_entropy: logits must be (batch, classes), got shape {logits.shape}")
    return autograd.CrossEntropy.apply(logits, targets_for("cross_entropy", targets, logits))


def accuracy(logits: Tensor, targets: Any) -> float:
    """The fraction of rows whose largest logit is at the target class (the first largest on a tie).

    Read on the host: one copy of the (N, C) logits (and of the targets when they are a tensor)."""
    _tensor("accuracy", "logits", logits)
    if logits.ndim != 2 or logits.shape[0] == 0:
        raise ValueError(f"accuracy: logits must be (batch, classes) with batch > 0, got shape {logits.shape}")
    t = targets_for("accuracy", targets, logits)
    return float(np.mean(np.argmax(logits.numpy(), axis=1) == t.numpy()))


# ---------------------------------------------------------------- Phase 6: convolution and pooling


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int = 1, padding: int = 0) -> Tensor:
    """The 2-D convolution (cross-correlation) of x (N, C, H, W) with weight (K, C, R, S), plus bias (K,):
    y (N, K, P, Q), P = (H + 2 padding - R) // stride + 1 (Q likewise)."""
    _tensor("conv2d", "x", x)
    _tensor("conv2d", "weight", weight)
    if bias is not None:
        _tensor("conv2d", "bias", bias)
    return autograd.Conv2d.apply(x, weight, bias, stride, padding)


def max_pool2d(x: Tensor, kernel_size: int, stride: int | None = None, padding: int = 0) -> Tensor:
    """The maximum of each kernel_size x kernel_size window of x (N, C, H, W); stride = kernel_size unless
    given. The gradient goes to the first maximum of each window in row-major order."""
    return autograd.MaxPool2d.apply(_tensor("max_pool2d", "x", x), kernel_size, stride, padding)


# --- Phase 7: transformers ----------------------------------------------------------------------

__all__ += ["attention_softmax", "bmm", "causal_self_attention", "embedding", "gelu", "layer_norm", "merge_heads",
            "split_heads"]


def gelu(x: Tensor, keep_rounded: bool = False) -> Tensor:
    """GELU in GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). ``keep_rounded``:
    under autocast, a float32 x gives its output in the autocast dtype (rounded once as it is made), for a
    product that would round it anyway; its gradient then comes in that dtype too."""
    from minitorch import ops

    x = _tensor("gelu", "x", x)
    rounded = ops.autocast_dtype() if keep_rounded and x.dtype == DTYPE else None
    return autograd.GELU.apply(x, rounded)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (population variance)."""
    _tensor("layer_norm", "weight", weight)
    _tensor("layer_norm", "bias", bias)
    return autograd.LayerNorm.apply(_tensor("layer_norm", "x", x), weight, bias, float(eps))


def embedding(idx: Tensor, weight: Tensor) -> Tensor:
    """The rows of ``weight`` (vocab, dim) named by the int32 ids ``idx``: idx.shape + (dim,)."""
    _tensor("embedding", "idx", idx)
    return autograd.Embedding.apply(_tensor("embedding", "weight", weight), idx)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """A batch of matrix products: (batch, M, K) @ (batch, K, N) -> (batch, M, N)."""
    return autograd.BatchedMatMul.apply(_tensor("bmm", "a", a), _tensor("bmm", "b", b))


def attention_softmax(scores: Tensor, scale: float = 1.0, causal: bool = True) -> Tensor:
    """softmax(scale * scores) over the last dimension; ``causal``: scores (..., T, T), query t sees keys <= t."""
    return autograd.AttentionSoftmax.apply(_tensor("attention_softmax", "scores", scores), float(scale), bool(causal))


def split_heads(x: Tensor, n_head: int) -> Tensor:
    """(B, T, C) -> (B, n_head, T, C / n_head)."""
    return autograd.SplitHeads.apply(_tensor("split_heads", "x", x), int(n_head))


def merge_heads(y: Tensor) -> Tensor:
    """(B, H, T, D) -> (B, T, H D): the inverse of split_heads."""
    return autograd.MergeHeads.apply(_tensor("merge_heads", "y", y))


def causal_self_attention(qkv: Tensor, n_head: int, *, dropout_p: float = 0.0, seed: int = 0,
                          step: Any = None) -> Tensor:
    """Causal multi-head self-attention: qkv (B, T, 3C) holds Q | K | V side by side, each C = n_head * D
    columns (head h at columns h * D ... (h + 1) * D of its part); returns (B, T, C), the heads merged.

    ``dropout_p`` > 0: the probabilities are dropped (nanoGPT's ``attn_dropout``), keep from Philox under
    ``seed`` at stream ``step[0] << 16`` (``step``: a one-element int64 counter on qkv's device, as
    ``nn.Dropout`` keeps; the caller advances it); the backward regenerates the mask."""
    qkv = _tensor("causal_self_attention", "qkv", qkv)
    if dropout_p and step is None:
        raise ValueError("causal_self_attention: dropout_p > 0 needs step, a one-element int64 counter on the "
                         "device (nn.Dropout.next_step gives one)")
    return autograd.CausalSelfAttention.apply(qkv, int(n_head), float(dropout_p), int(seed), step)


# --- Phase 8b: FlashAttention -------------------------------------------------------------------

__all__ += ["scaled_dot_product_attention"]


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, dropout_p: float = 0.0,
                                 training: bool = True, seed: int | None = None, offset: Any = 0) -> Tensor:
    """softmax(q kᵀ / √D [causal]) v on (B, H, T, D) tensors, by the learner's FlashAttention (``flash.py``,
    Phase 8b) on cuda and emu: float16 or bfloat16, D = 64 or 128 (a float32 tensor raises TypeError naming
    ``.to("bfloat16")``); NumPy in float64 on cpu. With ``training`` and ``dropout_p`` > 0, dropout inside the
    attention: each probability is dropped with probability p, the rest scaled by 1 / (1 - p), from Phase 5's
    Philox under ``seed`` (drawn from NumPy's global generator when None: ``np.random.seed`` makes it
    repeatable) and ``offset``; the backward regenerates the same mask. ``offset``: an int, or a counter (a
    one-element int64 array on the device, ``ops.dropout.new_counter``) that the kernels read from device
    memory: advanced on the device (``ops.dropout.advance_``), it gives a captured graph new masks on every
    replay, where an int (and the seed) stay as the capture had them."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _tensor("scaled_dot_product_attention", name, t)
    p = float(dropout_p) if training else 0.0
    if seed is None:
        seed = int(np.random.randint(0, 2 ** 63, dtype=np.int64)) if p > 0 else 0
    return autograd.ScaledDotProductAttention.apply(q, k, v, bool(causal), p, int(seed), offset)


__all__ += ["flash_self_attention"]


def flash_self_attention(qkv: Tensor, n_head: int, dropout_p: float = 0.0, training: bool = True,
                         seed: int | None = None, offset: Any = 0, dtype: Any = None,
                         keep_rounded: bool = False) -> Tensor:
    """Phase 7's ``causal_self_attention`` of qkv (B, T, 3C) float32 by the learner's FlashAttention (Phase 8b):
    y (B, T, C) float32, never the T x T scores in memory. The heads (D = C / n_head: 64 or 128) are rounded
    to ``dtype`` (float16 or bfloat16; default: the autocast dtype when an ``amp.autocast`` region is active,
    else bfloat16) and attended on the tensor cores; the output is widened back to float32. With
    ``training`` and ``dropout_p`` > 0, dropout of the attention probabilities, as
    :func:`scaled_dot_product_attention` (its ``seed``, and ``offset``: an int or a counter in device memory).
    ``keep_rounded``: y stays in ``dtype`` instead (half the bytes; for a product under autocast, which takes it
    as it is: the same bits as rounding a float32 y); its gradient may come float32."""
    from minitorch import dtypes, ops
    from minitorch.ops.flash import HEAD_DIMS

    _tensor("flash_self_attention", "qkv", qkv)
    if qkv.ndim != 3 or n_head < 1 or qkv.shape[2] % (3 * n_head):
        raise ValueError(f"flash_self_attention: qkv must be (B, T, 3C) with C a multiple of n_head = {n_head}, "
                         f"got shape {qkv.shape}")
    d = qkv.shape[2] // (3 * n_head)
    if d not in HEAD_DIMS:
        raise ValueError(f"flash_self_attention: FlashAttention's kernels take head dims "
                         f"{' or '.join(map(str, HEAD_DIMS))}, got d_model / n_head = "
                         f"{qkv.shape[2] // 3} / {n_head} = {d}")
    dtype = dtypes.resolve(dtype) if dtype is not None else (ops.autocast_dtype() or dtypes.bfloat16)
    if dtype not in dtypes.HALF:
        raise TypeError(f"flash_self_attention: dtype must be float16 or bfloat16, got {dtype}")
    p = float(dropout_p) if training else 0.0
    if seed is None:
        seed = int(np.random.randint(0, 2 ** 63, dtype=np.int64)) if p > 0 else 0
    return autograd.FlashSelfAttention.apply(qkv, int(n_head), dtype, p, int(seed), offset,
                                             dtype if keep_rounded else None)
