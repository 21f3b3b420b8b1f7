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

__all__ = ["Dropout"]


class Dropout(Module):
    """``Dropout(p, seed=...)``: in training mode, x * keep / (1 - p) with keep ~ Bernoulli(1 - p) from
    Philox; identity in eval mode. A model made with one seed draws the same masks on every device."""

    def __init__(self, p: float = 0.5, *, seed: int = 0, device: str | None = None) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 <= p < 1 and math.isfinite(p)):
            raise ValueError(f"Dropout: p must be a probability in [0, 1), got {p!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise ValueError(f"Dropout: seed must be an integer in [0, 2**64), got {seed!r}")
        self.p, self.seed = float(p), int(seed)
        self._device = _check_device(device)
        self._step: Any = dropout_ops.new_counter(self._device) if self.p else None

    @property
    def steps(self) -> int:
        """How many training forward passes drew a mask (read from the device: a synchronisation)."""
        if self._step is None:
            return 0
        return int(np.asarray(backend.get_backend(self._device).asnumpy(self._step))[0])

    def _counter_on(self, device: str) -> Any:
        if device != self._device:  # the model moved: the counter follows it, with its count
            count = self.steps
            self._device, self._step = device, dropout_ops.new_counter(device)
            if device == "cpu":
                self._step[0] = count
            else:
                self._step.set(np.array([count], np.int64))
        return self._step

    def next_step(self, device: str) -> Any:
        """Advance the step counter on ``device`` (a launch; on the host for cpu) and return it: the counter
        a mask of this layer's next draw reads (the materialised attention's ``attn_dropout`` draws with it)."""
        if self.p == 0:
            raise ValueError("Dropout.next_step: a Dropout with p = 0 draws no mask")
        step = self._counter_on(device)
        dropout_ops.advance_(device, step)
        return step

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"Dropout expects a minitorch Tensor, got {type(x).__name__}")
        if not self.training or self.p == 0:
            return x
        return autograd.Dropout.apply(x, self.p, self.seed, 0, self.next_step(x.device))

    def extra_repr(self) -> str:
        return f"p={self.p:g}"
