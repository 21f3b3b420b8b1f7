"""Dropout of the attention probabilities in Phase 7's materialised attention (nanoGPT's ``attn_dropout``): the
mask from Phase 5's Philox through the learner's ``dropout_apply``, drawn again by the backward, never stored.
Forward and backward against float64 NumPy with the mask of ``minitorch.philox``; the mask changes from one
training forward to the next; the backward uses its own forward's mask; eval draws nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch
from minitorch import nn, philox
from tests.phase3_support import write_solutions

NOTEBOOKS = ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase3a_forward.ipynb", "phase3b_backward.ipynb",
             "phase4_reductions.ipynb", "phase5_fast.ipynb", "phase6_cnn.ipynb", "phase7_gpt.ipynb")
DEVICES = ["cpu", "emu", pytest.param("cuda", marks=pytest.mark.gpu)]
B, T, C, H, P = 2, 7, 12, 3, 0.3


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


def keep_mask(seed: int, step: int) -> np.ndarray:
    """Which probabilities of (B H, T, T) a draw at ``step`` keeps: Philox's uniforms at stream step << 16."""
    return (philox.uniform(B * H * T * T, seed, step << 16) >= np.float32(P)).reshape(B * H, T, T)


def attention_reference(qkv: np.ndarray, keep: np.ndarray, grad_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """y and dqkv in float64, written from the formulas: S = Q Kᵀ / √D (causal), P = softmax(S),
    Y = (keep ⊙ P / (1 - p)) V, and back through the same mask."""
    d = C // H
    heads = qkv.reshape(B, T, 3, H, d).transpose(2, 0, 3, 1, 4).reshape(3, B * H, T, d)
    q, k, v = heads
    s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    prob = np.exp(s - s.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    dropped = prob * keep / (1 - P)
    y = dropped @ v
    g = grad_y.reshape(B, T, H, d).transpose(0, 2, 1, 3).reshape(B * H, T, d)
    grad_dropped = g @ v.transpose(0, 2, 1)
    grad_prob = grad_dropped * keep / (1 - P)
    grad_s = prob * (grad_prob - (grad_prob * prob).sum(-1, keepdims=True)) / math.sqrt(d)
    grads = np.stack([grad_s @ k, grad_s.transpose(0, 2, 1) @ q, dropped.transpose(0, 2, 1) @ g])
    merge = grads.reshape(3, B, H, T, d).transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * C)
    return y.reshape(B, H, T, d).transpose(0, 2, 1, 3).reshape(B, T, C), merge


@pytest.mark.parametrize("device", DEVICES)
def test_attention_dropout_matches_float64_with_philox_masks(solutions, device):
    """Two training forwards (steps 1 and 2, different masks), then the FIRST one's backward: its gradient uses
    its own mask, regenerated, not the later one."""
    rng = np.random.default_rng(0)
    attn = nn.MultiHeadAttention(C, H, device=device, seed=3, dropout=P)
    dtype = "float64" if device == "cpu" else "float32"
    qkv = [rng.standard_normal((B, T, 3 * C)) for _ in range(2)]
    grad_y = rng.standard_normal((B, T, C))
    inputs = [minitorch.tensor(a, device=device, dtype=dtype, requires_grad=True) for a in qkv]
    drop = attn.attn_dropout
    outs = [minitorch.functional.causal_self_attention(x, H, dropout_p=P, seed=drop.seed,
                                                       step=drop.next_step(device)) for x in inputs]
    assert drop.steps == 2
    outs[0].backward(minitorch.tensor(grad_y, device=device, dtype=dtype))
    masks = [keep_mask(drop.seed, step) for step in (1, 2)]
    assert not np.array_equal(masks[0], masks[1]) and 0.6 < masks[0].mean() < 0.8
    tol = dict(rtol=1e-10, atol=1e-12) if device == "cpu" else dict(rtol=2e-4, atol=2e-5)
    for out, a, keep in zip(outs, qkv, masks, strict=True):
        want_y, _ = attention_reference(a, keep, grad_y)
        np.testing.assert_allclose(out.numpy(), want_y, **tol)
    _, want_grad = attention_reference(qkv[0], masks[0], grad_y)
    np.testing.assert_allclose(inputs[0].grad.numpy(), want_grad, **tol)
    _, wrong = attention_reference(qkv[0], masks[1], grad_y)  # the later forward's mask gives another gradient
    assert np.abs(wrong - want_grad).max() > 1e-2


@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_the_layer_draws_a_new_mask_each_training_forward_and_none_in_eval(solutions, device):
    attn = nn.MultiHeadAttention(C, H, device=device, seed=4, dropout=P)
    x = minitorch.tensor(np.random.default_rng(1).standard_normal((B, T, C)).astype(np.float32), device=device)
    first, second = attn(x).numpy(), attn(x).numpy()
    assert attn.attn_dropout.steps == 2 and np.abs(first - second).max() > 1e-3
    attn.eval()
    plain = nn.MultiHeadAttention(C, H, device=device, seed=4)
    np.testing.assert_allclose(attn(x).numpy(), plain(x).numpy(), rtol=1e-6, atol=1e-7)
    assert attn.attn_dropout.steps == 2  # eval: the identity, no draw
    with pytest.raises(ValueError, match="dropout_p > 0 needs step"):
        minitorch.functional.causal_self_attention(minitorch.tensor(np.zeros((1, 2, 6), np.float32), device=device),
                                                   2, dropout_p=0.1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [36, 35], ids=["x4", "one-a-thread"])
def test_a_residual_dropout_is_one_kernel_with_the_values_of_dropout_and_add(solutions, device, n):
    """Dropout.residual(x, h) = x + dropout(h): one dropout_add launch while training (dropout_add_x4 where n is a
    multiple of 4), the values and both gradients bit for bit those of the dropout and the add as two Functions
    drawing the same mask (a twin layer of the same seed), against float64 with minitorch.philox's mask."""
    rng = np.random.default_rng(21)
    x_host, h_host, g_host = (rng.standard_normal((3, n)).astype(np.float32) for _ in range(3))
    runs = []
    for fused in (True, False):
        layer = nn.Dropout(P, seed=77, device=device)
        x = minitorch.tensor(x_host, device, requires_grad=True)
        h = minitorch.tensor(h_host, device, requires_grad=True)
        minitorch.kernels.reset_launch_counts()
        y = layer.residual(x, h) if fused else x + layer(h)
        launched = {f for (_, f), count in minitorch.kernels.launch_counts().items() if count}
        y.backward(minitorch.tensor(g_host, device))
        runs.append((y.numpy(), x.grad.numpy(), h.grad.numpy(), launched))
    keep = (philox.uniform(3 * n, 77, 1 << 16) >= np.float32(P)).reshape(3, n)
    scale = np.float32(1 / (1 - P))
    np.testing.assert_allclose(runs[0][0], x_host + np.where(keep, h_host * scale, 0), rtol=1e-6)
    for got, want in zip(runs[0][:3], runs[1][:3], strict=True):
        assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(runs[0][2], np.where(keep, g_host * scale, 0))
    if device != "cpu":
        assert ("dropout_add_x4" if n % 4 == 0 else "dropout_add") in runs[0][3]
        assert "add" not in runs[0][3] and "add" in runs[1][3]
