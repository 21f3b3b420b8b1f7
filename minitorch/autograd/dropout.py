"""The Function of dropout: the backward applies the forward's mask, regenerated (minitorch.ops.dropout)."""

from __future__ import annotations

from typing import Any

from minitorch.autograd.function import Context, Function
from minitorch.tensor import Tensor


def _ops() -> Any:
    from minitorch.ops import dropout  # here, not above: minitorch.ops imports the tensor, which imports autograd

    return dropout


class Dropout(Function):
    """x * keep / (1 - p): the gradient is grad * keep / (1 - p), with the same keep."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, p: float, seed: int, site: int, step: Any) -> Tensor:
        # The step this forward used, recorded on the device by the kernel itself: a second forward of the
        # same layer before this backward (or a replay) cannot change the mask the backward regenerates.
        ops = _ops()
        ctx.used, ctx.scratch = ops.step_slot(x.device), ops.step_slot(x.device)
        ctx.p, ctx.seed, ctx.site = p, seed, site
        return ops.dropout(x, p, seed, site, step, ctx.used)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return _ops().dropout(grad, ctx.p, ctx.seed, ctx.site, ctx.used, ctx.scratch)


class DropoutAdd(Function):
    """x + h * keep / (1 - p) (a residual branch after its dropout, in one kernel): dx = grad; dh = grad * keep /
    (1 - p), the forward's keep regenerated as Dropout's backward does."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, h: Tensor, p: float, seed: int, site: int, step: Any) -> Tensor:
        ops = _ops()
        ctx.used, ctx.scratch = ops.step_slot(x.device), ops.step_slot(x.device)
        ctx.p, ctx.seed, ctx.site = p, seed, site
        return ops.dropout_add(x, h, p, seed, site, step, ctx.used)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, _ops().dropout(grad, ctx.p, ctx.seed, ctx.site, ctx.used, ctx.scratch)
