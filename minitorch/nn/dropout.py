"""``Dropout``: zero each activation with probability p while training, scale the rest by 1 / (1 - p).

The mask comes from the learner's Philox (Phase 7's ``recipe.cu``; :mod:`minitorch.ops.dropout`): each
layer has its own seed and a step counter in device memory, advanced on the device by every training
forward pass, so a training step captured into a graph draws a new mask on every replay. The backward
regenerates the forward's mask instead of storing it. In eval mode (``model.eval()``), or with p = 0, it
is the identity and launches nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minitorch import autograd, backend
from minitorch.nn.module import Module
from minitorch.ops import dropout as dropout_ops
from minitorch.tensor import Tensor, _check_device

__all__ = ["Dropout", "StepCounter"]


class StepCounter:
    """A one-element int64 step counter in device memory (``array``), advanced on the device: a layer that
    draws dropout masks advances it once per training forward pass and passes it to the kernels, which read it
    there, so a training step captured into a graph draws new masks on every replay. It follows its layer to
    another device with its count."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.array: Any = dropout_ops.new_counter(device)

    @property
    def count(self) -> int:
        """The steps counted (read from the device: a synchronisation)."""
        return int(np.asarray(backend.get_backend(self.device).asnumpy(self.array))[0])

    def on(self, device: str) -> Any:
        """The counter's array on ``device`` (moved there with its count if the layer moved)."""
        if device != self.device:
            count = self.count
            self.device, self.array = device, dropout_ops.new_counter(device)
            if device == "cpu":
                self.array[0] = count
            else:
                self.array.set(np.array([count], np.int64))
        return self.array

    def advance(self, device: str) -> Any:
        """count += 1 on ``device`` (one launch); the array, for the kernels of this step."""
        array = self.on(device)
        dropout_ops.advance_(device, array)
        return array


class Dropout(Module):
    """``Dropout(p, seed=...)``: in training mode, x * keep / (1 - p) with keep ~ Bernoulli(1 - p) from
    Philox; identity in eval mode. A model made with one seed draws the same masks on every device."""

    def __init__(self, p: float = 0.5, *, seed: int = 0, device: str | None = None) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 <= p < 1 and math.isfinite(p)):
            raise ValueError(f"Dropout: p must be a probability in [0, 1), got {p!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise ValueError(f"Dropout: seed must be an integer in [0, 2**64), got {seed!r}")
        self.p, self.seed = float(p), int(seed)
        self._step = StepCounter(_check_device(device)) if self.p else None

    @property
    def steps(self) -> int:
        """How many training forward passes drew a mask (read from the device: a synchronisation)."""
        return 0 if self._step is None else self._step.count

    def next_step(self, device: str) -> Any:
        """Advance the step counter on ``device`` (a launch; on the host for cpu) and return it: the counter
        a mask of this layer's next draw reads (the materialised attention's ``attn_dropout`` draws with it)."""
        if self.p == 0:
            raise ValueError("Dropout.next_step: a Dropout with p = 0 draws no mask")
        assert self._step is not None  # p > 0
        return self._step.advance(device)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Dropout expects a minitorch Tensor, got {type(x).__name__}")
        if not self.training or self.p == 0:
            return x
        return autograd.Dropout.apply(x, self.p, self.seed, 0, self.next_step(x.device))

    def residual(self, x: Tensor, h: Tensor) -> Tensor:
        """x + self(h): a residual branch h added to x after its dropout, in one kernel while training (the same
        values as the dropout and the add)."""
        if not isinstance(h, Tensor):
            raise TypeError(f"Dropout.residual expects minitorch Tensors, got {type(h).__name__}")
        if not self.training or self.p == 0:
            return x + h
        return autograd.DropoutAdd.apply(x, h, self.p, self.seed, 0, self.next_step(h.device))

    def extra_repr(self) -> str:
        return f"p={self.p:g}"
