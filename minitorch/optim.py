"""Optimizers: ``SGD`` with momentum (the learner's ``sgd_momentum`` kernel on cuda/emu, NumPy on cpu),
``Adam`` and ``AdamW`` (the learner's fused ``adam_update`` kernel of Phase 5 on cuda/emu, NumPy on cpu)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import numpy as np

from minitorch import backend, ops
from minitorch.ops.dispatch import launch
from minitorch.tensor import Tensor

__all__ = ["SGD", "Adam", "AdamW"]


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


def _check_params(name: str, params: Iterable[Tensor]) -> list[Tensor]:
    params = list(params)
    if not params:
        raise ValueError(f"{name} got an empty parameter list (did the model create its layers?)")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{name}: parameter {i} is a {type(p).__name__}, not a minitorch Tensor")
        if not p.requires_grad or not p.is_leaf:
            raise ValueError(f"{name}: parameter {i} (shape {p.shape}) must be a leaf tensor with requires_grad=True")
    return params


def _check_real(opt: str, name: str, value: float, ok: Callable[[float], bool], what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{opt}: {name} must be a number {what}, got {value!r}")
    return float(value)


class Adam:
    """Adam (Kingma & Ba), as ``torch.optim.Adam``; ``weight_decay`` is an L2 term added to the gradient:

        g = grad + weight_decay * param
        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
        param -= lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps)

    On cuda/emu every parameter's update is one launch of the learner's fused ``adam_update`` kernel;
    on cpu the same formula runs in NumPy. ``state_dict()`` holds the step count and m, v.
    """

    decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        name = type(self).__name__
        self.params = _check_params(name, params)
        self.lr = _check_real(name, "lr", lr, lambda x: x > 0, "> 0")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        self.betas = tuple(_check_real(name, f"beta{i + 1}", b, lambda x: 0 <= x < 1, "in [0, 1)")
                           for i, b in enumerate(betas))
        self.eps = _check_real(name, "eps", eps, lambda x: x > 0, "> 0")
        self.weight_decay = _check_real(name, "weight_decay", weight_decay, lambda x: x >= 0, ">= 0")
        self.step_count = 0
        self.m: dict[int, Tensor] = {id(p): SGD._zeros_like(p) for p in self.params}
        self.v: dict[int, Tensor] = {id(p): SGD._zeros_like(p) for p in self.params}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.step_count += 1
        t = self.step_count
        beta1, beta2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            m, v = self.m[id(p)], self.v[id(p)]
            if m.device != p.device:  # the model moved since: the state follows it
                m = self.m[id(p)] = Tensor(backend.get_backend(p.device).asarray(m.numpy()), p.device)
                v = self.v[id(p)] = Tensor(backend.get_backend(p.device).asarray(v.numpy()), p.device)
            if p.device == "cpu":
                _adam_numpy(p.data, p.grad.data, m.data, v.data, self.lr, beta1, beta2, self.eps,
                            self.weight_decay, t, self.decoupled)
            elif p.size:
                launch(p.device, "adam.py", "adam_update", p.data, p.grad.data, m.data, v.data, self.lr,
                       beta1, beta2, self.eps, self.weight_decay, t, self.decoupled)

    def state_dict(self) -> dict[str, object]:
        """{"step": t, "m": [host arrays in parameter order], "v": [...], and the hyperparameters}."""
        return {"step": self.step_count, "lr": self.lr, "betas": self.betas, "eps": self.eps,
                "weight_decay": self.weight_decay,
                "m": [self.m[id(p)].numpy() for p in self.params],
                "v": [self.v[id(p)].numpy() for p in self.params]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        name = type(self).__name__
        for key in ("m", "v"):
            arrays = state[key]
            if len(arrays) != len(self.params):  # type: ignore[arg-type]
                raise ValueError(f"{name}.load_state_dict: {key} has {len(arrays)} arrays, "  # type: ignore[arg-type]
                                 f"this optimizer has {len(self.params)} parameters")
            for p, a in zip(self.params, arrays, strict=True):  # type: ignore[call-overload]
                a = np.asarray(a)
                if a.shape != p.shape:
                    raise ValueError(f"{name}.load_state_dict: {key} for a parameter of shape {p.shape} "
                                     f"has shape {a.shape}")
                store = self.m if key == "m" else self.v
                store[id(p)] = Tensor(backend.get_backend(p.device).asarray(a.astype(p.dtype)), p.device)
        self.step_count = int(state["step"])  # type: ignore[call-overload]
        self.lr, self.betas = float(state["lr"]), tuple(state["betas"])  # type: ignore[arg-type]
        self.eps, self.weight_decay = float(state["eps"]), float(state["weight_decay"])  # type: ignore[arg-type]


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``: the decay
    shrinks the parameter, ``param -= lr * weight_decay * param``, instead of entering the gradient."""

    decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


def _adam_numpy(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, beta1: float,
                beta2: float, eps: float, weight_decay: float, t: int, decoupled: bool) -> None:
    """The cpu device's Adam step, in place, in the arrays' own dtype."""
    if decoupled:
        p -= p.dtype.type(lr * weight_decay) * p
    elif weight_decay:
        g = g + p.dtype.type(weight_decay) * p
    m *= m.dtype.type(beta1)
    m += m.dtype.type(1 - beta1) * g
    v *= v.dtype.type(beta2)
    v += v.dtype.type(1 - beta2) * g * g
    p -= p.dtype.type(lr) * (m / p.dtype.type(1 - beta1**t)) / (np.sqrt(v / p.dtype.type(1 - beta2**t))
                                                              + p.dtype.type(eps))
