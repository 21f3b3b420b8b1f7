"""Tape-based autograd: Functions record themselves on the tensors they make; backward replays the tape.

A :class:`Function` has a ``forward(ctx, *args)`` that computes its output from :mod:`minitorch.ops`
primitives and saves what its backward needs in ``ctx``, and a ``backward(ctx, grad)`` that turns the
gradient of the output into one gradient per tensor argument. ``Function.apply`` runs forward and,
when recording is on and an input requires grad, sets ``output.grad_fn = ctx``: the :class:`Context`
knows the Function and its input tensors, which is all a graph traversal needs.

``Tensor.backward()`` hands the graph to the learner's ``backprop.py`` (Phase 3b): ``topological_order``
orders the tensors, ``backpropagate`` calls each ``grad_fn.backward(grad)`` from the output back and
accumulates the gradients of the leaves.

Recording stops inside ``with minitorch.no_grad():`` (an optimizer step, evaluation, backward itself).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from minitorch import ops
from minitorch.tensor import Tensor

__all__ = [
    "Add", "AddBias", "Context", "Function", "MSELoss", "MatMul", "Mean", "Mul", "ReLU", "Reshape", "ScalarMul",
    "Sigmoid", "Sub", "Sum", "Transpose", "add", "enable_grad", "is_grad_enabled", "no_grad",
]

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

    def __init__(self, function: type[Function], inputs: tuple[Tensor, ...]) -> None:
        self.function = function
        self.inputs = inputs
        self.needs_input_grad = tuple(t.requires_grad for t in inputs)
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
        inputs = tuple(a for a in args if isinstance(a, Tensor))
        ctx = Context(cls, inputs)
        output = cls.forward(ctx, *args)
        if is_grad_enabled() and any(ctx.needs_input_grad):
            output._requires_grad = True
            output.grad_fn = ctx
        return output


# ---------------------------------------------------------------- the Functions of minitorch's operators


def add(a: Tensor, b: Tensor) -> Tensor:
    """``a + b``: elementwise for equal shapes; a (cols,) vector is added to every row of a (rows, cols) matrix."""
    if a.shape == b.shape:
        return Add.apply(a, b)
    if a.ndim == 2 and b.shape == (a.shape[1],):
        return AddBias.apply(a, b)
    if b.ndim == 2 and a.shape == (b.shape[1],):
        return AddBias.apply(b, a)
    raise ValueError(f"+: shapes {a.shape} and {b.shape} do not match; minitorch adds tensors of one shape, "
                     f"or a (cols,) vector to every row of a (rows, cols) matrix")


class Add(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        return ops.add(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, grad


class AddBias(Function):
    """x (rows, cols) + bias (cols,): the bias is added to every row."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, bias: Tensor) -> Tensor:
        return ops.add_bias(x, bias)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        # Each bias element was added to a whole column: its gradient is that column's sum.
        return grad, ops.bias_grad(grad) if ctx.needs_input_grad[1] else None


class Sub(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        if a.shape != b.shape:
            raise ValueError(f"-: shapes {a.shape} and {b.shape} differ; minitorch subtracts tensors of one shape")
        return ops.add(a, ops.scalar_mul(b, -1.0))

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        return grad, ops.scalar_mul(grad, -1.0) if ctx.needs_input_grad[1] else None


class Mul(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return ops.mul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        return (ops.mul(grad, b) if ctx.needs_input_grad[0] else None,
                ops.mul(grad, a) if ctx.needs_input_grad[1] else None)


class ScalarMul(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor, s: float) -> Tensor:
        ctx.scale = s
        return ops.scalar_mul(a, s)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.scalar_mul(grad, ctx.scale)


class MatMul(Function):
    """C = A @ B: dA = dC @ B^T, dB = A^T @ dC."""

    @staticmethod
    def forward(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return ops.matmul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        return (ops.matmul(grad, ops.transpose(b)) if ctx.needs_input_grad[0] else None,
                ops.matmul(ops.transpose(a), grad) if ctx.needs_input_grad[1] else None)


class Transpose(Function):
    @staticmethod
    def forward(ctx: Context, a: Tensor) -> Tensor:
        return ops.transpose(a)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.transpose(grad)


class ReLU(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)  # the gradient passes where the input was positive
        return ops.relu(x)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return ops.relu_backward(x, grad)


class Sigmoid(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        y = ops.sigmoid(x)
        ctx.save_for_backward(y)  # sigmoid'(x) = y (1 - y): the output is all the backward needs
        return y

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return ops.sigmoid_backward(y, grad)


class Sum(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        ctx.shape = x.shape
        return ops.sum(x)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.expand(grad, ctx.shape)


class Mean(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        if x.size == 0:
            raise ValueError(f"mean: the mean of no elements is undefined (shape {x.shape})")
        ctx.shape, ctx.n = x.shape, x.size
        return ops.scalar_mul(ops.sum(x), 1.0 / x.size)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.expand(ops.scalar_mul(grad, 1.0 / ctx.n), ctx.shape)


class Reshape(Function):
    @staticmethod
    def forward(ctx: Context, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        ctx.shape = x.shape
        return ops.reshape(x, shape)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> Tensor:
        return ops.reshape(grad, ctx.shape)


class MSELoss(Function):
    """mean((pred - target)^2): a 0-d tensor."""

    @staticmethod
    def forward(ctx: Context, pred: Tensor, target: Tensor) -> Tensor:
        ctx.save_for_backward(pred, target)
        return ops.mse_loss(pred, target)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        pred, target = ctx.saved_tensors
        # The kernel takes the upstream gradient as a float: known on the host for loss.backward()'s
        # seed, else one 4-byte copy from the device.
        g_pred = ops.mse_backward(pred, target, host_scalar(grad))
        return (g_pred if ctx.needs_input_grad[0] else None,
                ops.scalar_mul(g_pred, -1.0) if ctx.needs_input_grad[1] else None)

