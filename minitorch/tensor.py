"""Tensor: a float32 array of any shape that lives on one device ('cuda', 'emu' or 'cpu').

Phase 1 gives it memory: creation, host<->device copies, ``fill_`` and ``clone``. ``fill_`` and
``clone`` run the learner's kernels (``memory.cu`` through the launchers in ``memory.py``) on
``cuda`` and ``emu``; on ``cpu`` they use NumPy, the reference. Later phases add operators,
autograd (``minitorch.autograd``), layers (``minitorch.nn``) and optimisers (``minitorch.optim``).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from minitorch import backend, kernels

DTYPE = np.dtype(np.float32)

ShapeLike = int | Sequence[int]


def _check_shape(shape: ShapeLike) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(f"a shape is a tuple of non-negative integers; got {tuple(shape) if not isinstance(shape, (int, np.integer)) else shape!r}")
    return tuple(int(d) for d in dims)


def _check_device(device: str | None) -> str:
    if device is None:
        return backend.get_device()
    if device not in backend.DEVICES:
        raise ValueError(f"unknown device {device!r}: expected one of "
                         f"{', '.join(map(repr, backend.DEVICES))}")
    return device


def _check_host_array(array: np.ndarray) -> np.ndarray:
    if array.dtype != DTYPE:
        raise TypeError(f"minitorch tensors hold float32, got a {array.dtype} array. Convert it yourself "
                        f"if that is what you mean: array.astype(numpy.float32)")
    return array if array.flags.c_contiguous else array.copy(order="C")  # keeps 0-d shapes


class Tensor:
    """A contiguous float32 array on one device. Create one with :func:`tensor`, :func:`zeros`, ..."""

    __slots__ = ("_data", "_device")

    def __init__(self, data: Any, device: str) -> None:
        # Internal: ``data`` is already a device array of ``device``'s backend.
        self._data = data
        self._device = device

    # --- properties ----------------------------------------------------------------------------
    @property
    def data(self) -> Any:
        """The underlying device array (``cupy.ndarray``, ``emu.DeviceArray`` or ``numpy.ndarray``)."""
        return self._data

    @property
    def device(self) -> str:
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        return DTYPE

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=20)
        return f"Tensor({body}, device={self._device!r})"

    # --- copies between devices ----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new host (NumPy) array with this tensor's values: a device-to-host copy."""
        return backend.get_backend(self._device).asnumpy(self._data)

    def to(self, device: str) -> Tensor:
        """This tensor on ``device``; itself if it is already there (as in PyTorch)."""
        device = _check_device(device)
        if device == self._device:
            return self
        return Tensor(backend.get_backend(device).asarray(self.numpy()), device)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    # --- phase 1: the learner's kernels ---------------------------------------------------------
    def fill_(self, value: float) -> Tensor:
        """Set every element to ``value``, in place (the learner's ``fill`` kernel)."""
        if not isinstance(value, numbers.Real):
            raise TypeError(f"fill_ takes a real number, got {type(value).__name__}")
        if self._device == "cpu":
            self._data.fill(np.float32(value))
        elif self.size:
            kernels.load_module("memory.py").fill(self._data, float(value))
        return self

    def clone(self) -> Tensor:
        """A new tensor with the same values on the same device (the learner's ``copy`` kernel)."""
        out = backend.get_backend(self._device).empty(self.shape, DTYPE)
        if self._device == "cpu":
            np.copyto(out, self._data)
        elif self.size:
            kernels.load_module("memory.py").copy(self._data, out)
        return Tensor(out, self._device)


# --- creation ----------------------------------------------------------------------------------

def from_numpy(array: np.ndarray, device: str | None = None) -> Tensor:
    """Copy a float32 NumPy array to ``device`` (default: the active device)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy takes a numpy.ndarray, got {type(array).__name__}")
    device = _check_device(device)
    return Tensor(backend.get_backend(device).asarray(_check_host_array(array)), device)


def tensor(data: Any, device: str | None = None) -> Tensor:
    """A tensor from a float32 NumPy array, a number, or (nested) lists of numbers."""
    if isinstance(data, Tensor):
        return data.to(_check_device(device)) if device else data
    if isinstance(data, np.ndarray):
        return from_numpy(data, device)
    try:
        array = np.array(data, dtype=DTYPE)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot make a float32 tensor from {type(data).__name__}: {exc}") from None
    return from_numpy(array, device)


def empty(shape: ShapeLike, device: str | None = None) -> Tensor:
    """Uninitialised memory: read it before writing it and you get whatever was there."""
    device = _check_device(device)
    return Tensor(backend.get_backend(device).empty(_check_shape(shape), DTYPE), device)


def zeros(shape: ShapeLike, device: str | None = None) -> Tensor:
    device = _check_device(device)
    return Tensor(backend.get_backend(device).zeros(_check_shape(shape), DTYPE), device)


def full(shape: ShapeLike, value: float, device: str | None = None) -> Tensor:
    return empty(shape, device).fill_(value)


def ones(shape: ShapeLike, device: str | None = None) -> Tensor:
    return full(shape, 1.0, device)


def randn(shape: ShapeLike, device: str | None = None, seed: int | None = None) -> Tensor:
    """Standard normal samples, drawn on the host (the same values on every device for one seed)."""
    values = np.random.default_rng(seed).standard_normal(_check_shape(shape), dtype=DTYPE)
    return from_numpy(values, device)
