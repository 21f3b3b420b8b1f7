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
