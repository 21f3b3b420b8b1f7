"""Helpers shared by the graded tests of Phases 3a and 3b (not a test module)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import minitorch
from grader import checks
from grader.checks import GradeError, expect_error, launch_checked  # noqa: F401 - re-exported to the phase-3 tests


def device() -> str:
    return minitorch.get_device()


def on_kernel(file: str, function: str, *values: Any) -> Any:
    """A pytest.param that names the kernel it launches (reported when the test crashes or hangs)."""
    return pytest.param(*values, marks=pytest.mark.kernel(file, function), id="-".join(map(str, values)))





def host(shape: int | tuple[int, ...], *salt: object, scale: float = 1.0) -> np.ndarray:
    """Random float32 values for this run's seed."""
    return (checks.rng(*salt, shape).standard_normal(shape) * scale).astype(np.float32)


def rel_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max |expected| (as minitorch.gradcheck.relative_error)."""
    from minitorch.gradcheck import relative_error

    return relative_error(got, expected)


# ---------------------------------------------------------------- the XOR network (Phase 3b's deliverable)

XOR_X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
XOR_Y = np.array([[0], [1], [1], [0]], np.float32)
XOR_EPOCHS, XOR_LR, XOR_MOMENTUM = 5000, 0.01, 0.9


def train_xor_parameters(seed: int, epochs: int = XOR_EPOCHS) -> tuple[list[float], list[np.ndarray]]:
    """``train_xor``, returning (its losses, the trained weights and biases: hidden (2, 4), (4,), out (4, 1), (1,)).
    Run in the learner's process when its code is isolated (grader.learner_process.run_in_learner_process): the
    judge scores the weights with its own forward pass (:func:`xor_forward`)."""
    losses, _, model = train_xor(seed, epochs, keep_model=True)
    return losses, [p.numpy() for p in (model.hidden.weight, model.hidden.bias, model.out.weight, model.out.bias)]


def xor_forward(params: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The XOR network's predictions on the four inputs and their mean squared error, in float64 NumPy."""
    w1, b1, w2, b2 = (np.asarray(p, np.float64) for p in params)
    if [p.shape for p in (w1, b1, w2, b2)] != [(2, 4), (4,), (4, 1), (1,)]:
        raise ValueError(f"XOR parameters of shapes {[np.shape(p) for p in params]}, not (2, 4), (4,), (4, 1), (1,)")
    hidden = 1.0 / (1.0 + np.exp(-(XOR_X.astype(np.float64) @ w1 + b1)))
    pred = (hidden @ w2 + b2).ravel()
    return pred, float(np.mean((pred - XOR_Y.ravel()) ** 2))


def train_xor(seed: int, epochs: int = XOR_EPOCHS, keep_model: bool = False) -> tuple:
    """Train Linear(2, 4) -> Sigmoid -> Linear(4, 1) as the lab does; returns (losses at the first, the middle
    and the last epoch, predictions), and the model if `keep_model`.

    The step (forward, your backprop, your SGD) is captured once into a graph and replayed: every epoch runs
    the same launches of your kernels, without re-running the Python around them (5 times faster on the
    emulator). A launcher that cannot be captured (it copies to or from the host) is trained eagerly instead.
    """
    from minitorch import functional, graph, nn, optim

    class XORNet(nn.Module):
        def __init__(self) -> None:
            self.hidden = nn.Linear(2, 4, seed=seed)
            self.out = nn.Linear(4, 1, seed=seed + 1)

        def forward(self, x):
            return self.out(self.hidden(x).sigmoid())

    model = XORNet()
    opt = optim.SGD(model.parameters(), lr=XOR_LR, momentum=XOR_MOMENTUM)
    x, y = minitorch.tensor(XOR_X), minitorch.tensor(XOR_Y)

    def step():
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    kept = (0, epochs // 2, epochs - 1)
    losses = []
    try:
        captured = graph.capture(step)
    except Exception:  # noqa: BLE001 - a launcher that needs the host: train without a graph
        captured = None
    for epoch in range(epochs):
        if captured is not None:
            captured.replay()
            loss = captured.output
        else:
            loss = step()
        if epoch in kept:
            losses.append(loss.item())
    with minitorch.no_grad():
        pred = model(x).numpy().ravel()
    return (losses, pred, model) if keep_model else (losses, pred)
