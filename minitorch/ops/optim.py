"""Optimizer updates, in place (Phase 3b's ``sgd.cu``)."""

from __future__ import annotations

from minitorch.ops.dispatch import check_tensors, launch, real, same_shape
from minitorch.tensor import Tensor


def sgd_momentum_(param: Tensor, grad: Tensor, velocity: Tensor, lr: float, momentum: float) -> None:
    """In place: velocity = momentum * velocity + grad; param -= lr * velocity."""
    device, dtype = check_tensors("sgd_momentum_", param=param, grad=grad, velocity=velocity)
    same_shape("sgd_momentum_", "param", param, "grad", grad)
    same_shape("sgd_momentum_", "param", param, "velocity", velocity)
    lr, momentum = real("sgd_momentum_", "lr", lr), real("sgd_momentum_", "momentum", momentum)
    if device == "cpu":
        v, p = velocity.data, param.data
        v *= dtype.type(momentum)
        v += grad.data
        p -= dtype.type(lr) * v
        return
    if param.size:
        launch(device, "sgd.py", "sgd_momentum", param.data, grad.data, velocity.data, lr, momentum, outputs=())
