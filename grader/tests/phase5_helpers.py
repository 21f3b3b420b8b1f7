"""Helpers of Phase 5's graded tests that run much of the learner's code at once (not a test module).

When the learner's code is isolated (grader/learner_process.py) they run in the learner's process, through
``learner_process.run_in_learner_process``: what they return is that process's word, which the tests check against
their own references (a replayed optimizer's weights against the eager steps and the float64 formulas), never a
verdict computed there.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

import minitorch
from grader import checks
from grader.checks import launch_checked
from minitorch import functional, graph, nn, optim


def replayed_adam(name: str, p0: np.ndarray, grads: list[np.ndarray], **kw: Any) -> tuple[np.ndarray, int]:
    """The parameter after len(grads) replays of one captured ``opt.step()`` of ``optim.<name>`` (the gradient
    refilled in place between replays), and the optimizer's step count on the device."""
    p = minitorch.tensor(p0.astype(np.float32), requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    p.grad = minitorch.tensor(np.zeros_like(p0, dtype=np.float32))
    step = graph.capture(opt.step)
    for g in grads:
        p.grad.copy_from(g.astype(np.float32))
        launch_checked(f"{name}.step() replayed from a graph", step.replay)
    return p.numpy(), int(opt.step_count)


def pool_over_a_training_loop() -> dict[str, Any]:
    """Eight Adam steps of a small network with the device allocator as it is (the learner's pool.py from Phase 5
    on): the allocator's statistics after the third step and after the eighth, and what ``release()`` gave back."""
    from minitorch import allocator, backend

    device = backend.get_device()
    if allocator.active_pool(device) is None:
        return {"active": False}
    r = checks.rng("pool-training")
    model = nn.Sequential(nn.Linear(5, 16, seed=1), nn.ReLU(), nn.Linear(16, 1, seed=2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = minitorch.tensor(r.standard_normal((33, 5)).astype(np.float32))
    y = minitorch.tensor(r.standard_normal((33, 1)).astype(np.float32))

    def step() -> float:
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    gc.collect()
    warm = dict(allocator.stats(device))
    for _ in range(5):
        step()
    gc.collect()
    after = dict(allocator.stats(device))
    released = allocator.release(device)
    return {"active": True, "warm": warm, "after": after, "released": int(released),
            "cached_after_release": int(allocator.stats(device)["bytes_cached"])}
