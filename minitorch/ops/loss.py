"""Losses and their gradients (Phase 3b's ``backward.cu``)."""

from __future__ import annotations

import numpy as np

from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, real, same_shape
from minitorch.tensor import Tensor


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    """mean((pred - target)^2) over every element, as a 0-d tensor."""
    device, dtype = check_tensors("mse_loss", pred=pred, target=target)
    same_shape("mse_loss", "pred", pred, "target", target)
    if pred.size == 0:
        raise ValueError(f"mse_loss: the mean of no elements is undefined (pred has shape {pred.shape})")
    if device == "cpu":
        diff = pred.data - target.data
        return cpu_result(np.mean(diff * diff), dtype)
    loss = empty(device, (1,))
    launch(device, "backward.py", "mse_loss", pred.data, target.data, loss, outputs=(2,))
    return Tensor(loss.reshape(()), device)


def mse_backward(pred: Tensor, target: Tensor, scale: float = 1.0) -> Tensor:
    """d(scale * mse_loss(pred, target)) / d(pred) = scale * 2 (pred - target) / n."""
    device, dtype = check_tensors("mse_backward", pred=pred, target=target)
    same_shape("mse_backward", "pred", pred, "target", target)
    scale = real("mse_backward", "scale", scale)
    if device == "cpu":
        n = pred.size or 1
        return cpu_result((dtype.type(scale * 2.0 / n) * (pred.data - target.data)), dtype)
    out = empty(device, pred.shape)
    if pred.size:
        launch(device, "backward.py", "mse_backward", pred.data, target.data, out, scale, outputs=(2,))
    return Tensor(out, device)
