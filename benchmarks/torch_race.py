"""PyTorch's side of the deliverable races (sales, MNIST), three ways, so that like races like:

- ``eager``: every launch from Python, as most PyTorch code runs (against minitorch without a graph);
- ``graph``: the training step captured once into a CUDA graph (``torch.cuda.graph``) and replayed, the
  optimizer ``capturable`` (its step count on the device), as minitorch's captured step;
- ``compile``: the model through ``torch.compile`` (TorchInductor's fused Triton kernels), the loop eager;
  the first epoch includes the compilation (reported apart as ``first_epoch_seconds``).

``availability(device)`` says which can run here and, for the others, why not: every benchmark writes a
``kind: "skipped"`` row with that reason instead of leaving a mode out silently.

The captured step follows PyTorch's documented whole-network capture: a warm-up of the forward and backward
on a side stream, gradients set to None so that the capture allocates them from the graph's pool, then the
forward, loss, backward and optimizer step inside ``torch.cuda.graph``. The optimizer's state (momentum, Adam's
moments and step count) is created before the first capture by one step on zero gradients, which moves no
weight (SGD adds lr·0, Adam m / (√v + ε) = 0), and Adam's step counts are then put back to 0: the captured run
computes exactly what the eager one does. A batch of another size (an epoch's last) gets a graph of its own
sharing the memory pool, as minitorch's captured steps are kept per batch size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

MODES = ("eager", "graph", "compile")


def availability(device: str) -> dict[str, str | None]:
    """mode -> None when it can run on ``device`` (``cuda`` or ``cpu``), else the reason it cannot."""
    try:
        import torch
    except ImportError:
        return {mode: "PyTorch is not installed" for mode in MODES}
    out: dict[str, str | None] = {"eager": None}
    if device != "cuda" or not torch.cuda.is_available():
        out["graph"] = "CUDA graphs need a GPU (torch.cuda.graph)"
        out["compile"] = "torch.compile is raced on a GPU only (its CPU code says nothing about a GPU)"
        return out
    out["graph"] = None
    try:
        import triton  # noqa: F401  (TorchInductor's GPU kernels are Triton's)

        out["compile"] = None
    except ImportError:
        out["compile"] = "torch.compile needs Triton on a GPU, and it is not installed"
    return out


def skipped_rows(device: str, **where: Any) -> list[dict]:
    """A ``kind: "skipped"`` row per mode that cannot run here, with its reason (and ``where``'s keys)."""
    return [{"kind": "skipped", "framework": framework(mode), "reason": why, **where}
            for mode, why in availability(device).items() if why]


def framework(mode: str) -> str:
    """The ``framework`` of a mode's rows: ``pytorch`` (eager, as the results have always named it),
    ``pytorch_graph``, ``pytorch_compile``."""
    return "pytorch" if mode == "eager" else f"pytorch_{mode}"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


class _CapturedSteps:
    """The training step captured per batch size (PyTorch's whole-network capture)."""

    def __init__(self, net, optimizer, loss_fn: Callable, loss_weight: Callable[[int], float], total) -> None:
        self.net, self.optimizer, self.loss_fn, self.loss_weight, self.total = (
            net, optimizer, loss_fn, loss_weight, total)
        self.graphs: dict[tuple, tuple] = {}
        self.pool = None

    def _init_optimizer_state(self) -> None:
        import torch

        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)
        self.optimizer.step()  # zero gradients: creates the state, moves no weight
        for state in self.optimizer.state.values():
            if "step" in state:
                state["step"].zero_()

    def clear(self) -> None:
        self.graphs.clear()
        self.pool = None

    def run(self, x: np.ndarray, y: np.ndarray) -> None:
        import torch

        key = (x.shape, y.shape)
        if key not in self.graphs:
            xs = torch.zeros(x.shape, dtype=torch.from_numpy(x[:0]).dtype, device="cuda")
            ys = torch.zeros(y.shape, dtype=torch.from_numpy(y[:0]).dtype, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                if not self.optimizer.state:
                    self._init_optimizer_state()
                for _ in range(2):  # warm-up: autograd's and the libraries' first-call work, no step
                    self.optimizer.zero_grad(set_to_none=True)
                    self.loss_fn(self.net(xs), ys).backward()
            torch.cuda.current_stream().wait_stream(side)
            self.optimizer.zero_grad(set_to_none=True)
            graph = torch.cuda.CUDAGraph()
            weight = float(self.loss_weight(x.shape[0]))
            with torch.cuda.graph(graph, pool=self.pool):
                loss = self.loss_fn(self.net(xs), ys)
                loss.backward()
                self.optimizer.step()
                self.total.add_(loss.detach() * weight)
            self.pool = graph.pool()
            self.graphs[key] = (xs, ys, graph)
        xs, ys, graph = self.graphs[key]
        xs.copy_(torch.from_numpy(x), non_blocking=False)
        ys.copy_(torch.from_numpy(y), non_blocking=False)
        graph.replay()


def train(mode: str, net, optimizer, loss_fn: Callable, epochs: int, device: str,
          batches: Callable[[int], Iterable[tuple[np.ndarray, np.ndarray]]],
          after_epoch: Callable[[int, Any, float], dict] | None = None,
          before_epoch: Callable[[int], None] | None = None, loss_weight: Callable[[int], float] = lambda rows: 1.0,
          recapture_each_epoch: bool = False, time_after_epoch: bool = False) -> tuple[list[dict], dict]:
    """Train ``net`` (already on ``device``) with ``optimizer`` for ``epochs``; ``batches(epoch)`` yields host
    (x, y) arrays, copied to the device in the timed loop as minitorch's are. ``after_epoch(epoch, net,
    loss_sum)`` returns the epoch's row (evaluation; timed only with ``time_after_epoch``), to which the mode
    and the epoch's ``seconds`` are added. ``recapture_each_epoch``: as minitorch's MNIST loop, a new capture
    every epoch (after ``before_epoch`` changed the learning rate). Returns the rows and a summary."""
    import torch

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    model = torch.compile(net) if mode == "compile" else net
    total = torch.zeros((), device=device)
    captured = _CapturedSteps(net, optimizer, loss_fn, loss_weight, total) if mode == "graph" else None
    rows, seconds = [], []
    for epoch in range(epochs):
        if before_epoch is not None:
            before_epoch(epoch)
        if captured is not None and recapture_each_epoch:
            captured.clear()
        _sync(device)
        start = time.perf_counter()
        total.zero_()
        for x, y in batches(epoch):
            if captured is not None:
                captured.run(x, y)
                continue
            xg, yg = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xg), yg)
            loss.backward()
            optimizer.step()
            total.add_(loss.detach() * float(loss_weight(x.shape[0])))
        if not time_after_epoch:
            _sync(device)
            seconds.append(time.perf_counter() - start)
        row = after_epoch(epoch, net, float(total)) if after_epoch is not None else {}
        if time_after_epoch:
            _sync(device)
            seconds.append(time.perf_counter() - start)
        rows.append({**row, "framework": framework(mode), "mode": mode,
                     "epoch": epoch + 1, "seconds": seconds[-1]})
    summary = {"framework": rows[-1]["framework"], "mode": mode, "torch": torch.__version__,
               "train_seconds": float(sum(seconds)), "first_epoch_seconds": seconds[0],
               "epoch_seconds": float(np.median(seconds[1:] if len(seconds) > 1 else seconds))}
    return rows, summary
