"""Graphs: capture a training step once, replay it with one call.

A training step on a small network is dozens of tiny kernels; launching each from Python costs more
than running it. A graph records the step's launches once and replays all of them at the price of
one launch: on ``cuda`` through CUDA Graphs (CuPy's stream capture), on ``emu`` by recording the
launches and running them again in order, so the same code runs on both devices::

    x, y = minitorch.tensor(X), minitorch.tensor(Y)     # static inputs: refill them between replays

    def step():
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step_graph = minitorch.graph.capture(step)         # records; the step has not run yet
    for _ in range(epochs):
        step_graph.replay()                            # runs the whole step
    print(step_graph.output.item())                    # the loss of the last replay

While capturing, nothing runs: the step may not read a value back to the host (``.item()``,
``.numpy()``) or copy one in (``minitorch.tensor``); make its inputs before the capture and copy new
data into them (``Tensor.copy_from``) between replays. Every tensor the step allocates is allocated
once, during the capture, and reused by every replay. State that a step would create on its first
call (an optimizer's buffers, zeroed) would be zeroed again by every replay: create it before the
capture (minitorch's optimizers do, in their constructor) or run the step once before capturing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from minitorch import allocator, backend, kernels

__all__ = ["Graph", "capture"]

T = TypeVar("T")


class Graph(Generic[T]):
    """A captured piece of device work: :meth:`replay` runs it again; :attr:`output` is what the
    captured function returned (its tensors hold the results of the latest replay)."""

    def __init__(self, device: str, raw: Any, output: T, launches: list[kernels.Launch],
                 held: list[Any] | None = None) -> None:
        self.device = device
        self.output = output
        self._raw = raw
        # Every array a recorded kernel uses must outlive the graph, which keeps raw pointers to them;
        # so must the blocks freed into the caching pool during the capture (minitorch.allocator).
        self._launches = launches
        self._held = held or []

    @property
    def launches(self) -> int:
        """How many of the learner's kernels one replay runs."""
        return len(self._launches)

    def replay(self) -> None:
        """Run the captured work again (asynchronously on a GPU, like any launch)."""
        self._raw.launch()

    def __repr__(self) -> str:
        return f"<Graph on {self.device!r}: {self.launches} kernel launches per replay>"


def capture(fn: Callable[[], T], *, device: str | None = None) -> Graph[T]:
    """Record the device work of ``fn()`` into a :class:`Graph` without running it."""
    name = device or backend.get_device()
    target = backend.get_backend(name)
    with kernels.recording() as launches, allocator.holding_frees(name) as held:
        target.begin_capture()
        try:
            output = fn()
        except BaseException:
            _abandon(target)
            raise
        raw = target.end_capture()
    return Graph(name, raw, output, launches, held)


def _abandon(target: backend.Backend) -> None:
    """End a capture that failed, discarding what it recorded; the original error is what matters."""
    try:
        target.end_capture()
    except Exception:
        pass
