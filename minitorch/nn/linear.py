"""``Linear``: y = x @ W + b."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minitorch import autograd, backend, ops
from minitorch.nn.module import Module, _assign
from minitorch.tensor import DTYPE, DTypeLike, Tensor, _check_device, check_dtype

__all__ = ["Linear"]


class Linear(Module):
    """y = x @ W + b, with W of shape (in_features, out_features) and b of shape (out_features,).

    The weight is stored (in, out), the transpose of PyTorch's (out, in), so the forward is one matmul
    of the (batch, in) input with no transpose. An input (..., in) of more dimensions, such as a
    transformer's (B, T, C), is viewed as (B*T, in) rows: one matmul, no copy. Initial values are uniform
    in ±1/sqrt(in_features), as in PyTorch, drawn on the host from ``seed``.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, device: str | None = None,
                 dtype: DTypeLike = None, seed: int | None = None) -> None:
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"Linear: {name} must be a non-negative integer, got {value!r}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        device = _check_device(device)
        dt = check_dtype(dtype, device)
        rng = np.random.default_rng(seed)
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        w = rng.uniform(-bound, bound, (in_features, out_features)).astype(dt)
        self.weight = Tensor(backend.get_backend(device).asarray(w), device, requires_grad=True)
        self.bias: Tensor | None = None
        if bias:
            b = rng.uniform(-bound, bound, (out_features,)).astype(dt)
            self.bias = Tensor(backend.get_backend(device).asarray(b), device, requires_grad=True)

    def forward(self, x: Tensor, *, keep_rounded: bool = False) -> Tensor:
        """y = x @ W + b. ``keep_rounded``: under autocast, y in the autocast dtype (the float32 sums plus the
        bias, rounded once as they are stored), for a consumer that would round y anyway (FlashAttention's Q | K
        | V); its gradient then comes back in that dtype. Elsewhere y is float32 (or the input's dtype)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"Linear expects a minitorch Tensor, got {type(x).__name__}")
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear({self.in_features}, {self.out_features}) expects an input of shape "
                             f"(batch, {self.in_features}), got {x.shape} (or (..., {self.in_features}): the "
                             f"leading dimensions are rows)")
        lead = x.shape[:-1]
        if x.ndim > 2:  # (B, T, in): one matmul over the B*T rows of a view, no copy
            x = x.reshape(-1, self.in_features)
        if (self.bias is not None and self.weight.dtype == DTYPE and ops.autocast_dtype() is not None
                and x.dtype in (DTYPE, ops.autocast_dtype())):
            # under autocast: one product that adds the bias as it stores y (autograd.LinearBias)
            y = autograd.LinearBias.apply(x, self.weight, self.bias, keep_rounded)
        else:
            y = x @ self.weight
            if self.bias is not None:
                y = y + self.bias
        return y.reshape(*lead, self.out_features) if len(lead) > 1 else y

    def set_weights(self, weight: Any, bias: Any = None) -> None:
        """Set the weight (in_features, out_features) and the bias (out_features,) from host values."""
        w = np.asarray(weight, dtype=np.float64)
        expected = (self.in_features, self.out_features)
        if w.shape != expected:
            note = ""
            if w.shape == expected[::-1]:
                note = (" (that is (out_features, in_features), PyTorch's layout: minitorch stores the weight "
                        "as (in_features, out_features) so that the forward is x @ W; pass its transpose)")
            raise ValueError(f"Linear.set_weights: weight must have shape {expected} (in_features, "
                             f"out_features), got {w.shape}{note}")
        _assign(self.weight, w)
        if bias is not None:
            if self.bias is None:
                raise ValueError("Linear.set_weights: this layer was made with bias=False")
            b = np.asarray(bias, dtype=np.float64)
            if b.shape != (self.out_features,):
                raise ValueError(f"Linear.set_weights: bias must have shape ({self.out_features},), got {b.shape}")
            _assign(self.bias, b)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
