"""The tape's machinery: recording on and off, Context, Function, and gradients whose value the host knows."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from minitorch.tensor import Tensor

# ---------------------------------------------------------------- recording on / off

_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether Functions record themselves (False inside ``no_grad()``)."""
    return getattr(_state, "enabled", True)


def _set_grad_enabled(enabled: bool) -> bool:
    previous = is_grad_enabled()
    _state.enabled = enabled
    return previous


F = TypeVar("F", bound=Callable[..., Any])


class _GradMode(contextlib.ContextDecorator):
    enabled = True

    def __enter__(self) -> None:
        self._previous = _set_grad_enabled(self.enabled)

    def __exit__(self, *exc: object) -> None:
        _set_grad_enabled(self._previous)


class no_grad(_GradMode):  # noqa: N801 (PyTorch's name)
    """``with minitorch.no_grad():`` (or ``@minitorch.no_grad()``): operations inside record nothing."""

    enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Turn recording back on inside a ``no_grad`` block."""

    enabled = True


# ---------------------------------------------------------------- gradients whose value the host knows

# ``loss.backward()`` starts from a gradient of ones that the host made: a Function whose kernel takes
# the upstream gradient as a float (MSELoss) reads it from here instead of copying it back from the
# device, which would wait for the GPU on every step and cannot be captured into a graph.
_host_values: weakref.WeakKeyDictionary[Tensor, float] = weakref.WeakKeyDictionary()


def mark_host_value(t: Tensor, value: float) -> Tensor:
    """Remember that every element of ``t`` equals ``value`` (set by whoever filled it)."""
    _host_values[t] = value
    return t


def host_value(t: Tensor) -> float | None:
    """The value every element of ``t`` is known on the host to hold, or None."""
    return _host_values.get(t)


def host_scalar(t: Tensor) -> float:
    """The value of a single-element tensor: known on the host, else one 4-byte copy from the device."""
    known = _host_values.get(t)
    return known if known is not None else t.item()


# ---------------------------------------------------------------- Context and Function


class Context:
    """What one recorded operation keeps for its backward: the Function, its inputs, saved tensors.

    ``inputs`` are the tensor arguments of the forward, in order; ``backward(grad)`` returns one
    gradient (or None) for each of them. Functions may keep other values as attributes (``ctx.scale``).
    """

    def __init__(self, function: type[Function], inputs: tuple[Tensor, ...],
                 needs_input_grad: tuple[bool, ...] | None = None) -> None:
        self.function = function
        self.inputs = inputs
        self.needs_input_grad = (needs_input_grad if needs_input_grad is not None
                                 else tuple([t._requires_grad for t in inputs]))
        self._saved: tuple[Tensor, ...] = ()

    def __repr__(self) -> str:
        return f"<{self.function.__name__} context: {len(self.inputs)} input(s)>"

    def save_for_backward(self, *tensors: Tensor) -> None:
        """Keep tensors the backward needs (e.g. the forward's input or output)."""
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:
        return self._saved

    def backward(self, grad: Tensor) -> tuple[Tensor | None, ...]:
        """Run the Function's backward on ``grad`` (the gradient of its output): one gradient per input."""
        grads = self.function.backward(self, grad)
        if not isinstance(grads, tuple):
            grads = (grads,)
        name = self.function.__name__
        if len(grads) != len(self.inputs):
            raise RuntimeError(f"{name}.backward returned {len(grads)} gradient(s) for {len(self.inputs)} input(s)")
        for i, (g, t) in enumerate(zip(grads, self.inputs, strict=True)):
            if g is not None and (not isinstance(g, Tensor) or g.shape != t.shape):
                got = g.shape if isinstance(g, Tensor) else type(g).__name__
                raise RuntimeError(f"{name}.backward: the gradient of input {i} must have the input's shape "
                                   f"{t.shape}, got {got}")
        return grads


class Function:
    """An operation autograd can differentiate. Subclass it with two static methods:

    - ``forward(ctx, *args) -> Tensor``: compute the output (with :mod:`minitorch.ops`), save what the
      backward needs with ``ctx.save_for_backward(...)`` or as attributes of ``ctx``;
    - ``backward(ctx, grad) -> Tensor | tuple``: one gradient per tensor argument of forward, in order
      (None for one that needs none).

    Call it with ``MyFunction.apply(*args)``.
    """

    @staticmethod
    def forward(ctx: Context, *args: Any) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor | None | tuple[Tensor | None, ...]:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        inputs = tuple([a for a in args if isinstance(a, Tensor)])
        needs = tuple([t._requires_grad for t in inputs])
        ctx = Context(cls, inputs, needs)
        output = cls.forward(ctx, *args)
        if True in needs and getattr(_state, "enabled", True):
            output._requires_grad = True
            output.grad_fn = ctx
        return output

    @classmethod
    def apply2(cls, a: Tensor, b: Tensor) -> Tensor:
        """``apply`` for the common call with two tensor arguments (``a + b``, ``a * b``, ``a @ b``),
        without building argument lists."""
        needs = (a._requires_grad, b._requires_grad)
        ctx = Context(cls, (a, b), needs)
        output = cls.forward(ctx, a, b)
        if (needs[0] or needs[1]) and getattr(_state, "enabled", True):
            output._requires_grad = True
            output.grad_fn = ctx
        return output
