"""The Function of a change of dtype (``Tensor.to(dtype)``): its gradient converts back; and how a loss's
backward takes an upstream gradient that only the device knows (a GradScaler's scale)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from minitorch import kernels, ops
from minitorch.autograd.function import Context, Function, host_scalar, host_value
from minitorch.tensor import Tensor


class Cast(Function):
    """y = x in another dtype (rounded to nearest even when narrower); dx = dy in x's dtype."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, dtype: Any) -> Tensor:
        ctx.source = x.dtype
        return ops.convert(x, dtype)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.convert(grad, ctx.source)


def times_upstream(gradient_for: Callable[[float], Tensor], grad: Tensor) -> Tensor:
    """``gradient_for(s)`` for a loss whose kernel takes the upstream gradient ``s`` as a float.

    Known on the host (``loss.backward()``'s seed, a ScalarMul of it): passed as is. Else, on cuda/emu
    once Phase 7's ``clip.py`` exists, ``gradient_for(1.0)`` scaled on the device by ``grad`` (its
    ``scale_by``): no read back, so a step whose loss is multiplied by a device value (a GradScaler's
    scale) can be captured in a graph. Else one 4-byte read."""
    if host_value(grad) is None and grad.device != "cpu" and grad.size == 1 and _has_scale_by():
        return ops.scale_by_(gradient_for(1.0), ops.reshape(grad, (1,)))
    return gradient_for(host_scalar(grad))


def _has_scale_by() -> bool:
    """Whether Phase 7's ``clip.py`` is written and may be used: the phase being graded (``MINITORCH_PHASE``,
    when set) is Phase 7 or later, so an earlier phase is graded on its own kernels only."""
    where = kernels.KERNEL_FILES["clip.py"]
    graded = os.environ.get("MINITORCH_PHASE")
    if graded and kernels.phase_index(graded) < kernels.phase_index(where.phase):
        return False
    return os.path.exists(kernels.source_path("clip.py"))
