"""Tensor: an array of any shape that lives on one device ('cuda', 'emu' or 'cpu').

Phase 1 gives it memory: creation, host<->device copies, ``fill_`` and ``clone``, which run the
learner's kernels (``memory.cu`` through the launchers in ``memory.py``) on ``cuda`` and ``emu``; on
``cpu`` they use NumPy, the reference.

From Phase 3 on a tensor also takes part in autograd: ``requires_grad``, ``.grad``, ``.grad_fn`` (the
:class:`minitorch.autograd.Context` of the operation that made it) and ``.backward()``, which runs the
learner's ``backprop.py``. The operators ``+ - * @``, ``.T``, ``.relu()``, ``.sigmoid()``, ``.sum()`` and
``.mean()`` are :class:`minitorch.autograd.Function` s over the primitives of :mod:`minitorch.ops`.

Tensors hold float32 on every device; the ``cpu`` device also holds float64 (``dtype="float64"``), the
precision in which gradients are checked by finite differences. From Phase 7 on a tensor may also hold
int32 ids (``dtype="int32"``: the tokens an embedding looks up, the classes of a cross-entropy): such a
tensor takes part in no arithmetic and never requires grad.

From Phase 8a a tensor may hold a 16-bit float format on every device (``dtype=minitorch.float16`` or
``minitorch.bfloat16``; ``.to(dtype)``, ``.half()``, ``.bfloat16()``, ``.float()``): the operands of tensor
cores. A bfloat16 tensor's array is ``uint16`` (its bits: NumPy and CuPy have no bfloat16); its
``numpy()`` gives the float32 values, exactly, and ``bits()`` the uint16 patterns. Conversions from
float32 round to nearest even and run the learner's ``convert.py`` on cuda/emu (NumPy on cpu);
elementwise ops on 16-bit tensors compute in float32 and round the result back once; matmul runs the
learner's ``hgemm.py`` (fp32 accumulation). Everything else asks for float32 (see :mod:`minitorch.dtypes`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from minitorch import backend, dtypes, kernels

if TYPE_CHECKING:
    from minitorch.autograd import Context

DTYPE = dtypes.float32
FLOAT64 = dtypes.float64
INDEX = dtypes.int32  # ids (tokens, classes): gathered by kernels, never computed with
HALF = dtypes.HALF  # float16 and bfloat16 (Phase 8a)
_UINT16 = dtypes.UINT16  # the array dtype of bfloat16 tensors (their bits)

ShapeLike = int | Sequence[int]
DTypeLike = Any  # numpy.float32, "float64", numpy.dtype(...)


def _check_shape(shape: ShapeLike) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(f"a shape is a tuple of non-negative integers; got {tuple(shape) if not isinstance(shape, (int, np.integer)) else shape!r}")
    return tuple(int(d) for d in dims)


def _check_device(device: str | None) -> str:
    if device is None:
        return backend.get_device()
    if device not in backend.DEVICES:
        raise ValueError(f"unknown device {device!r}: expected one of "
                         f"{', '.join(map(repr, backend.DEVICES))}")
    return device


def check_dtype(dtype: DTypeLike, device: str, *, allow_half: bool = False) -> Any:
    """float32 anywhere; float64 on the cpu device only (kernels are float32); int32 ids anywhere;
    float16 and bfloat16 anywhere where ``allow_half`` (tensors; layers make float32 parameters)."""
    if dtype is None:
        return DTYPE
    try:
        dt = dtypes.resolve(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}: expected float32, float16, bfloat16 or float64") from None
    if dt == INDEX:
        return dt
    if dt in HALF:
        if not allow_half:
            raise TypeError(f"layers make float32 parameters (or float64 on the cpu device), got dtype {dt}: make "
                            f"the layer in float32, then convert it with .to(minitorch.{dt}), or keep float32 "
                            f"weights and train under minitorch.amp.autocast")
        return dt
    if dt not in (DTYPE, FLOAT64):
        raise TypeError(f"minitorch tensors hold float16, bfloat16, float32 (or float64 on the cpu device), got "
                        f"dtype {dt}")
    if dt == FLOAT64 and device != "cpu":
        raise TypeError(f"float64 tensors live on the 'cpu' device only (the reference path for gradient "
                        f"checks); the kernels on {device!r} are float32. Use dtype=float32 there.")
    return dt


def names_a_device(target: Any) -> bool:
    """Whether ``.to(target)`` moves to a device: a string that names no dtype ("gpu" then gets the device
    error, which lists the devices)."""
    if not isinstance(target, str):
        return False
    if target in backend.DEVICES:
        return True
    try:
        dtypes.resolve(target)
    except TypeError:
        return True
    return False


def _check_host_array(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if array.dtype != dtype:
        raise TypeError(f"minitorch tensors hold {dtype}, got a {array.dtype} array. Convert it yourself "
                        f"if that is what you mean: array.astype(numpy.{dtype})")
    return array if array.flags.c_contiguous else array.copy(order="C")  # keeps 0-d shapes


class Tensor:
    """A contiguous float array on one device. Create one with :func:`tensor`, :func:`zeros`, ..."""

    __slots__ = ("_data", "_device", "_requires_grad", "_grad", "_grad_view", "grad_fn", "__weakref__")

    def __init__(self, data: Any, device: str, *, requires_grad: bool = False) -> None:
        # Internal: ``data`` is already a device array of ``device``'s backend.
        self._data = data
        self._device = device
        self._requires_grad = False
        self._grad: Tensor | None = None
        self._grad_view: Tensor | None = None  # where .grad lives when an optimizer made it flat
        self.grad_fn: Context | None = None  # set by Function.apply on the tensors it records
        if requires_grad:
            self.requires_grad = True

    # --- properties ----------------------------------------------------------------------------
    @property
    def data(self) -> Any:
        """The underlying device array (``cupy.ndarray``, ``emu.DeviceArray`` or ``numpy.ndarray``)."""
        return self._data

    @property
    def device(self) -> str:
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape  # a tuple already, on every backend

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def size(self) -> int:
        return math.prod(self._data.shape)

    @property
    def dtype(self) -> Any:
        """A ``numpy.dtype`` (float32, float64, int32, float16), or :data:`minitorch.bfloat16`."""
        dt = self._data.dtype  # a numpy.dtype on every backend
        return dtypes.bfloat16 if dt == _UINT16 else dt

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=20)
        extra = "" if self.dtype == DTYPE else f", dtype={self.dtype}"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{self.grad_fn.function.__name__}>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"Tensor({body}, device={self._device!r}{extra})"

    # --- autograd ------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether operations on this tensor are recorded so that gradients can flow back to it."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self.dtype == INDEX:
            raise TypeError("an int32 tensor holds ids (tokens, classes): it has no gradient; "
                            "requires_grad is for float tensors")
        if self.grad_fn is not None:
            raise RuntimeError("requires_grad can only be changed on a leaf tensor (one no recorded operation "
                               "made); use .detach() to get a leaf with the same values")
        self._requires_grad = bool(value)

    def requires_grad_(self, value: bool = True) -> Tensor:
        """Set ``requires_grad`` in place; returns the tensor (as in PyTorch)."""
        self.requires_grad = value
        return self

    @property
    def grad(self) -> Tensor | None:
        """The gradient backward accumulated into this leaf (None before any, or after ``zero_grad``)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        # A parameter whose gradient lives in a flat buffer (optim.AdamW(..., flat=True)) keeps it there:
        # a gradient assigned to it (backprop's ``t.grad = g``) is copied into its view of that buffer.
        view = self._grad_view
        if view is not None and value is not None and value is not view:
            value = view.copy_(value)
        self._grad = value

    def _bind_flat(self, data: Any, grad_view: Tensor | None) -> None:
        """Internal (minitorch.optim's flat buffers): this tensor's values become ``data`` (a view of a flat
        buffer, already holding them) and every gradient assigned to it is copied into ``grad_view``."""
        self._data, self._grad_view = data, grad_view
        if grad_view is not None and self._grad is not None and self._grad is not grad_view:
            self._grad = grad_view.copy_(self._grad)

    @property
    def is_leaf(self) -> bool:
        """True unless a recorded operation made this tensor (its ``.grad`` is then filled by backward)."""
        return self.grad_fn is None

    def detach(self) -> Tensor:
        """A leaf tensor sharing this tensor's memory, outside the graph (no grad, no history)."""
        return Tensor(self._data, self._device)

    def backward(self, grad: Tensor | None = None) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        ``grad`` is the gradient flowing into this tensor (its shape); it may be left out for a
        single-element tensor such as a loss, where it is 1. Runs the learner's ``backprop.py``
        (``backpropagate``), with recording turned off.
        """
        from minitorch.autograd import no_grad

        if not self._requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad: no tensor with "
                               "requires_grad=True went into the operations that made it (or they ran "
                               "under minitorch.no_grad())")
        if grad is None:
            if self.size != 1:
                raise RuntimeError(f"backward() without a gradient needs a single-element tensor (a loss); this "
                                   f"one has shape {self.shape}: pass grad=, a tensor of shape {self.shape}")
            from minitorch.autograd import mark_host_value

            grad = mark_host_value(ones(self.shape, self._device, dtype=self.dtype), 1.0)
        elif not isinstance(grad, Tensor):
            raise TypeError(f"backward(grad=...) takes a Tensor, got {type(grad).__name__}")
        elif grad.shape != self.shape or grad.device != self._device or grad.dtype != self.dtype:
            raise ValueError(f"backward(grad=...): expected a {self.dtype} tensor of shape {self.shape} on "
                             f"{self._device!r}, got {grad.dtype} {grad.shape} on {grad.device!r}")
        backprop = kernels.load_module("backprop.py")
        with no_grad():
            backprop.backpropagate(self, grad)

    # --- copies between devices ----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new host (NumPy) array with this tensor's values: a device-to-host copy.

        A float16 tensor gives a float16 array; a bfloat16 tensor (NumPy has none) gives the float32
        array of its values, converted exactly (:meth:`bits` gives the uint16 patterns themselves)."""
        host = backend.get_backend(self._device).asnumpy(self._data)
        return dtypes.bits_to_float32(host, dtypes.bfloat16) if host.dtype == _UINT16 else host

    def bits(self) -> np.ndarray:
        """The bit patterns of a 16-bit tensor (float16 or bfloat16) as a host uint16 array."""
        if self.dtype not in HALF:
            raise TypeError(f"bits() gives the patterns of a float16 or bfloat16 tensor; this one is {self.dtype}")
        return backend.get_backend(self._device).asnumpy(self._data).view(_UINT16)

    def item(self) -> float:
        """The value of a single-element tensor as a Python float (a device-to-host copy)."""
        if self.size != 1:
            raise ValueError(f"item() needs a single-element tensor, got shape {self.shape}")
        return float(self.numpy().reshape(-1)[0])

    def to(self, target: Any = None, *, device: str | None = None, dtype: DTypeLike = None) -> Tensor:
        """This tensor on another device (``t.to("cpu")``) or in another dtype (``t.to(minitorch.bfloat16)``,
        ``t.to("float16")``), or both (``device=``, ``dtype=``); itself if nothing changes (as in PyTorch).

        A move between devices is not recorded; a change of dtype is (its gradient converts back), and
        rounds to nearest even (the learner's ``convert.py`` on cuda/emu, NumPy on cpu)."""
        if target is not None:
            if names_a_device(target):
                device = target
            else:
                dtype = target
        out = self
        if dtype is not None:
            dt = check_dtype(dtype, self._device, allow_half=True)
            if dt != self.dtype:
                out = autograd.Cast.apply(self, dt)
        if device is None:
            return out
        device = _check_device(device)
        if device == out._device:
            return out
        check_dtype(out.dtype, device, allow_half=True)
        host = backend.get_backend(out._device).asnumpy(out._data)  # bfloat16 moves as its bits
        return Tensor(backend.get_backend(device).asarray(host), device)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def double(self) -> Tensor:
        """A float64 copy (cpu device only). Not recorded."""
        check_dtype(FLOAT64, self._device)
        return Tensor(np.array(self.numpy(), dtype=FLOAT64), self._device)

    def float(self) -> Tensor:
        """A float32 copy, or the tensor itself if it is float32 (``.to(minitorch.float32)``)."""
        return self.to(dtype=DTYPE)

    def half(self) -> Tensor:
        """A float16 copy, or the tensor itself if it is float16 (``.to(minitorch.float16)``)."""
        return self.to(dtype=dtypes.float16)

    def bfloat16(self) -> Tensor:
        """A bfloat16 copy, or the tensor itself if it is bfloat16 (``.to(minitorch.bfloat16)``)."""
        return self.to(dtype=dtypes.bfloat16)

    # --- phase 1: the learner's kernels ---------------------------------------------------------
    def fill_(self, value: float) -> Tensor:
        """Set every element to ``value``, in place (the learner's ``fill`` kernel)."""
        if not isinstance(value, numbers.Real):
            raise TypeError(f"fill_ takes a real number, got {type(value).__name__}")
        if self.dtype == INDEX:
            raise TypeError("fill_ writes float32 values (the learner's fill kernel); this tensor holds int32 ids: "
                            "make ids on the host and copy them in (minitorch.tensor(ids, dtype='int32'), copy_from)")
        if self.dtype in HALF:  # the fill kernel writes float32: fill a float32 tensor, convert it in
            return self.copy_(full(self.shape, value, self._device).to(dtype=self.dtype))
        if self._device == "cpu":
            self._data.fill(value)
        elif self.size:
            from minitorch.ops import on_device

            with on_device(self._device):
                kernels.load_module("memory.py").fill(self._data, float(value))
        return self

    def copy_from(self, host: np.ndarray) -> Tensor:
        """Copy a host array of this tensor's shape and dtype into this tensor, in place (host to device).

        A bfloat16 tensor takes its uint16 bits, or float32 values (rounded as ``.to(bfloat16)`` rounds).

        The way to give a captured graph (:mod:`minitorch.graph`) new inputs between replays.
        """
        host = np.asarray(host)
        if self.dtype is dtypes.bfloat16 and host.dtype == DTYPE and host.shape == self.shape:
            return self.copy_(from_numpy(host, self._device, dtype=dtypes.bfloat16))  # rounded as .to() does
        if host.shape != self.shape or host.dtype != self._data.dtype:
            what = ("a float32 array (its values, rounded to nearest even) or the uint16 bits"
                    if self.dtype is dtypes.bfloat16 else f"a {self.dtype} array")
            raise ValueError(f"copy_from: expected {what} of shape {self.shape}, got {host.dtype} {host.shape}")
        if self._device == "cpu":
            np.copyto(self._data, host)
        else:
            self._data.set(np.ascontiguousarray(host))
        return self

    def copy_(self, src: Tensor) -> Tensor:
        """Copy ``src`` (same shape, dtype and device) into this tensor, in place (the learner's ``copy``
        kernel); device to device, so a captured graph may do it."""
        if not isinstance(src, Tensor):
            raise TypeError(f"copy_ takes a Tensor, got {type(src).__name__}")
        if src.shape != self.shape or src.dtype != self.dtype or src.device != self._device:
            raise ValueError(f"copy_: expected a {self.dtype} tensor of shape {self.shape} on {self._device!r}, "
                             f"got {src.dtype} {src.shape} on {src.device!r}")
        if self._device == "cpu":
            np.copyto(self._data, src._data)
        elif self.dtype in HALF:  # the learner's copy kernel moves floats: 16-bit data moves as bytes
            backend.get_backend(self._device).copy_into(self._data, src._data)
        elif self.size:
            from minitorch.ops import on_device

            target = backend.get_backend(self._device)
            if target.pending_branches:  # src written on a side branch of the graph being captured (a weight's
                target.wait_for((src._data, self._data))  # gradient, copied into a flat buffer): wait for it
            with on_device(self._device):
                kernels.load_module("memory.py").copy(src._data, self._data)
        return self

    def clone(self) -> Tensor:
        """A new tensor with the same values on the same device (the learner's ``copy`` kernel)."""
        out = backend.get_backend(self._device).empty(self.shape, self._data.dtype)
        if self._device == "cpu":
            np.copyto(out, self._data)
        elif self.dtype in HALF:
            backend.get_backend(self._device).copy_into(out, self._data)
        elif self.size:
            from minitorch.ops import on_device

            with on_device(self._device):
                kernels.load_module("memory.py").copy(self._data, out)
        return Tensor(out, self._device)

    # --- phase 3: operators (recorded for autograd) ---------------------------------------------
    def __add__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return autograd.add(self, other)

    def __sub__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return autograd.Sub.apply(self, other)

    def __mul__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return autograd.Mul.apply(self, other)
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return autograd.ScalarMul.apply(self, float(other))
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Tensor:
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return autograd.ScalarMul.apply(self, 1.0 / float(other))
        return NotImplemented

    def __neg__(self) -> Tensor:
        return autograd.ScalarMul.apply(self, -1.0)

    def __matmul__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return autograd.MatMul.apply(self, other)

    @property
    def T(self) -> Tensor:  # noqa: N802 (PyTorch's name)
        """The transpose of a 2-D tensor (a new tensor: the learner's transpose kernel)."""
        return autograd.Transpose.apply(self)

    def relu(self) -> Tensor:
        return autograd.ReLU.apply(self)

    def sigmoid(self) -> Tensor:
        return autograd.Sigmoid.apply(self)

    def sum(self) -> Tensor:
        """The sum of all elements, a 0-d tensor (Phase 4's reduction on cuda/emu)."""
        return autograd.Sum.apply(self)

    def mean(self) -> Tensor:
        """The mean of all elements, a 0-d tensor (Phase 4's reduction on cuda/emu)."""
        return autograd.Mean.apply(self)

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in a new shape (a view: no copy)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return autograd.Reshape.apply(self, tuple(shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Dimensions start_dim .. end_dim (inclusive, negative from the end) merged into one: a view."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (d + self.ndim if d < 0 else d for d in (start_dim, end_dim))
        if not 0 <= start <= end < self.ndim:
            raise ValueError(f"flatten: dimensions {start_dim} .. {end_dim} do not fit shape {self.shape}")
        return self.reshape(*self.shape[:start], math.prod(self.shape[start:end + 1]), *self.shape[end + 1:])


# --- creation ----------------------------------------------------------------------------------

def _as_ids(array: np.ndarray) -> np.ndarray:
    """Integer ids as int32, refusing what would change a value (fractions, out of int32's range)."""
    if array.dtype.kind in "iu" or array.dtype == np.bool_:
        info = np.iinfo(INDEX)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ValueError(f"ids must fit in int32, got values from {array.min()} to {array.max()}")
        return array
    if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
        return _as_ids(array.astype(np.int64))
    raise TypeError(f"int32 ids are made from integers, got a {array.dtype} array")


def from_numpy(array: np.ndarray, device: str | None = None, *, dtype: DTypeLike = None,
               requires_grad: bool = False) -> Tensor:
    """Copy a float32 NumPy array to ``device`` (default: the active device).

    ``dtype`` converts explicitly (float64 on the cpu device only; ``"int32"`` for ids, whose values must
    fit; float16 or bfloat16: the values go to the device as float32 and are rounded there to nearest
    even, as ``.to(dtype)`` does); without it the array must be float32, float16, or int32 (ids).
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy takes a numpy.ndarray, got {type(array).__name__}")
    device = _check_device(device)
    if dtype is not None:
        dt = check_dtype(dtype, device, allow_half=True)
        if dt in HALF and array.dtype != dt:
            return from_numpy(array.astype(DTYPE), device).to(dtype=dt).requires_grad_(requires_grad)
        if dt == INDEX and array.dtype != INDEX:
            array = _as_ids(array)
        array = array.astype(dt)
    else:
        dt = array.dtype if array.dtype in (INDEX, dtypes.float16) else DTYPE
    data = backend.get_backend(device).asarray(_check_host_array(array, dt))
    return Tensor(data, device, requires_grad=requires_grad)


def from_bits(bits: np.ndarray, dtype: DTypeLike, device: str | None = None, *,
              requires_grad: bool = False) -> Tensor:
    """A float16 or bfloat16 tensor whose elements have these bit patterns (a uint16 array), unchanged."""
    device = _check_device(device)
    dt = check_dtype(dtype, device, allow_half=True)
    if dt not in HALF:
        raise TypeError(f"from_bits makes float16 or bfloat16 tensors, got dtype {dt}")
    bits = np.asarray(bits)
    if bits.dtype != _UINT16:
        raise TypeError(f"from_bits takes the uint16 bit patterns, got a {bits.dtype} array")
    host = np.ascontiguousarray(bits).view(dtypes.storage(dt))
    return Tensor(backend.get_backend(device).asarray(host), device, requires_grad=requires_grad)


def tensor(data: Any, device: str | None = None, *, dtype: DTypeLike = None, requires_grad: bool = False) -> Tensor:
    """A tensor from a float32 NumPy array, a number, or (nested) lists of numbers."""
    if isinstance(data, Tensor):
        t = data.to(_check_device(device)) if device else data
        return t.requires_grad_(requires_grad) if requires_grad else t
    if isinstance(data, np.ndarray):
        return from_numpy(data, device, dtype=dtype, requires_grad=requires_grad)
    dt = check_dtype(dtype, _check_device(device), allow_half=True)
    try:
        array = np.array(data, dtype=DTYPE if dt in HALF else dt)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot make a {dt} tensor from {type(data).__name__}: {exc}") from None
    return from_numpy(array, device, dtype=dt, requires_grad=requires_grad)


def empty(shape: ShapeLike, device: str | None = None, *, dtype: DTypeLike = None) -> Tensor:
    """Uninitialised memory: read it before writing it and you get whatever was there."""
    device = _check_device(device)
    dt = check_dtype(dtype, device, allow_half=True)
    return Tensor(backend.get_backend(device).empty(_check_shape(shape), dtypes.storage(dt)), device)


def zeros(shape: ShapeLike, device: str | None = None, *, dtype: DTypeLike = None,
          requires_grad: bool = False) -> Tensor:
    device = _check_device(device)
    dt = check_dtype(dtype, device, allow_half=True)  # +0.0 is all zero bits in every format
    return Tensor(backend.get_backend(device).zeros(_check_shape(shape), dtypes.storage(dt)), device,
                  requires_grad=requires_grad)


def full(shape: ShapeLike, value: float, device: str | None = None, *, dtype: DTypeLike = None,
         requires_grad: bool = False) -> Tensor:
    return empty(shape, device, dtype=dtype).fill_(value).requires_grad_(requires_grad)


def ones(shape: ShapeLike, device: str | None = None, *, dtype: DTypeLike = None,
         requires_grad: bool = False) -> Tensor:
    return full(shape, 1.0, device, dtype=dtype, requires_grad=requires_grad)


def randn(shape: ShapeLike, device: str | None = None, seed: int | None = None, *, dtype: DTypeLike = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples, drawn on the host (the same values on every device for one seed)."""
    device = _check_device(device)
    dt = check_dtype(dtype, device, allow_half=True)
    values = np.random.default_rng(seed).standard_normal(_check_shape(shape), dtype=DTYPE)
    return from_numpy(values if dt in HALF else values.astype(dt), device, dtype=dt, requires_grad=requires_grad)


from minitorch import autograd  # noqa: E402  (autograd builds on Tensor; the operators above use it)
