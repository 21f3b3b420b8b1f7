"""What every op shares: device and argument checks, output allocation, and the call of the learner's
launcher. An op is a few lines on top of these: check, allocate, ``launch`` (NumPy on ``cpu``)."""

from __future__ import annotations

import contextlib
import inspect
import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from minitorch import backend, kernels, plans
from minitorch.tensor import DTYPE, HALF, INDEX, Tensor


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



def check_tensors(op: str, *, half: bool = False, **named: Any) -> tuple[str, Any]:
    """All arguments are Tensors on one device with one dtype; returns (device, dtype). 16-bit tensors
    (float16, bfloat16) only where ``half`` (the ops that take them)."""
    device = dtype = None
    first = ""
    for name, t in named.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: `{name}` must be a minitorch Tensor, got {type(t).__name__}")
        if t.dtype == INDEX:
            raise TypeError(f"{op}: `{name}` holds int32 ids; {op} computes on float tensors")
        if not half and t.dtype in HALF:
            raise TypeError(f"{op}: `{name}` is {t.dtype}; {op} computes on float32 tensors (16-bit tensors take "
                            f"part in elementwise ops and matmul): convert it with .float()")
        if device is None:
            device, dtype, first = t.device, t.dtype, name
        elif t.device != device:
            raise ValueError(f"{op}: expected every tensor on one device, got `{first}` on {device!r} and "
                             f"`{name}` on {t.device!r}; move one with .to({device!r})")
        elif t.dtype != dtype:
            raise TypeError(f"{op}: expected one dtype, got `{first}` {dtype} and `{name}` {t.dtype}")
    assert device is not None and dtype is not None
    return device, dtype



def same_shape(op: str, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{op}: `{b_name}` must have the shape of `{a_name}`, {a.shape}; got {b.shape}")



def matrix(op: str, name: str, t: Tensor) -> tuple[int, int]:
    if t.ndim != 2:
        raise ValueError(f"{op}: `{name}` must be a 2-D tensor (rows, cols), got shape {t.shape}")
    return t.shape  # type: ignore[return-value]



def real(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: `{name}` must be a real number, got {type(value).__name__}")
    return float(value)



def empty(device: str, shape: tuple[int, ...], dtype: np.dtype = DTYPE) -> Any:
    made = backend._BACKENDS.get(device)  # the device of an existing tensor: its backend exists
    return (made or backend.get_backend(device)).empty(shape, dtype)



def cpu_result(value: Any, dtype: np.dtype) -> Tensor:
    """A cpu tensor from a NumPy result (NumPy turns 0-d results into scalars; a tensor needs an array)."""
    return Tensor(np.ascontiguousarray(value, dtype=dtype) if np.ndim(value) else np.asarray(value, dtype=dtype), "cpu")



def launcher(filename: str, function: str) -> Any:
    module = kernels.load_module(filename)  # one os.stat: a rewritten cell takes effect at once
    fn = getattr(module, function, None)
    if fn is None:
        where = kernels.KERNEL_FILES.get(filename)
        cell = f' (the cell "{where.cell}" in {where.lab})' if where else ""
        raise AttributeError(f"{filename} defines no function `{function}`{cell}; minitorch calls it")
    return fn



def provides(filename: str, function: str) -> bool:
    """Whether the learner's ``filename`` defines ``function`` (a launcher added to a lab after a learner wrote
    the file: the framework then keeps to the ones it has)."""
    return callable(getattr(kernels.load_module(filename), function, None))


def accepts(filename: str, function: str, parameter: str) -> bool:
    """Whether the learner's launcher ``function`` of ``filename`` takes ``parameter`` (one added to the lab after
    a learner wrote the file: the framework then calls it without). A launcher whose signature cannot be read, or
    that takes ``**kwargs`` (the grader's stand-in for a launcher in another process), is taken to."""
    fn = getattr(kernels.load_module(filename), function, None)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return parameter in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def launch(device: str, filename: str, function: str, *args: Any, outputs: tuple[int, ...] | None = None,
           **kwargs: Any) -> None:
    """Call the learner's launcher ``function`` of ``filename`` with ``device`` active.

    ``outputs``: the positions in ``args`` of the arrays the launcher overwrites without reading. An
    op that names them lets :mod:`minitorch.plans` replay the launcher's launches on later calls of
    the same kind instead of running its Python; without them the launcher always runs.
    """
    target = backend._BACKENDS.get(device)
    if target is not None and target.pending_branches:  # a branch of the graph being captured wrote an argument?
        target.wait_for(args)
    if outputs is not None and plans.enabled():
        plans.run(device, filename, function, lambda: _call(device, filename, function, args, kwargs),
                  args, kwargs, outputs)
    else:
        _call(device, filename, function, args, kwargs)


_weight_grads_branch = False


def set_concurrent_weight_grads(enabled: bool) -> bool:
    """While a training step is captured into a CUDA graph, compute the gradients of Linear weights and biases
    (autograd's MatMul and AddBias) on a side branch of the graph, concurrently with the rest of the backward
    pass: those products have few output tiles (d_in x d_out, K = the batch's rows), so alone they leave most
    of the GPU idle. A launch that reads their results waits for them (``Backend.wait_for``). Eager steps,
    and devices other than cuda, run in order as ever. Returns the previous setting."""
    global _weight_grads_branch
    previous, _weight_grads_branch = _weight_grads_branch, bool(enabled)
    return previous


@contextlib.contextmanager
def weight_grad_branch(device: str) -> Iterator[None]:
    """The block's launches on a side branch (see set_concurrent_weight_grads), where that is on."""
    if not _weight_grads_branch or device != "cuda":
        yield
        return
    with backend.get_backend(device).branch():
        yield


def _call(device: str, filename: str, function: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    if backend._active == device:  # the common case, without a context manager's cost
        return launcher(filename, function)(*args, **kwargs)
    with on_device(device):
        return launcher(filename, function)(*args, **kwargs)



def binary(op: str, filename: str, names: tuple[str, str], a: Tensor, b: Tensor,
            reference: Callable[[np.ndarray, np.ndarray, np.dtype], np.ndarray]) -> Tensor:
    """An elementwise op of two tensors of one shape: `reference` on cpu, the launcher `op` of `filename`
    (called as op(a, b, out)) elsewhere."""
    if type(a) is Tensor and type(b) is Tensor and a._device == b._device and a.dtype == DTYPE == b.dtype:
        device, dtype = a._device, DTYPE  # the common case, float32 on one device: no names to build
    else:
        device, dtype = check_tensors(op, half=True, **{names[0]: a, names[1]: b})
        if dtype in HALF:
            from minitorch.ops.precision import via_float32

            return via_float32(lambda x, y: binary(op, filename, names, x, y, reference), a, b)
    shape = a.shape
    if shape != b.shape:
        same_shape(op, names[0], a, names[1], b)
    if device == "cpu":
        return cpu_result(reference(a.data, b.data, dtype), dtype)
    out = empty(device, shape)
    if out.size:
        launch(device, filename, op, a._data, b._data, out, outputs=(2,))
    return Tensor(out, device)
