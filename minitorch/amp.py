"""Mixed-precision training (Phase 8a): ``autocast`` and ``GradScaler``.

``autocast(dtype)`` makes the products of float32 tensors (``ops.matmul``, so ``@``, ``nn.Linear`` and
whatever multiplies through ``MatMul``) run on the learner's tensor-core launcher ``hgemm.py``: the fp32
operands (master weights, activations) are rounded to float16 or bfloat16 by the learner's ``convert.py``,
multiplied with fp32 accumulation, and the product comes out float32. The backward products run in the
same 16-bit dtype (recorded by the forward), and the gradients come out float32, into the float32 master
weights and the optimizer's float32 state. Everything else (elementwise ops, reductions, softmax,
LayerNorm, losses) stays float32. The batched products inside attention (``ops.bmm``: one ``hgemm`` launch for
the whole batch, grid z = the batch index) and the convolutions (Phase 6's im2col layout kernels around one ``hgemm`` product per
pass) run the same way.

The setting itself lives in :mod:`minitorch.ops.precision` (ops read it; they never import this module).

``GradScaler`` keeps float16's small range from flushing gradients to zero: the loss is multiplied by a
scale before backward, the gradients divided by it before the step, and a step whose gradients hold an
inf or a NaN (the scale was too large: something overflowed) is skipped and the scale lowered, all on the
device (the learner's ``scaler.py``), so that a step with a scaler is capturable in a graph.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from minitorch import backend, dtypes, ops
from minitorch.tensor import DTYPE, HALF, Tensor, tensor

__all__ = ["GradScaler", "autocast"]


class autocast(contextlib.ContextDecorator):  # noqa: N801 (PyTorch's name)
    """``with minitorch.amp.autocast("bfloat16"):`` (or as a decorator): float32 products in 16 bits.

    ``dtype``: ``"bfloat16"`` (float32's range: no loss scaling needed) or ``"float16"`` (more mantissa,
    a range up to 65504: use a :class:`GradScaler`). ``enabled=False`` turns autocast off inside an
    enabled region (PyTorch's semantics). Regions nest; leaving one restores the setting it found.
    """

    def __init__(self, dtype: Any = "bfloat16", enabled: bool = True) -> None:
        try:
            dt = dtypes.resolve(dtype)
        except TypeError:
            dt = None
        if dt not in HALF:
            raise ValueError(f"autocast: dtype must be 'bfloat16' or 'float16', got {dtype!r}")
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: enabled must be a bool, got {type(enabled).__name__}")
        self.dtype = dt
        self.enabled = enabled
        self._previous: list[Any] = []

    def __enter__(self) -> autocast:
        self._previous.append(ops.set_autocast_dtype(self.dtype if self.enabled else None))
        return self

    def __exit__(self, *exc: object) -> None:
        ops.set_autocast_dtype(self._previous.pop())


class GradScaler:
    """Dynamic loss scaling for float16 training, with PyTorch's defaults: ``init_scale`` 2¹⁶, the scale
    doubled (``growth_factor`` 2.0) after ``growth_interval`` 2000 steps in a row without an inf or NaN
    gradient, halved (``backoff_factor`` 0.5) at each step that has one.

    Use::

        scaler = GradScaler()
        with autocast("float16"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)   # unscales the gradients; a step with an inf/NaN gradient is undone
        scaler.update()          # adjusts the scale

    Everything runs on the device (the learner's ``scaler.py`` of Phase 8a): the scale, its inverse, the
    count of good steps and each optimizer's inf/NaN flag are one-element tensors there; unscaling sets the
    flag; ``step`` copies the parameters and the optimizer's state, runs the optimizer, and copies them
    back if the flag is set; ``update`` changes the scale from the flag. The host decides nothing, so a
    training step with a scaler can be captured in a graph (:mod:`minitorch.graph`) and every replay skips
    or takes its own step. Outside a capture ``step`` still returns whether the step was taken (one read
    from the device); inside one it returns None.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, device: str | None = None) -> None:
        for name, value, ok in (("init_scale", init_scale, init_scale > 0),
                                ("growth_factor", growth_factor, growth_factor > 1),
                                ("backoff_factor", backoff_factor, 0 < backoff_factor < 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok:
                raise ValueError(f"GradScaler: {name} must be a finite number "
                                 f"{'> 1' if name == 'growth_factor' else 'in (0, 1)' if name == 'backoff_factor' else '> 0'}"
                                 f", got {value!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive integer, got {growth_interval!r}")
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._enabled = bool(enabled)
        # the device state: made now, on the device of the training (a capture may not copy values in)
        self._device = device or backend.get_device()
        self._scale_t = _one(self._device, init_scale)
        self._inv_t = _one(self._device, 1.0 / init_scale)
        self._good_t = _one(self._device, 0.0)  # good steps in a row since the scale last changed
        self._ones = _one(self._device, 1.0)  # an always-set flag: restore_if_found as a plain copy
        self._flags: dict[int, Tensor] = {}  # id(optimizer) -> its inf/NaN flag (made once, reused)
        self._saved: dict[int, list[tuple[Any, Any]]] = {}  # id(optimizer) -> (buffer, its copy) pairs
        self._unscaled: set[int] = set()  # optimizers unscaled since the last update()
        self._stepped: set[int] = set()  # optimizers stepped since the last update()

    # --- the loop -------------------------------------------------------------------------------
    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current loss scale (1.0 when disabled): read from the device, so not inside a capture."""
        if not self._enabled:
            return 1.0
        self._not_capturing("get_scale")
        return float(self._scale_t.numpy().reshape(-1)[0])

    def scale(self, loss: Tensor) -> Tensor:
        """``loss`` times the scale (recorded: its backward multiplies the gradients by the scale)."""
        if not isinstance(loss, Tensor):
            raise TypeError(f"GradScaler.scale takes a Tensor (the loss), got {type(loss).__name__}")
        if loss.dtype != DTYPE:
            raise TypeError(f"GradScaler.scale: expected a float32 loss, got {loss.dtype} (losses stay float32 "
                            f"under autocast)")
        if not self._enabled:
            return loss
        if loss.size != 1:
            raise ValueError(f"GradScaler.scale: expected the loss, one value; got shape {loss.shape}")
        self._same_device(loss.device)
        return loss * self._scale_t.reshape(loss.shape)

    def unscale_(self, optimizer: Any) -> None:
        """Multiply ``optimizer``'s gradients by 1/scale, in place, setting its flag on the device if any
        is inf or NaN. Call it before clipping gradients; ``step`` calls it if you did not."""
        if not self._enabled:
            return
        key = id(optimizer)
        if key in self._unscaled:
            raise RuntimeError("GradScaler.unscale_ was already called on this optimizer since the last update()")
        params = _params(optimizer)
        flag = self._flags.get(key)
        if flag is None:
            flag = self._flags[key] = _one(self._device, 0.0, allow_capture=True)
        flag.fill_(0.0)
        for p in params:
            if p.grad is None:
                continue
            if p.grad.dtype != DTYPE:
                raise TypeError(f"GradScaler: expected float32 gradients (of float32 master weights), got "
                                f"{p.grad.dtype}")
            self._same_device(p.grad.device)
            ops.unscale_check_(p.grad, self._inv_t, flag)
        self._unscaled.add(key)

    def step(self, optimizer: Any) -> bool | None:
        """Unscale (unless done), then ``optimizer.step()``, undone on the device if a gradient was inf or
        NaN. Returns whether the step was taken (one read from the device), or None inside a capture."""
        if not self._enabled:
            optimizer.step()
            return True
        key = id(optimizer)
        if key in self._stepped:
            raise RuntimeError("GradScaler.step was already called on this optimizer since the last update()")
        if key not in self._unscaled:
            self.unscale_(optimizer)
        flag = self._flags[key]
        pairs = self._saved.get(key)
        if pairs is None:  # the copies: made once (in a capture, once for every replay)
            pairs = self._saved[key] = [(a, _empty_like(self._device, a)) for a in _state_arrays(optimizer)]
        for buffer, copy in pairs:
            ops.restore_if_found_(self._device, copy, buffer, self._ones)  # copy = buffer
        optimizer.step()
        for buffer, copy in pairs:
            ops.restore_if_found_(self._device, buffer, copy, flag)  # undone if the flag is set
        self._stepped.add(key)
        if backend.get_backend(self._device).capturing:
            return None
        return float(flag.numpy().reshape(-1)[0]) == 0.0

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after the iteration's steps, on the device: lower it if any of them found an
        inf or NaN, raise it after ``growth_interval`` good iterations in a row (or set it to ``new_scale``)."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, bool) or not isinstance(new_scale, (int, float)) or not new_scale > 0:
                raise ValueError(f"GradScaler.update: new_scale must be a positive number, got {new_scale!r}")
            self._scale_t.fill_(float(new_scale))
            self._inv_t.fill_(1.0 / float(new_scale))
            self._good_t.fill_(0.0)
        else:
            if not self._unscaled:
                raise RuntimeError("GradScaler.update: no step() or unscale_() since the last update()")
            flags = [self._flags[key] for key in self._unscaled]
            found = flags[0]
            for other in flags[1:]:  # any optimizer's inf/NaN lowers the scale: the sum is non-zero
                found = ops.add(found, other)
            ops.update_scale_(self._scale_t, self._inv_t, self._good_t, found, self._growth_factor,
                              self._backoff_factor, self._growth_interval)
        self._unscaled.clear()
        self._stepped.clear()

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, float | int]:
        self._not_capturing("state_dict")
        return {"scale": float(self._scale_t.numpy().reshape(-1)[0]), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._good_t.numpy().reshape(-1)[0])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        if set(state) != expected:
            raise KeyError(f"GradScaler.load_state_dict: expected the keys {sorted(expected)}, got {sorted(state)}")
        self._scale_t.fill_(float(state["scale"]))
        self._inv_t.fill_(1.0 / float(state["scale"]))
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._good_t.fill_(float(int(state["_growth_tracker"])))

    # --- checks ---------------------------------------------------------------------------------
    def _same_device(self, device: str) -> None:
        if device != self._device:
            raise ValueError(f"GradScaler: its state lives on {self._device!r} (the device when it was made, or "
                             f"device=), the training on {device!r}: make it with device={device!r}")

    def _not_capturing(self, what: str) -> None:
        if self._device != "cpu" and backend.get_backend(self._device).capturing:
            raise RuntimeError(f"GradScaler.{what} reads the scale back from the device: not inside a graph "
                               f"capture (call it between replays)")


def _one(device: str, value: float, allow_capture: bool = False) -> Tensor:
    """A one-element float32 tensor holding ``value`` on ``device``."""
    if allow_capture and device != "cpu" and backend.get_backend(device).capturing:
        t = Tensor(backend.get_backend(device).empty((1,), DTYPE), device)
        return t.fill_(value)  # a fill launch: captured, replayed
    return tensor(np.array([value], DTYPE), device)


def _empty_like(device: str, array: Any) -> Any:
    if device == "cpu":
        return np.empty_like(array)
    return backend.get_backend(device).empty(array.shape, array.dtype)


def _state_arrays(optimizer: Any) -> list[Any]:
    """Every array a step of ``optimizer`` may change: its parameters and every device array (or tensor)
    reachable from its attributes (momentum, Adam's m, v and step count...), gradients excepted."""
    found: dict[int, Any] = {}
    grads = {id(p.grad) for p in _params(optimizer) if p.grad is not None}

    def visit(value: Any, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(value, Tensor):
            if id(value) not in grads:
                found.setdefault(id(value.data), value.data)
        elif backend.is_device_array(value) or isinstance(value, np.ndarray):
            found.setdefault(id(value), value)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v, depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v, depth + 1)
        elif type(value).__module__.startswith("minitorch.optim"):
            for v in vars(value).values():
                visit(v, depth + 1)

    for p in _params(optimizer):
        found.setdefault(id(p.data), p.data)
    for name, value in vars(optimizer).items():
        if name != "params":
            visit(value, 0)
    return list(found.values())


def _params(optimizer: Any) -> list[Tensor]:
    params = getattr(optimizer, "params", None)
    if params is None:
        raise TypeError(f"GradScaler: expected a minitorch optimizer (with .params), got {type(optimizer).__name__}")
    return list(params)


def _no_grad() -> Any:
    from minitorch.autograd import no_grad  # amp sits beside autograd; imported here to keep amp light

    return no_grad()
