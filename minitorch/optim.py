"""Optimizers: ``SGD`` with momentum (the learner's ``sgd_momentum`` kernel on cuda/emu, NumPy on cpu)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from minitorch import backend, ops
from minitorch.tensor import Tensor

__all__ = ["SGD"]


class SGD:
    """Stochastic gradient descent with momentum, as PyTorch's ``torch.optim.SGD`` (no dampening):

        v = momentum * v + grad
        param = param - lr * v

    With ``momentum=0`` this is plain gradient descent. ``step()`` updates every parameter that has a
    gradient, in place; ``zero_grad()`` forgets the gradients before the next backward.
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("SGD got an empty parameter list (did the model create its layers?)")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"SGD: parameter {i} is a {type(p).__name__}, not a minitorch Tensor")
            if not p.requires_grad or not p.is_leaf:
                raise ValueError(f"SGD: parameter {i} (shape {p.shape}) must be a leaf tensor with requires_grad=True")
        for name, value, ok in (("lr", lr, lambda v: v > 0), ("momentum", momentum, lambda v: 0 <= v < 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
                raise ValueError(f"SGD: {name} must be a number {'> 0' if name == 'lr' else 'in [0, 1)'}, got {value!r}")
        self.lr, self.momentum = float(lr), float(momentum)
        # One zeroed buffer per parameter, made now rather than at the first step: a step captured
        # into a graph (minitorch.graph) must not zero its own state on every replay.
        self.velocity: dict[int, Tensor] = {id(p): self._zeros_like(p) for p in self.params}

    @staticmethod
    def _zeros_like(p: Tensor) -> Tensor:
        return Tensor(backend.get_backend(p.device).zeros(p.shape, p.dtype), p.device)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            v = self.velocity.get(id(p))
            if v is None or v.device != p.device:  # the model moved to another device since
                v = self.velocity[id(p)] = self._zeros_like(p)
            ops.sgd_momentum_(p, p.grad, v, self.lr, self.momentum)
