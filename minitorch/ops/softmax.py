"""Softmax, log-softmax and cross-entropy over the rows of a matrix (Phase 6's ``softmax.cu``).

Class targets are integers, which a float ``Tensor`` does not hold: :func:`class_indices` makes an
int32 tensor of them on a device (int64 on cpu), and every op here also takes a NumPy integer array,
checked and copied to the device on each call (a captured graph needs the tensor: refill it with
``copy_from`` between replays).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, matrix, real, same_shape
from minitorch.tensor import Tensor, _check_device

TARGET_DTYPE = np.dtype(np.int32)  # what the kernels read (``const int* targets``)


def _stable_softmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shifted x - max, exp of it, row sums) in x's dtype: the cpu reference."""
    shifted = x - x.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return shifted, e, e.sum(axis=1, keepdims=True)


def softmax(x: Tensor) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) of each row of a (rows, cols) tensor."""
    device, dtype = check_tensors("softmax", x=x)
    matrix("softmax", "x", x)
    if device == "cpu":
        if not x.size:
            return cpu_result(x.data.copy(), dtype)
        _, e, s = _stable_softmax(x.data)
        return cpu_result(e / s, dtype)
    out = empty(device, x.shape)
    if x.size:
        launch(device, "softmax.py", "softmax", x.data, out)
    return Tensor(out, device)


def log_softmax(x: Tensor) -> Tensor:
    """x - max - log(sum(exp(x - max))) of each row of a (rows, cols) tensor."""
    device, dtype = check_tensors("log_softmax", x=x)
    matrix("log_softmax", "x", x)
    if device == "cpu":
        if not x.size:
            return cpu_result(x.data.copy(), dtype)
        shifted, _, s = _stable_softmax(x.data)
        return cpu_result(shifted - np.log(s), dtype)
    out = empty(device, x.shape)
    if x.size:
        launch(device, "softmax.py", "log_softmax", x.data, out)
    return Tensor(out, device)


def softmax_backward(y: Tensor, grad_out: Tensor) -> Tensor:
    """The gradient of softmax's input: y * (grad_out - sum(grad_out * y)) per row; y = softmax(x)."""
    device, dtype = check_tensors("softmax_backward", y=y, grad_out=grad_out)
    matrix("softmax_backward", "y", y)
    same_shape("softmax_backward", "y", y, "grad_out", grad_out)
    if device == "cpu":
        dot = (grad_out.data * y.data).sum(axis=1, keepdims=True)
        return cpu_result(y.data * (grad_out.data - dot), dtype)
    out = empty(device, y.shape)
    if y.size:
        launch(device, "softmax.py", "softmax_backward", y.data, grad_out.data, out)
    return Tensor(out, device)


def log_softmax_backward(y: Tensor, grad_out: Tensor) -> Tensor:
    """The gradient of log_softmax's input: grad_out - exp(y) * sum(grad_out) per row; y = log_softmax(x)."""
    device, dtype = check_tensors("log_softmax_backward", y=y, grad_out=grad_out)
    matrix("log_softmax_backward", "y", y)
    same_shape("log_softmax_backward", "y", y, "grad_out", grad_out)
    if device == "cpu":
        return cpu_result(grad_out.data - np.exp(y.data) * grad_out.data.sum(axis=1, keepdims=True), dtype)
    out = empty(device, y.shape)
    if y.size:
        launch(device, "softmax.py", "log_softmax_backward", y.data, grad_out.data, out)
    return Tensor(out, device)


# ---------------------------------------------------------------- class targets


def _host_labels(op: str, labels: Any, classes: int | None) -> np.ndarray:
    array = np.asarray(labels)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{op}: targets must be a 1-D array of integer class indices, got "
                        f"{array.dtype} of shape {array.shape}")
    if array.size and (array.min() < 0 or (classes is not None and array.max() >= classes)):
        bad = int(array.min() if array.min() < 0 else array.max())
        what = f"0 .. {classes - 1}" if classes is not None else "non-negative"
        raise ValueError(f"{op}: target {bad} is not a class index (expected {what})")
    if array.size and array.max() > np.iinfo(TARGET_DTYPE).max:
        raise ValueError(f"{op}: target {int(array.max())} does not fit an int32")
    return array


