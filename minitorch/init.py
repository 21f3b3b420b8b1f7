"""Weight initialisation (Phase 5): Xavier/Glorot and He/Kaiming, uniform and normal, drawn from the
counter-based Philox-4x32-10 stream of :mod:`minitorch.philox`, so one seed gives one set of numbers
on every device.

The numbers are drawn on the host by the NumPy reference and copied to the tensor's device. (The
learner's ``init.cu`` kernel, to come, must reproduce this stream bit for bit on cuda/emu.)
"""

from __future__ import annotations

import math

import numpy as np

from minitorch import backend, philox
from minitorch.tensor import Tensor

__all__ = ["calculate_gain", "fans", "kaiming_normal_", "kaiming_uniform_", "xavier_normal_",
           "xavier_uniform_"]

_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0, "relu": math.sqrt(2.0)}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain of PyTorch's ``nn.init.calculate_gain`` for these nonlinearities."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}, expected one of "
                         f"{sorted(_GAINS) + ['leaky_relu']}")
    return _GAINS[nonlinearity]


def fans(t: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out). minitorch stores a Linear weight as (in, out), so fan_in is shape[0]."""
    if t.ndim < 2:
        raise ValueError(f"init: fan in/out need a tensor of at least 2 dimensions, got shape {t.shape}")
    receptive = int(np.prod(t.shape[2:])) if t.ndim > 2 else 1
    return t.shape[0] * receptive, t.shape[1] * receptive


def _fill(t: Tensor, values: np.ndarray) -> Tensor:
    t._data = backend.get_backend(t.device).asarray(values.reshape(t.shape).astype(t.dtype))
    return t


def _draw(t: Tensor, kind: str, scale: float, seed: int) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"init: expected a minitorch Tensor, got {type(t).__name__}")
    if kind == "uniform":  # U(-scale, scale)
        u = philox.uniform(t.size, seed).astype(np.float64)
        return _fill(t, (2.0 * u - 1.0) * scale)
    return _fill(t, philox.normal(t.size, seed).astype(np.float64) * scale)


def xavier_uniform_(t: Tensor, gain: float = 1.0, *, seed: int = 0) -> Tensor:
    fan_in, fan_out = fans(t)
    return _draw(t, "uniform", gain * math.sqrt(6.0 / (fan_in + fan_out)), seed)


def xavier_normal_(t: Tensor, gain: float = 1.0, *, seed: int = 0) -> Tensor:
    fan_in, fan_out = fans(t)
    return _draw(t, "normal", gain * math.sqrt(2.0 / (fan_in + fan_out)), seed)


def _kaiming_std(t: Tensor, mode: str, nonlinearity: str, a: float) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fans(t)[0 if mode == "fan_in" else 1]
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     *, seed: int = 0) -> Tensor:
    return _draw(t, "uniform", math.sqrt(3.0) * _kaiming_std(t, mode, nonlinearity, a), seed)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    *, seed: int = 0) -> Tensor:
    return _draw(t, "normal", _kaiming_std(t, mode, nonlinearity, a), seed)
