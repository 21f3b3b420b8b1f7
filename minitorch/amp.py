"""Mixed-precision training (Phase 8a): ``autocast`` and ``GradScaler``.

``autocast(dtype)`` makes the products of float32 tensors (``ops.matmul``, so ``@``, ``nn.Linear`` and
whatever multiplies through ``MatMul``) run on the learner's tensor-core launcher ``hgemm.py``: the fp32
operands (master weights, activations) are rounded to float16 or bfloat16 by the learner's ``convert.py``,
multiplied with fp32 accumulation, and the product comes out float32. The backward products run in the
same 16-bit dtype (recorded by the forward), and the gradients come out float32, into the float32 master
weights and the optimizer's float32 state. Everything else (elementwise ops, reductions, softmax,
LayerNorm, losses, the batched products of attention) stays float32.

The setting itself lives in :mod:`minitorch.ops.precision` (ops read it; they never import this module).

``GradScaler`` keeps float16's small range from flushing gradients to zero: the loss is multiplied by a
scale before backward, the gradients divided by it before the step, and a step whose gradients hold an
inf or a NaN (the scale was too large: something overflowed) is skipped and the scale lowered.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from minitorch import backend, dtypes, ops
from minitorch.tensor import DTYPE, HALF, Tensor

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
        scaler.step(optimizer)   # unscales the gradients; skips the step if one is inf/NaN
        scaler.update()          # adjusts the scale

    The check runs on the device: each gradient, unscaled, is multiplied by 0 (inf·0 and NaN·0 are NaN,
    every finite value gives 0) and summed (the learner's elementwise and reduction kernels), and the
    sums are added; the host reads that one number per step, not one per parameter. That read is also
    why a step with a GradScaler is not capturable in a graph (:mod:`minitorch.graph`): whether the
    optimizer runs is decided on the host. The scale itself is a host float (it changes only in
    ``update``), so ``scale(loss)`` and the unscaling are launches with a scalar argument.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        for name, value, ok in (("init_scale", init_scale, init_scale > 0),
                                ("growth_factor", growth_factor, growth_factor > 1),
                                ("backoff_factor", backoff_factor, 0 < backoff_factor < 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok:
                raise ValueError(f"GradScaler: {name} must be a finite number "
                                 f"{'> 1' if name == 'growth_factor' else 'in (0, 1)' if name == 'backoff_factor' else '> 0'}"
                                 f", got {value!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive integer, got {growth_interval!r}")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0  # good steps in a row since the scale last changed
        self._enabled = bool(enabled)
        # id(optimizer) -> the inf/NaN sum of its unscaled gradients (a 0-d device tensor; None: no gradient),
        # replaced by the host's answer once read
        self._found: dict[int, Tensor | bool | None] = {}
        self._stepped: dict[int, bool] = {}  # id(optimizer) -> whether step() ran (or skipped) this iteration

    # --- the loop -------------------------------------------------------------------------------
    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current loss scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, loss: Tensor) -> Tensor:
        """``loss`` times the scale (recorded: its backward multiplies the gradients by the scale)."""
        if not isinstance(loss, Tensor):
            raise TypeError(f"GradScaler.scale takes a Tensor (the loss), got {type(loss).__name__}")
        if loss.dtype != DTYPE:
            raise TypeError(f"GradScaler.scale: expected a float32 loss, got {loss.dtype} (losses stay float32 "
                            f"under autocast)")
        return loss * self._scale if self._enabled else loss

    def unscale_(self, optimizer: Any) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place, and note on the device whether any is
        inf or NaN. Call it before clipping gradients; ``step`` calls it if you did not."""
        if not self._enabled:
            return
        key = id(optimizer)
        if key in self._found:
            raise RuntimeError("GradScaler.unscale_ was already called on this optimizer since the last update()")
        inverse = 1.0 / self._scale
        total: Tensor | None = None
        with _no_grad():
            for p in _params(optimizer):
                if p.grad is None:
                    continue
                if p.grad.dtype != DTYPE:
                    raise TypeError(f"GradScaler: expected float32 gradients (of float32 master weights), got "
                                    f"{p.grad.dtype}")
                p.grad = ops.scalar_mul(p.grad, inverse)  # exact while the scale is a power of two
                flag = ops.sum(ops.scalar_mul(p.grad, 0.0))  # NaN iff an element is inf or NaN, else 0
                total = flag if total is None else ops.add(total, flag)
        self._found[key] = total

    def step(self, optimizer: Any) -> bool:
        """Unscale (unless done), then ``optimizer.step()`` unless a gradient is inf or NaN.

        Returns whether the step ran. One 4-byte read from the device (the inf/NaN sum)."""
        if not self._enabled:
            optimizer.step()
            return True
        key = id(optimizer)
        if self._stepped.get(key):
            raise RuntimeError("GradScaler.step was already called on this optimizer since the last update()")
        if key not in self._found:
            self.unscale_(optimizer)
        found = self._found[key]
        if isinstance(found, Tensor) and backend.get_backend(found.device).capturing:
            raise RuntimeError("GradScaler.step cannot be captured in a graph: whether the optimizer steps is "
                               "decided on the host, from the inf/NaN check read back from the device. Capture "
                               "the forward and backward only, or train in bfloat16 (no scaler needed)")
        found_inf = self._found_inf(key)
        self._stepped[key] = True
        if not found_inf:
            optimizer.step()
        return not found_inf

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after the iteration's steps: lower it if any of them found an inf or NaN,
        raise it after ``growth_interval`` good iterations in a row (or set it to ``new_scale``)."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, bool) or not isinstance(new_scale, (int, float)) or not new_scale > 0:
                raise ValueError(f"GradScaler.update: new_scale must be a positive number, got {new_scale!r}")
            self._scale = float(new_scale)
            self._growth_tracker = 0
        else:
            if not self._found:
                raise RuntimeError("GradScaler.update: no step() or unscale_() since the last update()")
            found_inf = any([self._found_inf(key) for key in list(self._found)])
            if found_inf:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._found.clear()
        self._stepped.clear()

    def _found_inf(self, key: int) -> bool:
        """Whether the optimizer's gradients held an inf or NaN: one read from the device, then remembered."""
        found = self._found[key]
        if isinstance(found, Tensor):
            found = self._found[key] = not math.isfinite(found.item())
        return bool(found)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, float | int]:
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = set(self.state_dict())
        if set(state) != expected:
            raise KeyError(f"GradScaler.load_state_dict: expected the keys {sorted(expected)}, got {sorted(state)}")
        self._scale = float(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])


def _params(optimizer: Any) -> list[Tensor]:
    params = getattr(optimizer, "params", None)
    if params is None:
        raise TypeError(f"GradScaler: expected a minitorch optimizer (with .params), got {type(optimizer).__name__}")
    return list(params)


def _no_grad() -> Any:
    from minitorch.autograd import no_grad  # amp sits beside autograd; imported here to keep amp light

    return no_grad()
