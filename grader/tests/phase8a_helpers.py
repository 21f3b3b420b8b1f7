"""Helpers of Phase 8a's graded tests that capture and replay graphs of the learner's code (not a test module).

When the learner's code is isolated (grader/learner_process.py) the replayed run goes to the learner's process
through ``learner_process.run_in_learner_process`` (a graph captured by the judge would replay none of the learner's
launches, which run there): what it returns (scales, step counts, weights) is that process's word, which the test
checks against the same steps run eagerly by the judge, never a verdict computed there.
"""

from __future__ import annotations

import numpy as np

from grader.checks import launch_checked


def scaled_run(captured: bool, batches: list[np.ndarray]) -> list[tuple]:
    """A float16 training step of a small layer with Adam and a GradScaler (eager, or captured once and replayed),
    run on each of `batches`: after each, the scale, Adam's step count and the parameters."""
    import minitorch
    from minitorch import amp, graph, nn, optim
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)

    layer = nn.Linear(4, 2, seed=11)
    opt = optim.Adam(layer.parameters(), lr=1e-3)
    scaler = amp.GradScaler(init_scale=2.0 ** 12, growth_interval=2)
    x, y = minitorch.tensor(batches[0]), minitorch.zeros((len(batches[0]), 2))

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
        out.append((scaler.get_scale(), opt.step_count, [p.numpy() for p in layer.parameters()]))
    return out
