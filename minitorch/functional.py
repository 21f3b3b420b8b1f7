"""Functions on tensors, recorded for autograd (PyTorch's ``torch.nn.functional``)."""

from __future__ import annotations

from minitorch import autograd
from minitorch.tensor import Tensor

__all__ = ["mse_loss", "relu", "sigmoid"]


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


# --- Phase 7: transformers ----------------------------------------------------------------------

__all__ += ["attention_softmax", "bmm", "causal_self_attention", "embedding", "gelu", "layer_norm", "merge_heads",
            "split_heads"]


def gelu(x: Tensor) -> Tensor:
    """GELU in GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return autograd.GELU.apply(_tensor("gelu", "x", x))


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


def causal_self_attention(qkv: Tensor, n_head: int) -> Tensor:
    """Causal multi-head self-attention: qkv (B, T, 3C) holds Q | K | V side by side, each C = n_head * D
    columns (head h at columns h * D ... (h + 1) * D of its part); returns (B, T, C), the heads merged."""
    return autograd.CausalSelfAttention.apply(_tensor("causal_self_attention", "qkv", qkv), int(n_head))
