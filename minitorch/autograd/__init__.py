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

from minitorch.autograd.attention import AttentionSoftmax, BatchedMatMul, CausalSelfAttention, MergeHeads, SplitHeads
from minitorch.autograd.conv import Conv2d
from minitorch.autograd.dropout import Dropout, DropoutAdd
from minitorch.autograd.elementwise import Add, AddBias, Mul, ReLU, ScalarMul, Sigmoid, Sub, add
from minitorch.autograd.embedding import Embedding
from minitorch.autograd.flash import FlashSelfAttention, ScaledDotProductAttention
from minitorch.autograd.function import (
    Context,
    Function,
    enable_grad,
    host_scalar,
    is_grad_enabled,
    mark_host_value,
    no_grad,
)
from minitorch.autograd.gelu import GELU
from minitorch.autograd.layernorm import LayerNorm
from minitorch.autograd.linalg import LinearBias, MatMul, Transpose
from minitorch.autograd.loss import MSELoss
from minitorch.autograd.pooling import MaxPool2d
from minitorch.autograd.precision import Cast
from minitorch.autograd.reduce import Mean, Sum
from minitorch.autograd.shape import Reshape
from minitorch.autograd.softmax import CrossEntropy, LogSoftmax, Softmax

__all__ = [
    "Add", "AddBias", "Context", "Function", "LinearBias", "MSELoss", "MatMul", "Mean", "Mul", "ReLU", "Reshape", "ScalarMul",
    "Sigmoid", "Sub", "Sum", "Transpose", "add", "enable_grad", "host_scalar", "is_grad_enabled", "mark_host_value",
    "no_grad",
    # Phase 6
    "Conv2d", "CrossEntropy", "LogSoftmax", "MaxPool2d", "Softmax",
    # Phase 7
    "AttentionSoftmax", "BatchedMatMul", "CausalSelfAttention", "Dropout", "DropoutAdd", "Embedding", "GELU", "LayerNorm",
    "MergeHeads", "SplitHeads",
    # Phase 8a
    "Cast",
    # Phase 8b
    "FlashSelfAttention", "ScaledDotProductAttention",
]
