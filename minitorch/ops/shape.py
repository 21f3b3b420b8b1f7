"""Shape helpers: views, and a scalar broadcast (no kernels of their own)."""

from __future__ import annotations

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result
from minitorch.ops.elementwise import add_bias
from minitorch.tensor import DTYPE, Tensor


def reshape(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A view of x with another shape and the same number of elements (ids too: no arithmetic)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"reshape: `x` must be a minitorch Tensor, got {type(x).__name__}")
    dims = tuple(int(d) for d in shape)
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if dims.count(-1) == 1 and known and x.size % known == 0:
        dims = tuple(x.size // known if d == -1 else d for d in dims)
    if any(d < 0 for d in dims) or int(np.prod(dims, dtype=np.int64)) != x.size:
        raise ValueError(f"reshape: cannot view {x.size} elements (shape {x.shape}) as shape {tuple(shape)}")
    return Tensor(x.data.reshape(dims), x.device)


def expand(scalar: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A new tensor of ``shape`` with every element equal to the single element of ``scalar``.

    On cuda/emu this is ``add_bias`` of a zero (n, 1) matrix and the one value: the value never
    leaves the device.
    """
    device, dtype = check_tensors("expand", scalar=scalar)
    if scalar.size != 1:
        raise ValueError(f"expand: expected a single-element tensor, got shape {scalar.shape}")
    if device == "cpu":
        return cpu_result(np.full(shape, scalar.data.reshape(-1)[0], dtype=dtype), dtype)
    n = int(np.prod(shape, dtype=np.int64))
    zeros = Tensor(backend.get_backend(device).zeros((n, 1), DTYPE), device)
    return reshape(add_bias(zeros, reshape(scalar, (1,))), shape)
