"""Training steps of several GPTs on the same batches, for the tests that compare a captured step with eager ones
(test_transformer.py, test_flat_optim.py): model ``i``'s step reads its own batch buffers, which ``feed`` fills
with one batch for all of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import minitorch
from minitorch import functional as F  # noqa: N812 (PyTorch's name)
from minitorch import optim


def gpt_steps(models: Sequence, opts: Sequence, b: int, t: int, vocab: int, device: str,
              clip: float = 0.5) -> tuple[Callable[[int], minitorch.Tensor], Callable[[np.random.Generator], None]]:
    """(step(i): loss, backward, clipping and the optimizer's step of model i on its buffers; feed(rng): one random
    batch into every model's buffers)."""
    xs = [minitorch.zeros((b, t), device=device, dtype="int32") for _ in models]
    ys = [minitorch.zeros((b, t), device=device, dtype="int32") for _ in models]

    def step(i: int) -> minitorch.Tensor:
        loss = F.cross_entropy(models[i](xs[i]).reshape(b * t, vocab), ys[i].reshape(b * t))
        opts[i].zero_grad()
        loss.backward()
        optim.clip_grad_norm_(models[i].parameters(), clip)
        opts[i].step()
        return loss

    def feed(rng: np.random.Generator) -> None:
        x, y = rng.integers(0, vocab, (b, t)).astype(np.int32), rng.integers(0, vocab, (b, t)).astype(np.int32)
        for xb, yb in zip(xs, ys, strict=True):
            xb.copy_from(x)
            yb.copy_from(y)

    return step, feed
