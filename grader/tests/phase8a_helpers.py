"""Helpers of Phase 8a's graded tests that capture and replay graphs of the learner's code (not a test module).

When the learner's code is isolated (grader/learner_process.py) the replayed run goes to the learner's process
through ``learner_process.run_in_learner_process`` (a graph captured by the judge would replay none of the learner's
launches, which run there): what it returns (scales, step counts, weights) is that process's word, which the test
checks against the same steps run eagerly by the judge, never a verdict computed there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grader.checks import launch_checked


def scaled_run(captured: bool, batches: list[np.ndarray], optimizer: str = "adam", device: str | None = None,
               state: Callable[[Any, list], list[np.ndarray]] | None = None) -> list[tuple]:
    """A float16 training step of a Linear(4, 2) with Adam (lr 1e-3) or SGD (lr 1e-4, momentum 0.9) and a
    GradScaler (scale 2^12, growth every 2 good steps): eager, or the whole step (forward, scaled backward,
    scaler.step, scaler.update) captured once and replayed, run on each of `batches` (on `device`, default the
    current one). After each step: the scale, Adam's step count (None for SGD), the parameters, and
    ``state(optimizer, parameters)`` if given (None otherwise). Shared by Phase 8a's graded test and the project's
    own (tests/test_amp.py)."""
    import minitorch
    from minitorch import amp, graph, nn, optim
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)

    device = device or minitorch.get_device()
    layer = nn.Linear(4, 2, seed=11).to(device)
    opt = (optim.SGD(layer.parameters(), lr=1e-4, momentum=0.9) if optimizer == "sgd"
           else optim.Adam(layer.parameters(), lr=1e-3))
    scaler = amp.GradScaler(init_scale=2.0 ** 12, growth_interval=2)
    x, y = minitorch.tensor(batches[0], device), minitorch.zeros((len(batches[0]), 2), device)

    def step():
        opt.zero_grad()
        with amp.autocast("float16"):
            loss = F.mse_loss(layer(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    run = graph.capture(step).replay if captured else step
    out = []
    for batch in batches:
        x.copy_from(batch)
        launch_checked("a float16 training step with a GradScaler", run)
        params = layer.parameters()
        out.append((scaler.get_scale(), opt.step_count if optimizer == "adam" else None, [p.numpy() for p in params],
                    state(opt, params) if state is not None else None))
    return out
