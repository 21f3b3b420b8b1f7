"""Helpers of Phase 7's graded tests that capture and replay graphs of the learner's code (not a test module).

When the learner's code is isolated (grader/learner_process.py) they run in the learner's process, through
``learner_process.run_in_learner_process``: what they return (norms, gradients, losses, weights) is that process's
word, which the tests check against their own references, never a verdict computed there.
"""

from __future__ import annotations

from functools import partial

import numpy as np

import minitorch
from grader.checks import launch_checked
from minitorch import functional, graph, nn, optim


def replayed_clip(sizes: tuple[int, ...], grad_sets: list[list[np.ndarray]], max_norm: float
                  ) -> list[tuple[float, list[np.ndarray]]]:
    """``clip_grad_norm_`` of parameters of `sizes`, captured once and replayed for each set of gradients (copied
    in place before each replay): the norm each replay returned and the gradients it left."""
    params = [minitorch.zeros(n, requires_grad=True) for n in sizes]
    for p in params:
        p.grad = minitorch.zeros(p.shape)
    captured = launch_checked("graph.capture(clip_grad_norm_)",
                              lambda: graph.capture(lambda: optim.clip_grad_norm_(params, max_norm)))
    found = []
    for grads in grad_sets:
        for p, g in zip(params, grads, strict=True):
            p.grad.copy_from(g)
        launch_checked("a replay of the captured clip", captured.replay)
        found.append((captured.output.item(), [p.grad.numpy() for p in params]))
    return found


def eager_and_replayed_gpt_steps(vocab: int, t: int, b: int, batches: list[tuple[np.ndarray, np.ndarray]]
                                 ) -> tuple[list[float], list[float], list[str], list[np.ndarray], list[np.ndarray]]:
    """Two copies of one small GPT trained on `batches` (int32 (b, t) inputs and targets), one step at a time: the
    first eagerly, the second by replaying one captured step (AdamW, clip_grad_norm_ 0.5). Returns the eager
    losses, the replayed losses, the parameters' names, and each copy's parameters after the last step."""
    models = [nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, seed=5) for _ in range(2)]
    opts = [optim.AdamW(m.parameters(), lr=3e-2, weight_decay=0.01) for m in models]
    xs = [minitorch.zeros((b, t), dtype="int32") for _ in range(2)]
    ys = [minitorch.zeros((b, t), dtype="int32") for _ in range(2)]

    def step(i: int):
        loss = functional.cross_entropy(models[i](xs[i]).reshape(b * t, vocab), ys[i].reshape(b * t))
        opts[i].zero_grad()
        loss.backward()
        optim.clip_grad_norm_(models[i].parameters(), 0.5)
        opts[i].step()
        return loss

    captured = launch_checked("graph.capture(training step)", lambda: graph.capture(partial(step, 1)))
    eager, replayed = [], []
    for k, (x, y) in enumerate(batches):
        for buf, values in ((xs, x), (ys, y)):
            for i in range(2):
                buf[i].copy_from(np.asarray(values).astype(np.int32))
        eager.append(launch_checked(f"eager step {k}", lambda: step(0)).item())
        launch_checked(f"replay {k}", captured.replay)
        replayed.append(captured.output.item())
    names = [name for name, _ in models[0].named_parameters()]
    return (eager, replayed, names, [p.numpy() for _, p in models[0].named_parameters()],
            [p.numpy() for _, p in models[1].named_parameters()])
