"""Helpers of Phase 7's graded tests that capture and replay graphs of the learner's code (not a test module).

When the learner's code is isolated (grader/learner_process.py) they run in the learner's process, through
``learner_process.run_in_learner_process``: what they return (norms, gradients, losses, weights) is that process's
word, which the tests check against their own references, never a verdict computed there.
"""

from __future__ import annotations

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


def gpt_training_step(vocab: int, t: int, b: int) -> tuple:
    """A small GPT (seed 5), its AdamW, input and target buffers (int32 (b, t)), and its training step (clip 0.5)."""
    model = nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, seed=5)
    opt = optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    x, y = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")

    def step():
        loss = functional.cross_entropy(model(x).reshape(b * t, vocab), y.reshape(b * t))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss

    return model, x, y, step


def replayed_gpt_steps(vocab: int, t: int, b: int, batches: list[tuple[np.ndarray, np.ndarray]]
                       ) -> tuple[list[float], list[str], list[np.ndarray]]:
    """``gpt_training_step``'s step captured once, then replayed on each of `batches` (copied into the buffers
    before each replay): the losses of the replays, the parameters' names and values after the last."""
    model, x, y, step = gpt_training_step(vocab, t, b)
    captured = launch_checked("graph.capture(training step)", lambda: graph.capture(step))
    losses = []
    for k, (xs, ys) in enumerate(batches):
        x.copy_from(np.asarray(xs).astype(np.int32))
        y.copy_from(np.asarray(ys).astype(np.int32))
        launch_checked(f"replay {k}", captured.replay)
        losses.append(captured.output.item())
    named = list(model.named_parameters())
    return losses, [name for name, _ in named], [p.numpy() for _, p in named]
