"""Weight initialisation (Phase 5): Xavier/Glorot and He/Kaiming, uniform and normal, drawn from the
counter-based Philox-4x32-10 stream of :mod:`minitorch.philox`, so one seed gives one set of numbers
on every device.

A weight is filled in place: uniform ``(2u - 1) * s`` or normal ``z * s``, with ``u``, ``z`` the
Philox uniforms and Box-Muller normals of ``seed`` and the scale ``s`` rounded to float32, one float32
product each. On cuda and emu the learner's ``init.cu`` draws them on the device (through ``init.py``)
from Phase 5 on, once written; otherwise, and on cpu, :mod:`minitorch.philox` draws them on the host.
The uniforms are then the same bits on every device, the normals the same to within one float32 ulp.
"""

from __future__ import annotations

import math
import os

import numpy as np

from minitorch import kernels, philox
from minitorch.ops.dispatch import launch
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


INIT_FILE = "init.py"


def uses_init_kernels() -> bool:
    """Whether cuda/emu draw with the learner's Phase 5 generator: ``init.py`` is written, and the graded
    phase (``MINITORCH_PHASE``, when set) is Phase 5 or later."""
    graded = os.environ.get("MINITORCH_PHASE")
    if graded and kernels.phase_index(graded) < kernels.phase_index(kernels.KERNEL_FILES[INIT_FILE].phase):
        return False
    return os.path.exists(kernels.source_path(INIT_FILE))


def _draw(t: Tensor, kind: str, scale: float, seed: int) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"init: expected a minitorch Tensor, got {type(t).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"init: seed must be an integer in [0, 2**64), got {seed!r}")
    s = np.float32(scale)
    if t.device != "cpu" and uses_init_kernels():
        if t.dtype != np.float32:
            raise TypeError(f"init: the device generator fills float32 tensors, got {t.dtype}")
        launch(t.device, INIT_FILE, f"philox_{kind}", t.data, float(s), int(seed))
        return t
    unit = 2 * philox.uniform(t.size, seed) - 1 if kind == "uniform" else philox.normal(t.size, seed)
    values = (unit * s).reshape(t.shape)  # one float32 product, as the kernels compute it
    if t.device == "cpu":
        np.copyto(t.data, values.astype(t.dtype))
    else:
        t.data.set(values)
    return t


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
