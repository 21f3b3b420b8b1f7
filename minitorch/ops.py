"""Primitive operations on tensors, without autograd: the layer between Tensors and the learner's kernels.

On ``cpu`` each primitive is NumPy, in the tensors' own dtype (float32, or float64 for gradient checks):
the reference path. On ``cuda`` and ``emu`` it allocates the output and calls the learner's launcher
(``kernels.load_module("<file>.py").<function>(...)``, ARCHITECTURE.md "Phases 2–4"), so every number
comes out of the learner's CUDA C. A launcher that is not written yet raises ``KernelNotWrittenError``
naming the lab cell that writes it.

Inputs are checked here, before any launch: a shape, dtype or device mismatch raises ``ValueError`` or
``TypeError`` naming what was expected and what came. An empty output launches nothing.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from minitorch import backend, kernels
from minitorch.tensor import DTYPE, Tensor

__all__ = [
    "add", "add_bias", "bias_grad", "column_mean_var", "expand", "matmul", "max", "mse_backward", "mse_loss",
    "mul", "on_device", "relu", "relu_backward", "reshape", "scalar_mul", "sgd_momentum_", "sigmoid",
    "sigmoid_backward", "sum", "transpose",
]


# ---------------------------------------------------------------- devices and checks


@contextlib.contextmanager
def on_device(device: str) -> Iterator[None]:
    """Make ``device`` the active one while a launcher runs: ``load_kernel`` compiles for the active
    device, and a tensor's own device may differ from it."""
    previous = backend.get_device()
    if previous == device:
        yield
        return
    backend._active = device
    try:
        yield
    finally:
        backend._active = previous


def _check_tensors(op: str, **named: Any) -> tuple[str, np.dtype]:
    """All arguments are Tensors on one device with one dtype; returns (device, dtype)."""
    device = dtype = None
    first = ""
    for name, t in named.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: `{name}` must be a minitorch Tensor, got {type(t).__name__}")
        if device is None:
            device, dtype, first = t.device, t.dtype, name
        elif t.device != device:
            raise ValueError(f"{op}: expected every tensor on one device, got `{first}` on {device!r} and "
                             f"`{name}` on {t.device!r}; move one with .to({device!r})")
        elif t.dtype != dtype:
            raise TypeError(f"{op}: expected one dtype, got `{first}` {dtype} and `{name}` {t.dtype}")
    assert device is not None and dtype is not None
    return device, dtype


