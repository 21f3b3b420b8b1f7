"""Embedding lookup (a gather of rows) and its backward (a scatter-add): Phase 7's ``embedding.cu``."""

from __future__ import annotations

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix
from minitorch.tensor import INDEX, Tensor


def _check_ids(op: str, idx: Tensor, device: str) -> None:
    if not isinstance(idx, Tensor):
        raise TypeError(f"{op}: `idx` must be a minitorch Tensor of int32 ids, got {type(idx).__name__}")
    if idx.dtype != INDEX:
        raise TypeError(f"{op}: `idx` must hold int32 ids (minitorch.tensor(ids, dtype='int32')), got {idx.dtype}")
    if idx.device != device:
        raise ValueError(f"{op}: `idx` is on {idx.device!r}, the table on {device!r}; move one with .to({device!r})")


def embedding(idx: Tensor, weight: Tensor) -> Tensor:
    """weight[idx]: idx int32 of any shape, weight (vocab, dim) -> idx.shape + (dim,). An id outside
    [0, vocab) gives a row of NaN (the device cannot raise without a synchronisation)."""
    device, dtype = check_tensors("embedding", weight=weight)
    vocab, dim = matrix("embedding", "weight", weight)
    _check_ids("embedding", idx, device)
    if device == "cpu":
        ids = idx.data
        ok = (ids >= 0) & (ids < vocab)
        out = np.where(ok[..., None], weight.data[np.where(ok, ids, 0)], dtype.type(np.nan))
        return cpu_result(out, dtype)
    out = empty(device, idx.shape + (dim,))
    if out.size:
        launch(device, "embedding.py", "embedding_forward", idx.data, weight.data, out, outputs=(2,))
    return Tensor(out, device)


def embedding_backward(idx: Tensor, grad_out: Tensor, vocab: int) -> Tensor:
    """The gradient of the table (vocab, dim): row v is the sum of grad_out's rows whose id is v."""
    device, dtype = check_tensors("embedding_backward", grad_out=grad_out)
    _check_ids("embedding_backward", idx, device)
    if grad_out.shape[:-1] != idx.shape or grad_out.ndim != idx.ndim + 1:
        raise ValueError(f"embedding_backward: `grad_out` must have shape {idx.shape} + (dim,), got {grad_out.shape}")
    dim = grad_out.shape[-1]
    if device == "cpu":
        grad = np.zeros((vocab, dim), dtype)
        ids = idx.data.reshape(-1)
        ok = (ids >= 0) & (ids < vocab)
        np.add.at(grad, ids[ok], grad_out.data.reshape(-1, dim)[ok])
        return cpu_result(grad, dtype)
    grad = backend.get_backend(device).empty((vocab, dim), dtype)
    launch(device, "embedding.py", "embedding_backward", idx.data, grad_out.data, grad, outputs=(2,))
    return Tensor(grad, device)
