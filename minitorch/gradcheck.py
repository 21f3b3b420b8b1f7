"""Gradient checking: autograd's gradients against central finite differences, in float64 on the cpu.

For a function ``out = fn(*inputs)`` and a fixed random ``weights`` of out's shape, the scalar
``L = sum(out * weights)`` has the gradient ``weights`` with respect to ``out``, so
``out.backward(weights)`` must give ``dL/dx`` for every input x. Central differences estimate the same:

    dL/dx[i] ~ (L(x + eps e_i) - L(x - eps e_i)) / (2 eps)

with an error of order eps^2 (truncation) plus rounding / eps. In float64 with eps = 1e-6 both are far
below 1e-4, so a relative error above that is a wrong backward, not noise. (In float32 the rounding
term alone is ~1e-7 / 1e-3: finite differences cannot check float32 code to this precision.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from minitorch.autograd import no_grad
from minitorch.tensor import FLOAT64, Tensor

__all__ = ["gradcheck", "numerical_gradients", "relative_error"]


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max |expected| (0 when both are all zeros; inf on a shape mismatch)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    diff = float(np.max(np.abs(got - expected)))
    scale = float(np.max(np.abs(expected)))
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def numerical_gradients(fn: Callable[..., Tensor], inputs: Sequence[Tensor], weights: np.ndarray,
                        eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of sum(fn(*inputs) * weights) with respect to each input (float64 cpu tensors)."""
    for i, x in enumerate(inputs):
        if x.device != "cpu" or x.dtype != FLOAT64:
            raise TypeError(f"numerical_gradients: input {i} must be a float64 cpu tensor, got {x.dtype} on {x.device!r}")
    grads = []
    with no_grad():
        for x in inputs:
            flat = x.data.reshape(-1)  # a view: perturbing it perturbs x
            g = np.zeros(x.size)
            for i in range(x.size):
                old = flat[i]
                flat[i] = old + eps
                plus = float(np.sum(fn(*inputs).numpy() * weights))
                flat[i] = old - eps
                minus = float(np.sum(fn(*inputs).numpy() * weights))
                flat[i] = old
                g[i] = (plus - minus) / (2 * eps)
            grads.append(g.reshape(x.shape))
    return grads


def gradcheck(fn: Callable[..., Tensor], inputs: Sequence[Tensor], *, eps: float = 1e-6,
              seed: int = 0) -> list[float]:
    """The relative error of autograd's gradient of each input against finite differences.

    ``inputs`` are float64 cpu leaf tensors with ``requires_grad=True``; their ``.grad`` is overwritten.
    """
    out = fn(*inputs)
    weights = np.random.default_rng(seed).standard_normal(out.shape)
    for x in inputs:
        x.grad = None
    out.backward(Tensor(np.asarray(weights, dtype=FLOAT64), "cpu"))
    numeric = numerical_gradients(fn, inputs, weights, eps)
    errors = []
    for x, n in zip(inputs, numeric, strict=True):
        analytic = x.grad.numpy() if x.grad is not None else np.zeros(x.shape)
        errors.append(relative_error(analytic, n))
    return errors