def _same_shape(op: str, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{op}: `{b_name}` must have the shape of `{a_name}`, {a.shape}; got {b.shape}")


def _matrix(op: str, name: str, t: Tensor) -> tuple[int, int]:
    if t.ndim != 2:
        raise ValueError(f"{op}: `{name}` must be a 2-D tensor (rows, cols), got shape {t.shape}")
    return t.shape  # type: ignore[return-value]


def _real(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: `{name}` must be a real number, got {type(value).__name__}")
    return float(value)


def _empty(device: str, shape: tuple[int, ...], dtype: np.dtype = DTYPE) -> Any:
    made = backend._BACKENDS.get(device)  # the device of an existing tensor: its backend exists
    return (made or backend.get_backend(device)).empty(shape, dtype)


def _cpu(value: Any, dtype: np.dtype) -> Tensor:
    """A cpu tensor from a NumPy result (NumPy turns 0-d results into scalars; a tensor needs an array)."""
    return Tensor(np.ascontiguousarray(value, dtype=dtype) if np.ndim(value) else np.asarray(value, dtype=dtype), "cpu")


def _launcher(filename: str, function: str) -> Any:
    module = kernels.load_module(filename)  # one os.stat: a rewritten cell takes effect at once
    fn = getattr(module, function, None)
    if fn is None:
        where = kernels.KERNEL_FILES.get(filename)
        cell = f' (the cell "{where.cell}" in {where.lab})' if where else ""
        raise AttributeError(f"{filename} defines no function `{function}`{cell}; minitorch calls it")
    return fn


def _launch(device: str, filename: str, function: str, *args: Any) -> None:
    if backend._active == device:  # the common case, without a context manager's cost
        _launcher(filename, function)(*args)
        return
    with on_device(device):
        _launcher(filename, function)(*args)


# ---------------------------------------------------------------- Phase 2: elementwise, transpose, matmul


def _binary(op: str, filename: str, names: tuple[str, str], a: Tensor, b: Tensor,
            reference: Callable[[np.ndarray, np.ndarray, np.dtype], np.ndarray]) -> Tensor:
    """An elementwise op of two tensors of one shape: `reference` on cpu, the launcher `op` of `filename`
    (called as op(a, b, out)) elsewhere."""
    device, dtype = _check_tensors(op, **{names[0]: a, names[1]: b})
    _same_shape(op, names[0], a, names[1], b)
    if device == "cpu":
        return _cpu(reference(a.data, b.data, dtype), dtype)
    out = _empty(device, a.shape)
    if a.size:
        _launch(device, filename, op, a.data, b.data, out)
    return Tensor(out, device)


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b, elementwise (same shape)."""
    return _binary("add", "elementwise.py", ("a", "b"), a, b, lambda x, y, _: x + y)


def mul(a: Tensor, b: Tensor) -> Tensor:
    """a * b, elementwise (same shape)."""
    return _binary("mul", "elementwise.py", ("a", "b"), a, b, lambda x, y, _: x * y)


def scalar_mul(a: Tensor, s: float) -> Tensor:
    """s * a."""
    device, dtype = _check_tensors("scalar_mul", a=a)
    s = _real("scalar_mul", "s", s)
    if device == "cpu":
        return _cpu(a.data * dtype.type(s), dtype)
    out = _empty(device, a.shape)
    if a.size:
        _launch(device, "elementwise.py", "scalar_mul", a.data, s, out)
    return Tensor(out, device)


def relu(a: Tensor) -> Tensor:
    """max(a, 0), elementwise."""
    device, dtype = _check_tensors("relu", a=a)
    if device == "cpu":
        return _cpu(np.where(a.data > 0, a.data, dtype.type(0)), dtype)
    out = _empty(device, a.shape)
    if a.size:
        _launch(device, "elementwise.py", "relu", a.data, out)
    return Tensor(out, device)


def transpose(a: Tensor) -> Tensor:
    """The transpose of a 2-D tensor, as a new contiguous tensor."""
    device, dtype = _check_tensors("transpose", a=a)
    rows, cols = _matrix("transpose", "a", a)
    if device == "cpu":
        return _cpu(a.data.T, dtype)
    out = _empty(device, (cols, rows))
    if a.size:
        _launch(device, "transpose.py", "transpose", a.data, out)
    return Tensor(out, device)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """(M, K) @ (K, N) -> (M, N)."""
    device, dtype = _check_tensors("matmul", a=a, b=b)
    m, k = _matrix("matmul", "a", a)
    k2, n = _matrix("matmul", "b", b)
    if k != k2:
        raise ValueError(f"matmul: the inner dimensions must agree: a is {a.shape} (M, K), so b must be "
                         f"({k}, N); got {b.shape}")
    if device == "cpu":
        return _cpu(np.matmul(a.data, b.data), dtype)
    if k == 0:  # a sum of no products: zeros, nothing to launch
        return Tensor(backend.get_backend(device).zeros((m, n), DTYPE), device)
    out = _empty(device, (m, n))
    if m and n:
        _launch(device, "matmul.py", "matmul", a.data, b.data, out)
    return Tensor(out, device)


# ---------------------------------------------------------------- Phase 3a: the forward pass


def add_bias(x: Tensor, bias: Tensor) -> Tensor:
    """out[r, c] = x[r, c] + bias[c]: x (rows, cols), bias (cols,)."""
    device, dtype = _check_tensors("add_bias", x=x, bias=bias)
    rows, cols = _matrix("add_bias", "x", x)
    if bias.shape != (cols,):
        raise ValueError(f"add_bias: `bias` must have shape ({cols},), one value per column of x {x.shape}; "
                         f"got {bias.shape}")
    if device == "cpu":
        return _cpu(x.data + bias.data, dtype)
    out = _empty(device, x.shape)
    if x.size:
        _launch(device, "forward.py", "add_bias", x.data, bias.data, out)
    return Tensor(out, device)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), elementwise, without overflow for large |x|."""
    device, dtype = _check_tensors("sigmoid", x=x)
    if device == "cpu":
        e = np.exp(-np.abs(x.data))  # never overflows: exp of a non-positive number
        return _cpu(np.where(x.data >= 0, 1 / (1 + e), e / (1 + e)), dtype)
    out = _empty(device, x.shape)
    if x.size:
        _launch(device, "forward.py", "sigmoid", x.data, out)
    return Tensor(out, device)


# ---------------------------------------------------------------- Phase 3b: the backward pass


def sigmoid_backward(y: Tensor, grad_out: Tensor) -> Tensor:
    """grad_out * y * (1 - y), where y = sigmoid(x) is the forward output."""
    return _binary("sigmoid_backward", "backward.py", ("y", "grad_out"), y, grad_out,
                   lambda y_, g, _: g * y_ * (1 - y_))


def relu_backward(x: Tensor, grad_out: Tensor) -> Tensor:
    """grad_out where x > 0, else 0; x is the forward input."""
    return _binary("relu_backward", "backward.py", ("x", "grad_out"), x, grad_out,
                   lambda x_, g, dtype: np.where(x_ > 0, g, dtype.type(0)))


def bias_grad(grad_out: Tensor) -> Tensor:
    """The column sums of grad_out (rows, cols): the gradient of a bias added to every row."""
    device, dtype = _check_tensors("bias_grad", grad_out=grad_out)
    rows, cols = _matrix("bias_grad", "grad_out", grad_out)
    if device == "cpu":
        return _cpu(grad_out.data.sum(axis=0), dtype)
    if rows == 0:  # a sum of no rows
        return Tensor(backend.get_backend(device).zeros((cols,), DTYPE), device)
    out = _empty(device, (cols,))
    if cols:
        _launch(device, "backward.py", "bias_grad", grad_out.data, out)
    return Tensor(out, device)


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    """mean((pred - target)^2) over every element, as a 0-d tensor."""
    device, dtype = _check_tensors("mse_loss", pred=pred, target=target)
    _same_shape("mse_loss", "pred", pred, "target", target)
    if pred.size == 0:
        raise ValueError(f"mse_loss: the mean of no elements is undefined (pred has shape {pred.shape})")
    if device == "cpu":
        diff = pred.data - target.data
        return _cpu(np.mean(diff * diff), dtype)
    loss = _empty(device, (1,))
    _launch(device, "backward.py", "mse_loss", pred.data, target.data, loss)
    return Tensor(loss.reshape(()), device)


def mse_backward(pred: Tensor, target: Tensor, scale: float = 1.0) -> Tensor:
    """d(scale * mse_loss(pred, target)) / d(pred) = scale * 2 (pred - target) / n."""
    device, dtype = _check_tensors("mse_backward", pred=pred, target=target)
    _same_shape("mse_backward", "pred", pred, "target", target)
    scale = _real("mse_backward", "scale", scale)
    if device == "cpu":
        n = pred.size or 1
        return _cpu((dtype.type(scale * 2.0 / n) * (pred.data - target.data)), dtype)
    out = _empty(device, pred.shape)
    if pred.size:
        _launch(device, "backward.py", "mse_backward", pred.data, target.data, out, scale)
    return Tensor(out, device)


def sgd_momentum_(param: Tensor, grad: Tensor, velocity: Tensor, lr: float, momentum: float) -> None:
    """In place: velocity = momentum * velocity + grad; param -= lr * velocity."""
    device, dtype = _check_tensors("sgd_momentum_", param=param, grad=grad, velocity=velocity)
    _same_shape("sgd_momentum_", "param", param, "grad", grad)
    _same_shape("sgd_momentum_", "param", param, "velocity", velocity)
    lr, momentum = _real("sgd_momentum_", "lr", lr), _real("sgd_momentum_", "momentum", momentum)
    if device == "cpu":
        v, p = velocity.data, param.data
        v *= dtype.type(momentum)
        v += grad.data
        p -= dtype.type(lr) * v
        return
    if param.size:
        _launch(device, "sgd.py", "sgd_momentum", param.data, grad.data, velocity.data, lr, momentum)


# ---------------------------------------------------------------- Phase 4: reductions


def sum(x: Tensor) -> Tensor:  # noqa: A001 (the name of the operation)
    """The sum of every element, as a 0-d tensor (Phase 4's ``reduce.sum`` on cuda/emu)."""
    device, dtype = _check_tensors("sum", x=x)
    if device == "cpu":
        return _cpu(np.sum(x.data), dtype)
    if x.size == 0:
        return Tensor(backend.get_backend(device).zeros((), DTYPE), device)
    out = _empty(device, (1,))
    _launch(device, "reduce.py", "sum", x.data.reshape(-1), out)
    return Tensor(out.reshape(()), device)


def max(x: Tensor) -> Tensor:  # noqa: A001
    """The largest element, as a 0-d tensor (Phase 4's ``reduce.max`` on cuda/emu)."""
    device, dtype = _check_tensors("max", x=x)
    if x.size == 0:
        raise ValueError(f"max: an empty tensor (shape {x.shape}) has no largest element")
    if device == "cpu":
        return _cpu(np.max(x.data), dtype)
    out = _empty(device, (1,))
    _launch(device, "reduce.py", "max", x.data.reshape(-1), out)
    return Tensor(out.reshape(()), device)


def column_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and population variance of each column of x (rows, cols): two (cols,) tensors."""
    device, dtype = _check_tensors("column_mean_var", x=x)
    rows, cols = _matrix("column_mean_var", "x", x)
    if rows == 0:
        raise ValueError(f"column_mean_var: the mean of no rows is undefined (x has shape {x.shape})")
    if device == "cpu":
        return _cpu(x.data.mean(axis=0), dtype), _cpu(x.data.var(axis=0), dtype)
    mean, var = _empty(device, (cols,)), _empty(device, (cols,))
    if cols:
        _launch(device, "reduce.py", "column_mean_var", x.data, mean, var)
    return Tensor(mean, device), Tensor(var, device)


# ---------------------------------------------------------------- shape helpers (no kernels of their own)


def reshape(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A view of x with another shape and the same number of elements."""
    _check_tensors("reshape", x=x)
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
    device, dtype = _check_tensors("expand", scalar=scalar)
    if scalar.size != 1:
        raise ValueError(f"expand: expected a single-element tensor, got shape {scalar.shape}")
    if device == "cpu":
        return _cpu(np.full(shape, scalar.data.reshape(-1)[0], dtype=dtype), dtype)
    n = int(np.prod(shape, dtype=np.int64))
    zeros = Tensor(backend.get_backend(device).zeros((n, 1), DTYPE), device)
    return reshape(add_bias(zeros, reshape(scalar, (1,))), shape)
