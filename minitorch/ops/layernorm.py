"""LayerNorm over the last dimension, forward and backward: Phase 7's ``layernorm.cu``.

Each row of x (rows, cols) is normalised to mean 0 and variance 1 (the population variance, eps inside
the square root), then scaled and shifted per column: out = (x - mean) * rstd * weight + bias. The
forward also returns each row's mean and rstd = 1 / sqrt(var + eps), which the backward needs.
"""

from __future__ import annotations

import numpy as np

from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix, real
from minitorch.tensor import Tensor


def _check_params(op: str, cols: int, **params: Tensor) -> None:
    for name, p in params.items():
        if p.shape != (cols,):
            raise ValueError(f"{op}: `{name}` must have shape ({cols},), one value per column of x; got {p.shape}")


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> tuple[Tensor, Tensor, Tensor]:
    """(out, mean, rstd): out (rows, cols) = LayerNorm of each row of x; mean, rstd (rows,)."""
    device, dtype = check_tensors("layer_norm", x=x, weight=weight, bias=bias)
    rows, cols = matrix("layer_norm", "x", x)
    _check_params("layer_norm", cols, weight=weight, bias=bias)
    eps = real("layer_norm", "eps", eps)
    if not eps > 0:
        raise ValueError(f"layer_norm: eps must be > 0, got {eps}")
    if cols == 0:
        raise ValueError(f"layer_norm: a row of no columns has no mean (x has shape {x.shape})")
    if device == "cpu":
        v = x.data
        mean = v.mean(axis=1, keepdims=True)
        rstd = 1 / np.sqrt(((v - mean) ** 2).mean(axis=1, keepdims=True) + dtype.type(eps))
        out = (v - mean) * rstd * weight.data + bias.data
        return cpu_result(out, dtype), cpu_result(mean[:, 0], dtype), cpu_result(rstd[:, 0], dtype)
    out, mean, rstd = empty(device, (rows, cols)), empty(device, (rows,)), empty(device, (rows,))
    if rows:
        launch(device, "layernorm.py", "layernorm_forward", x.data, weight.data, bias.data, out, mean, rstd, eps,
               outputs=(3, 4, 5))
    return Tensor(out, device), Tensor(mean, device), Tensor(rstd, device)


def layer_norm_backward(grad_out: Tensor, x: Tensor, weight: Tensor, mean: Tensor,
                        rstd: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_x, grad_weight, grad_bias) of LayerNorm, from the forward's x, weight, mean and rstd."""
    device, dtype = check_tensors("layer_norm_backward", grad_out=grad_out, x=x, weight=weight, mean=mean,
                                  rstd=rstd)
    rows, cols = matrix("layer_norm_backward", "x", x)
    if grad_out.shape != x.shape:
        raise ValueError(f"layer_norm_backward: `grad_out` must have the shape of x, {x.shape}; got {grad_out.shape}")
    _check_params("layer_norm_backward", cols, weight=weight)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t.shape != (rows,):
            raise ValueError(f"layer_norm_backward: `{name}` must have shape ({rows},), one value per row; "
                             f"got {t.shape}")
    if device == "cpu":
        g, m, r = grad_out.data, mean.data[:, None], rstd.data[:, None]
        xhat = (x.data - m) * r
        gw = g * weight.data
        dx = r * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
        return cpu_result(dx, dtype), cpu_result((g * xhat).sum(axis=0), dtype), cpu_result(g.sum(axis=0), dtype)
    dx, dw, db = empty(device, (rows, cols)), empty(device, (cols,)), empty(device, (cols,))
    launch(device, "layernorm.py", "layernorm_backward", grad_out.data, x.data, weight.data, mean.data, rstd.data,
           dx, dw, db, outputs=(5, 6, 7))
    return Tensor(dx, device), Tensor(dw, device), Tensor(db, device)