def class_indices(labels: Any, device: str | None = None) -> Tensor:
    """An integer tensor of class indices for :func:`cross_entropy`: int32 on cuda/emu (what the kernels
    read), int64 on cpu. ``labels``: a 1-D NumPy (or list) of non-negative integers. Between replays of a
    captured graph, refill it with ``t.copy_from(new_labels.astype(t.dtype))``."""
    device = _check_device(device)
    array = _host_labels("class_indices", labels, None)
    if device == "cpu":
        return Tensor(np.ascontiguousarray(array, dtype=np.int64), "cpu")
    return Tensor(backend.get_backend(device).asarray(np.ascontiguousarray(array, dtype=TARGET_DTYPE)), device)


def targets_for(op: str, targets: Any, logits: Tensor) -> Tensor:
    """``targets`` checked against (rows, classes) logits, as an integer tensor on the logits' device."""
    rows, classes = logits.shape
    if isinstance(targets, Tensor):
        want = "int64 (or another integer type)" if logits.device == "cpu" else "int32"
        ok_dtype = (np.issubdtype(targets.dtype, np.integer) if logits.device == "cpu"
                    else targets.dtype == TARGET_DTYPE)
        if targets.device != logits.device:
            raise ValueError(f"{op}: targets are on {targets.device!r}, the logits on {logits.device!r}; "
                             f"make them with class_indices(labels, {logits.device!r})")
        if not ok_dtype:
            raise TypeError(f"{op}: targets must be an {want} tensor of class indices (class_indices(labels)), "
                            f"got {targets.dtype}")
        if targets.shape != (rows,):
            raise ValueError(f"{op}: targets must have shape ({rows},), one class per row of the logits "
                             f"{logits.shape}; got {targets.shape}")
        if logits.device == "cpu":  # the reference checks every value; a device kernel writes NaN instead
            _host_labels(op, targets.data, classes)
        return targets
    array = _host_labels(op, targets, classes)
    if array.shape != (rows,):
        raise ValueError(f"{op}: targets must have shape ({rows},), one class per row of the logits "
                         f"{logits.shape}; got {array.shape}")
    return class_indices(array, logits.device)


def cross_entropy(logits: Tensor, targets: Any) -> Tensor:
    """The mean over the rows of -log softmax(logits)[r, targets[r]], a 0-d tensor. ``targets``: see
    :func:`targets_for` (a device target outside 0 .. classes - 1 makes the loss NaN)."""
    device, dtype = check_tensors("cross_entropy", logits=logits)
    rows, classes = matrix("cross_entropy", "logits", logits)
    if rows == 0 or classes == 0:
        raise ValueError(f"cross_entropy: needs at least one row and one class, got logits of shape {logits.shape}")
    t = targets_for("cross_entropy", targets, logits)
    if device == "cpu":
        shifted, _, s = _stable_softmax(logits.data)
        picked = shifted[np.arange(rows), t.data]
        return cpu_result(np.mean(np.log(s[:, 0]) - picked), dtype)
    loss = empty(device, (1,))
    launch(device, "softmax.py", "cross_entropy", logits.data, t.data, loss)
    return Tensor(loss.reshape(()), device)


def cross_entropy_backward(logits: Tensor, targets: Any, grad_loss: float = 1.0) -> Tensor:
    """d(grad_loss * cross_entropy(logits, targets)) / d(logits) = grad_loss * (softmax - onehot) / rows."""
    device, dtype = check_tensors("cross_entropy_backward", logits=logits)
    rows, classes = matrix("cross_entropy_backward", "logits", logits)
    grad_loss = real("cross_entropy_backward", "grad_loss", grad_loss)
    t = targets_for("cross_entropy_backward", targets, logits)
    if device == "cpu":
        _, e, s = _stable_softmax(logits.data)
        grad = e / s
        grad[np.arange(rows), t.data] -= 1
        return cpu_result(grad * dtype.type(grad_loss / max(rows, 1)), dtype)
    out = empty(device, logits.shape)
    if logits.size:
        launch(device, "softmax.py", "cross_entropy_backward", logits.data, t.data, out, grad_loss)
    return Tensor(out, device)
