"""Precision: conversions between float32 and the 16-bit formats (Phase 8a), and the autocast setting.

``convert(t, dtype)`` rounds float32 to float16 or bfloat16 (nearest even) and widens them back exactly:
NumPy on cpu (:mod:`minitorch.dtypes`), the learner's ``convert.py`` (``to_16bit``, ``from_16bit``) on
cuda and emu. Between the two 16-bit formats it goes through float32 (widening is exact, so the result
is rounded once).

The autocast setting is what :func:`minitorch.amp.autocast` sets and what ``matmul`` reads: it lives
here, below the ops that read it, so that no op imports ``minitorch.amp`` (which sits beside autograd).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from minitorch import dtypes
from minitorch.ops.dispatch import cpu_result, empty, launch, provides
from minitorch.tensor import DTYPE, FLOAT64, HALF, INDEX, Tensor

CONVERT_FILE = "convert.py"


def convert(t: Tensor, dtype: Any) -> Tensor:
    """``t`` in ``dtype`` (float32, float16, bfloat16; float64 on cpu): a new tensor, or ``t`` itself."""
    if not isinstance(t, Tensor):
        raise TypeError(f"convert: expected a minitorch Tensor, got {type(t).__name__}")
    try:
        dt = dtypes.resolve(dtype)
    except TypeError:
        dt = None
    if dt not in (DTYPE, FLOAT64, *HALF):
        raise TypeError(f"convert: expected float32, float16, bfloat16 or float64, got dtype {dtype!r}")
    src = t.dtype
    if dt == src:
        return t
    if src == INDEX or dt == INDEX:
        raise TypeError(f"convert: int32 tensors hold ids and convert to nothing; got {src} -> {dt}")
    if t.device == "cpu":
        return _convert_cpu(t, dt)
    if dt == FLOAT64:
        raise TypeError(f"convert: float64 tensors live on the 'cpu' device only, this one is on {t.device!r}")
    if src in HALF and dt in HALF:
        return convert(convert(t, DTYPE), dt)
    if src in HALF:  # widen: exact
        out = empty(t.device, t.shape, DTYPE)
        if t.size:
            launch(t.device, CONVERT_FILE, "from_16bit", t.data, out, outputs=(1,), dtype=src.name)
        return Tensor(out, t.device)
    out = empty(t.device, t.shape, dtypes.storage(dt))
    if t.size:
        launch(t.device, CONVERT_FILE, "to_16bit", t.data, out, outputs=(1,), dtype=dt.name)
    return Tensor(out, t.device)


def convert_with_column_sums(t: Tensor, dtype: Any) -> tuple[Tensor, Tensor]:
    """A float32 matrix ``t`` (rows, cols) rounded to the 16-bit ``dtype``, and its float32 column sums (cols,):
    a Linear layer's output gradient for its two products and its bias's gradient, in one pass over ``t``
    (the learner's ``to_16bit_column_sums``) on cuda/emu."""
    if not isinstance(t, Tensor) or t.dtype != DTYPE or t.ndim != 2:
        raise TypeError(f"convert_with_column_sums: expected a float32 matrix, got "
                        f"{t.dtype if isinstance(t, Tensor) else type(t).__name__} "
                        f"{t.shape if isinstance(t, Tensor) else ''}")
    dt = dtypes.resolve(dtype)
    if dt not in HALF:
        raise TypeError(f"convert_with_column_sums: expected float16 or bfloat16, got {dtype!r}")
    if t.device == "cpu":
        return _convert_cpu(t, dt), cpu_result(t.data.sum(axis=0), DTYPE)
    if not provides(CONVERT_FILE, "to_16bit_column_sums"):  # a convert.py from before it: two passes
        from minitorch.ops.reduce import bias_grad  # (reduce imports nothing of precision's)

        return convert(t, dt), bias_grad(t)
    out = empty(t.device, t.shape, dtypes.storage(dt))
    sums = empty(t.device, (t.shape[1],), DTYPE)
    launch(t.device, CONVERT_FILE, "to_16bit_column_sums", t.data, out, sums, outputs=(1, 2), dtype=dt.name)
    return Tensor(out, t.device), Tensor(sums, t.device)


def column_sums_16bit(t: Tensor) -> Tensor:
    """The float32 column sums (cols,) of a float16 or bfloat16 matrix ``t`` (rows, cols): the bias's gradient of a
    Linear layer whose output stays in 16 bits (its output gradient comes in 16 bits), in one pass over ``t`` (the
    learner's ``column_sums_16bit``) on cuda/emu."""
    if not isinstance(t, Tensor) or t.dtype not in HALF or t.ndim != 2:
        raise TypeError(f"column_sums_16bit: expected a float16 or bfloat16 matrix, got "
                        f"{t.dtype if isinstance(t, Tensor) else type(t).__name__} "
                        f"{t.shape if isinstance(t, Tensor) else ''}")
    if t.device == "cpu":
        return cpu_result(t.numpy().sum(axis=0, dtype=DTYPE), DTYPE)
    if not provides(CONVERT_FILE, "column_sums_16bit"):  # a convert.py from before it: widened, then summed
        from minitorch.ops.reduce import bias_grad

        return bias_grad(convert(t, DTYPE))
    sums = empty(t.device, (t.shape[1],), DTYPE)
    launch(t.device, CONVERT_FILE, "column_sums_16bit", t.data, sums, outputs=(1,), dtype=t.dtype.name)
    return Tensor(sums, t.device)


def _convert_cpu(t: Tensor, dt: Any) -> Tensor:
    values = t.numpy()  # a bfloat16 tensor's float32 values (exact)
    if dt in HALF:
        if values.dtype == FLOAT64:  # through float32, as on the devices (the kernels convert float32)
            values = values.astype(DTYPE)
        return Tensor(np.ascontiguousarray(dtypes.float32_to_16bit(values.astype(DTYPE), dt)), "cpu")
    return cpu_result(values, dt)


def via_float32(op: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
    """Run a float32 op on 16-bit tensors (of one dtype, checked by the caller): widen each tensor
    argument (exact), compute in float32, round the result back once to their dtype. What elementwise
    ops do with float16/bfloat16 inputs."""
    dtype = next(a.dtype for a in args if isinstance(a, Tensor))
    widened = [convert(a, DTYPE) if isinstance(a, Tensor) else a for a in args]
    return convert(op(*widened, **kwargs), dtype)


def is_half(*tensors: Any) -> bool:
    """Whether any of these is a 16-bit tensor (the op then goes through :func:`via_float32`)."""
    for t in tensors:
        if isinstance(t, Tensor) and t.dtype in HALF:
            return True
    return False


# ---------------------------------------------------------------- autocast setting

_state = threading.local()


def autocast_dtype() -> Any:
    """The 16-bit dtype float32 products run in now (inside ``minitorch.amp.autocast``), else None."""
    return getattr(_state, "dtype", None)


def set_autocast_dtype(dtype: Any) -> Any:
    """Set the autocast dtype (float16, bfloat16 or None); returns the previous one. For minitorch.amp."""
    if dtype is not None:
        dtype = dtypes.resolve(dtype)
        if dtype not in HALF:
            raise ValueError(f"autocast runs products in float16 or bfloat16, got {dtype}")
    previous = autocast_dtype()
    _state.dtype = dtype
    return previous


# ---------------------------------------------------------------- the loss scaler's device side

SCALER_FILE = "scaler.py"


def _one_float(op: str, name: str, t: Tensor) -> None:
    if not isinstance(t, Tensor) or t.dtype != DTYPE or t.size != 1:
        raise TypeError(f"{op}: `{name}` must be a one-element float32 Tensor, got "
                        f"{getattr(t, 'dtype', type(t).__name__)} {getattr(t, 'shape', '')}")


def unscale_check_(grad: Tensor, inv_scale: Tensor, found: Tensor) -> None:
    """In place: grad *= inv_scale; found = 1 if a result is inf or NaN (else found is left as it is).
    On cuda/emu the learner's ``scaler.py`` (``unscale_check``): nothing is read back to the host."""
    _one_float("unscale_check_", "inv_scale", inv_scale)
    _one_float("unscale_check_", "found", found)
    if not isinstance(grad, Tensor) or grad.dtype != DTYPE:
        raise TypeError(f"unscale_check_: expected a float32 gradient, got {getattr(grad, 'dtype', type(grad))}")
    if grad.device != inv_scale.device or found.device != grad.device:
        raise ValueError(f"unscale_check_: the gradient is on {grad.device!r}, the scaler's state on "
                         f"{inv_scale.device!r}")
    if grad.device == "cpu":
        with np.errstate(over="ignore", invalid="ignore"):
            grad.data[...] *= inv_scale.data.reshape(())
        if not np.all(np.isfinite(grad.data)):
            found.data[...] = 1.0
        return
    if grad.size:
        launch(grad.device, SCALER_FILE, "unscale_check", grad.data, inv_scale.data, found.data)


def restore_if_found_(device: str, target: Any, saved: Any, found: Tensor) -> None:
    """In place: the device array ``target`` = ``saved`` (bit for bit, any dtype) if found != 0, else
    unchanged: how a step with an inf or NaN gradient is undone without the host deciding."""
    _one_float("restore_if_found_", "found", found)
    if device == "cpu":
        if found.data.reshape(()) != 0:
            np.copyto(target, saved)
        return
    launch(device, SCALER_FILE, "restore_if_found", target, saved, found.data)


def update_scale_(scale: Tensor, inv_scale: Tensor, good_steps: Tensor, found: Tensor, growth: float,
                  backoff: float, interval: int) -> None:
    """In place, after a step: scale *= backoff and good_steps = 0 if found, else good_steps += 1 and, at
    ``interval``, scale *= growth (unless that overflows) and good_steps = 0; then inv_scale = 1 / scale."""
    for name, t in (("scale", scale), ("inv_scale", inv_scale), ("good_steps", good_steps), ("found", found)):
        _one_float("update_scale_", name, t)
    if scale.device == "cpu":
        s, count = np.float32(scale.data.reshape(())), np.float32(good_steps.data.reshape(()))
        if found.data.reshape(()) != 0:
            s, count = s * np.float32(backoff), np.float32(0)
        else:
            count += np.float32(1)
            if count >= interval:
                with np.errstate(over="ignore"):
                    grown = s * np.float32(growth)
                s, count = (grown if np.isfinite(grown) else s), np.float32(0)
        scale.data[...], good_steps.data[...] = s, count
        inv_scale.data[...] = np.float32(1) / s
        return
    launch(scale.device, SCALER_FILE, "update_scale", scale.data, inv_scale.data, good_steps.data, found.data,
           float(growth), float(backoff), int(interval))


def scale_by_(t: Tensor, coef: Tensor) -> Tensor:
    """In place: t *= coef, a one-element float32 tensor read on the device (Phase 7's ``clip.py``
    ``scale_by``): a factor the host does not know, such as a GradScaler's scale, without a read back."""
    _one_float("scale_by_", "coef", coef)
    if t.device != coef.device:
        raise ValueError(f"scale_by_: t is on {t.device!r}, coef on {coef.device!r}")
    if t.device == "cpu":
        t.data[...] *= coef.data.reshape(())
    elif t.size:
        launch(t.device, "clip.py", "scale_by", t.data, coef.data)
    return t
