"""Convolutional layers: ``Conv2d``, ``MaxPool2d`` and ``Flatten`` (NCHW, as PyTorch)."""

from __future__ import annotations

import math

import numpy as np

from minitorch import backend, functional, init, philox
from minitorch.nn.module import Module, _assign
from minitorch.tensor import DTypeLike, Tensor, _check_device, check_dtype

__all__ = ["Conv2d", "Flatten", "MaxPool2d"]


def _positive(layer: str, name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{layer}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


class Conv2d(Module):
    """y = conv2d(x, weight) + bias, x (N, in_channels, H, W) -> y (N, out_channels, P, Q).

    ``weight`` is (out_channels, in_channels, kernel_size, kernel_size), as in PyTorch, so a PyTorch
    state dict's tensors load as they are. Initial values as PyTorch's defaults, drawn from ``seed`` by
    :mod:`minitorch.init`: the weight Kaiming-uniform with a = sqrt(5), that is U(±1/sqrt(fan_in)) with
    fan_in = in_channels * kernel_size², and the bias U(±1/sqrt(fan_in)).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 *, bias: bool = True, device: str | None = None, dtype: DTypeLike = None,
                 seed: int | None = None) -> None:
        self.in_channels = _positive("Conv2d", "in_channels", in_channels)
        self.out_channels = _positive("Conv2d", "out_channels", out_channels)
        self.kernel_size = _positive("Conv2d", "kernel_size", kernel_size)
        self.stride = _positive("Conv2d", "stride", stride)
        self.padding = _positive("Conv2d", "padding", padding, 0)
        device = _check_device(device)
        dt = check_dtype(dtype, device)
        seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
        fan_in = self.in_channels * self.kernel_size ** 2
        # minitorch.init reads a 2-D tensor as (fan_in, fan_out) (Linear's layout): draw the weight in that
        # shape, then lay it out as PyTorch's (out, in, kh, kw).
        draw = Tensor(np.empty((fan_in, self.out_channels), np.float64), "cpu")
        init.kaiming_uniform_(draw, a=math.sqrt(5), seed=seed)
        w = draw.numpy().T.reshape(self.out_channels, self.in_channels, self.kernel_size, self.kernel_size)
        self.weight = Tensor(backend.get_backend(device).asarray(np.ascontiguousarray(w, dtype=dt)), device,
                             requires_grad=True)
        self.bias: Tensor | None = None
        if bias:
            bound = 1.0 / math.sqrt(fan_in)
            u = philox.uniform(self.out_channels, seed + 1).astype(np.float64)  # the next stream after the weight's
            b = ((2.0 * u - 1.0) * bound).astype(dt)
            self.bias = Tensor(backend.get_backend(device).asarray(b), device, requires_grad=True)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Conv2d expects a minitorch Tensor, got {type(x).__name__}")
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv2d({self.in_channels}, {self.out_channels}) expects an input of shape "
                             f"(N, {self.in_channels}, H, W), got {x.shape}")
        return functional.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def set_weights(self, weight: object, bias: object = None) -> None:
        """Set the weight (out, in, kh, kw) and the bias (out,) from host values (e.g. PyTorch's)."""
        w = np.asarray(weight, dtype=np.float64)
        if w.shape != self.weight.shape:
            raise ValueError(f"Conv2d.set_weights: weight must have shape {self.weight.shape} (out_channels, "
                             f"in_channels, kh, kw), got {w.shape}")
        _assign(self.weight, w)
        if bias is not None:
            if self.bias is None:
                raise ValueError("Conv2d.set_weights: this layer was made with bias=False")
            b = np.asarray(bias, dtype=np.float64)
            if b.shape != (self.out_channels,):
                raise ValueError(f"Conv2d.set_weights: bias must have shape ({self.out_channels},), got {b.shape}")
            _assign(self.bias, b)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, bias={self.bias is not None}")


class MaxPool2d(Module):
    """The maximum of each kernel_size x kernel_size window (stride: kernel_size unless given)."""

    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0) -> None:
        self.kernel_size = _positive("MaxPool2d", "kernel_size", kernel_size)
        self.stride = None if stride is None else _positive("MaxPool2d", "stride", stride)
        self.padding = _positive("MaxPool2d", "padding", padding, 0)

    def forward(self, x: Tensor) -> Tensor:
        return functional.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class Flatten(Module):
    """Dimensions start_dim .. end_dim merged into one: (N, C, H, W) -> (N, C*H*W) by default. A view, no copy."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
