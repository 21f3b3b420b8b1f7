"""Gradient clipping by the global norm (Phase 7's ``clip.cu``): computed on the device, so that a
training step captured into a graph (minitorch.graph) clips every replay by that replay's norm."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, launch, real
from minitorch.tensor import DTYPE, Tensor

EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6)


def clip_by_global_norm_(grads: Sequence[Tensor], max_norm: float) -> Tensor:
    """Scale every tensor of ``grads`` in place by min(1, max_norm / (norm + 1e-6)), norm the 2-norm of all
    of them together; returns the norm (before clipping) as a 0-d tensor on their device."""
    if not grads:
        raise ValueError("clip_by_global_norm_: no gradients to clip")
    device, dtype = check_tensors("clip_by_global_norm_", **{f"grads[{i}]": g for i, g in enumerate(grads)})
    max_norm = real("clip_by_global_norm_", "max_norm", max_norm)
    if not (max_norm > 0 and math.isfinite(max_norm)):
        raise ValueError(f"clip_by_global_norm_: max_norm must be a positive number, got {max_norm}")
    if device == "cpu":
        norm = np.sqrt(sum(float(np.sum(g.data.astype(np.float64) ** 2)) for g in grads))
        coef = min(1.0, max_norm / (norm + EPS))
        for g in grads:
            g.data[...] *= dtype.type(coef)
        return cpu_result(norm, dtype)
    target = backend.get_backend(device)
    total, norm, coef = target.zeros((1,), DTYPE), target.empty((1,), DTYPE), target.empty((1,), DTYPE)
    for g in grads:
        launch(device, "clip.py", "sum_squares", g.data, total, outputs=())
    launch(device, "clip.py", "clip_coefficient", total, norm, coef, max_norm, outputs=(1, 2))
    for g in grads:
        launch(device, "clip.py", "scale_by", g.data, coef, outputs=())
    return Tensor(norm.reshape(()), device)
