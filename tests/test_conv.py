"""Convolution and max pooling in the framework (ops, autograd, nn): the float64 cpu reference against finite
differences and against an independent loop, the emulator (the reference solution's kernels) against the cpu,
layers' shapes, initialisation and errors, and a captured CNN training step."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch
from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)
from minitorch import gradcheck, graph, kernels, nn, ops, optim
from tests.test_softmax import NOTEBOOKS, write_solutions

# (N, C, H, W, K, R, stride, padding): odd sizes, 1x1, 7x7, stride 2, padding 0 and 2
CONV_CASES = [(1, 1, 5, 4, 1, 1, 1, 0), (2, 3, 6, 7, 4, 3, 1, 1), (1, 2, 9, 8, 3, 5, 2, 2), (2, 1, 8, 8, 2, 7, 1, 3),
              (1, 2, 7, 7, 3, 3, 2, 0)]


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


def loop_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """The definition, with loops: an independent check of the vectorised reference."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    p, q = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    y = np.zeros((n, k, p, q))
    for i in np.ndindex(n, k, p, q):
        for cc, rr, ss in np.ndindex(c, r, s):
            hh, ww = i[2] * stride - pad + rr, i[3] * stride - pad + ss
            if 0 <= hh < h and 0 <= ww < wd:
                y[i] += w[i[1], cc, rr, ss] * x[i[0], cc, hh, ww]
    return y


def f64(shape, seed):
    return minitorch.tensor(np.random.default_rng(seed).standard_normal(shape), "cpu", dtype="float64",
                            requires_grad=True)


# ---------------------------------------------------------------- the cpu reference


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_cpu_conv_matches_the_definition(case):
    n, c, h, w, k, r, stride, pad = case
    x, wt = f64((n, c, h, w), 1), f64((k, c, r, r), 2)
    np.testing.assert_allclose(ops.conv2d(x, wt, None, stride, pad).numpy(),
                               loop_conv(x.numpy(), wt.numpy(), stride, pad), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CONV_CASES[1:4], ids=str)
def test_conv_gradients_match_finite_differences(solutions, case):
    n, c, h, w, k, r, stride, pad = case
    x, wt, b = f64((n, c, h, w), 3), f64((k, c, r, r), 4), f64((k,), 5)
    errors = gradcheck.gradcheck(lambda a, v, bb: F.conv2d(a, v, bb, stride, pad), [x, wt, b])
    assert max(errors) < 1e-6, errors


def test_conv_without_bias_has_two_gradients(solutions):
    x, wt = f64((1, 2, 5, 5), 6), f64((3, 2, 3, 3), 7)
    errors = gradcheck.gradcheck(lambda a, v: F.conv2d(a, v, padding=1), [x, wt])
    assert max(errors) < 1e-6, errors


@pytest.mark.parametrize("kernel_size, stride, padding", [(2, None, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)])
def test_max_pool_gradients_match_finite_differences(solutions, kernel_size, stride, padding):
    x = f64((2, 3, 7, 6), 8)  # distinct values: no ties, so finite differences see one maximum
    [error] = gradcheck.gradcheck(lambda a: F.max_pool2d(a, kernel_size, stride, padding), [x])
    assert error < 1e-6, error


def test_max_pool_ties_go_to_the_first_in_row_major_order():
    x = minitorch.tensor(np.array([[[[1, 1, 0, 5], [1, 1, 5, 2], [3, 2, 7, 7], [2, 3, 7, 7]]]], np.float32), "cpu")
    y, at = ops.max_pool2d(x, 2)
    assert y.numpy()[0, 0].tolist() == [[1, 5], [3, 7]]
    assert at.numpy()[0, 0].tolist() == [[0, 3], [8, 10]]
    dx = ops.max_pool2d_backward(minitorch.tensor(np.ones((1, 1, 2, 2), np.float32), "cpu"), at, x.shape, 2)
    assert dx.numpy().sum() == 4 and dx.numpy()[0, 0, 0, 0] == 1 and dx.numpy()[0, 0, 0, 1] == 0


def test_max_pool_nan_wins():
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0, 1, 1] = np.nan
    y, at = ops.max_pool2d(minitorch.tensor(x, "cpu"), 2)
    assert np.isnan(y.numpy()).all() and at.numpy().item() == 3


# ---------------------------------------------------------------- layers and errors


def test_conv2d_layer_shapes_and_pytorch_default_initialisation():
    layer = nn.Conv2d(8, 16, 3, padding=1, device="cpu", seed=3)
    assert layer.weight.shape == (16, 8, 3, 3) and layer.bias.shape == (16,)
    bound = 1 / math.sqrt(8 * 9)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound and abs(w.mean()) < 0.1 * bound
    assert np.abs(layer.bias.numpy()).max() <= bound
    again = nn.Conv2d(8, 16, 3, padding=1, device="cpu", seed=3)
    np.testing.assert_array_equal(again.weight.numpy(), w)
    assert [name for name, _ in nn.Sequential(layer, nn.ReLU()).named_parameters()] == ["0.weight", "0.bias"]


def test_flatten_is_a_view_with_a_gradient(solutions):
    x = minitorch.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2), "cpu", requires_grad=True)
    y = nn.Flatten()(x)
    assert y.shape == (2, 12) and np.shares_memory(y.data, x.data)
    assert x.flatten().shape == (24,) and x.flatten(1, 2).shape == (2, 6, 2)
    y.backward(minitorch.tensor(np.ones((2, 12), np.float32), "cpu"))
    assert x.grad.shape == (2, 3, 2, 2)
    with pytest.raises(ValueError, match="do not fit"):
        x.flatten(3, 1)


@pytest.mark.parametrize("call, error, words", [
    (lambda: ops.conv2d(minitorch.zeros((1, 2, 5, 5), "cpu"), minitorch.zeros((3, 4, 3, 3), "cpu")),
     ValueError, ["4 input channels", "has 2"]),
    (lambda: ops.conv2d(minitorch.zeros((2, 5, 5), "cpu"), minitorch.zeros((3, 2, 3, 3), "cpu")),
     ValueError, ["4-D", "(2, 5, 5)"]),
    (lambda: ops.conv2d(minitorch.zeros((1, 1, 2, 2), "cpu"), minitorch.zeros((1, 1, 3, 3), "cpu")),
     ValueError, ["3 x 3", "2 x 2"]),
    (lambda: ops.conv2d(minitorch.zeros((1, 1, 5, 5), "cpu"), minitorch.zeros((2, 1, 3, 3), "cpu"),
                        minitorch.zeros((3,), "cpu")), ValueError, ["(2,)", "(3,)"]),
    (lambda: ops.conv2d(minitorch.zeros((1, 1, 5, 5), "cpu"), minitorch.zeros((1, 1, 3, 3), "cpu"), stride=0),
     ValueError, ["stride", "0"]),
    (lambda: ops.max_pool2d(minitorch.zeros((1, 1, 5, 5), "cpu"), 2, padding=2), ValueError, ["half", "2"]),
    (lambda: nn.Conv2d(3, 4, 3, device="cpu")(minitorch.zeros((1, 2, 5, 5), "cpu")), ValueError,
     ["(N, 3, H, W)", "(1, 2, 5, 5)"]),
])
def test_bad_shapes_are_named(call, error, words):
    with pytest.raises(error) as err:
        call()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# ---------------------------------------------------------------- the emulator runs the learner's kernels


DEVICES = ["emu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["direct", "im2col", "tiled", "best"])
def test_device_conv_forward_and_backward_match_the_cpu(solutions, variant, device):
    rng = np.random.default_rng(9)
    x_host, w_host = rng.standard_normal((2, 3, 9, 7)), rng.standard_normal((5, 3, 3, 3))
    b_host, dy_host = rng.standard_normal(5), rng.standard_normal((2, 5, 5, 4))
    on = {d: [minitorch.tensor(a.astype(np.float32), d) for a in (x_host, w_host, b_host, dy_host)]
          for d in ("cpu", device)}
    kernels.reset_launch_counts()
    results = {}
    for d, (x, w, b, dy) in on.items():
        results[d] = [ops.conv2d(x, w, b, 2, 1, variant=variant),
                      ops.conv2d_backward_input(dy, w, x.shape, 2, 1, variant="im2col" if variant == "im2col"
                                                else "direct"),
                      ops.conv2d_backward_weight(x, dy, w.shape, 2, 1, variant=variant), ops.conv2d_bias_grad(dy)]
    assert kernels.launch_count("conv.cu", "conv2d_bias_grad") == 1
    for got, want in zip(results[device], results["cpu"], strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_tiled_input_gradient_of_many_channels_matches_the_cpu(solutions, device):
    """The input gradient's tiled rung where dy's 40 channels of a 7 x 7 layer fill more than one step of shared
    memory (two groups, the first with more weights than its threads' first loads: the rest loop) and 3 input
    channels leave one of the block's 4 empty."""
    rng = np.random.default_rng(11)
    w_host, dy_host = rng.standard_normal((40, 3, 7, 7)), rng.standard_normal((1, 40, 9, 10))
    got = {d: ops.conv2d_backward_input(*(minitorch.tensor(a.astype(np.float32), d) for a in (dy_host, w_host)),
                                        (1, 3, 9, 10), 1, 3, variant="tiled" if d != "cpu" else "best")
           for d in ("cpu", device)}
    np.testing.assert_allclose(got[device].numpy(), got["cpu"].numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("on", DEVICES)
def test_device_pooling_matches_the_cpu(solutions, on):
    x_host = np.random.default_rng(10).integers(-2, 3, (2, 3, 9, 8)).astype(np.float32)  # many ties
    for device in ("cpu", on):
        x = minitorch.tensor(x_host, device, requires_grad=True)
        y = F.max_pool2d(x, 3, 2, 1)
        y.backward(minitorch.tensor(np.arange(y.size, dtype=np.float32).reshape(y.shape), device))
        if device == "cpu":
            expected_y, expected_dx = y.numpy(), x.grad.numpy()
    np.testing.assert_array_equal(y.numpy(), expected_y)
    np.testing.assert_array_equal(x.grad.numpy(), expected_dx)


def mnist_cnn(device: str, seed: int = 0) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, device=device, seed=seed), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, device=device, seed=seed + 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(784, 64, device=device, seed=seed + 2), nn.ReLU(), nn.Linear(64, 10, device=device, seed=seed + 3))


@pytest.mark.parametrize("device", DEVICES)
def test_captured_cnn_step_matches_eager_steps(solutions, device):
    """The deliverable's network and optimizer: three steps replayed from a graph equal three eager steps (on a
    GPU up to the order of the weight gradient's atomic additions)."""
    rng = np.random.default_rng(11)
    batches = [(rng.standard_normal((4, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 4)) for _ in range(3)]
    previous = minitorch.get_device()
    minitorch.set_device(device)
    try:
        _captured_against_eager(batches, device)
    finally:
        minitorch.set_device(previous)


def _captured_against_eager(batches: list, device: str) -> None:
    x, y = minitorch.zeros((4, 1, 28, 28), device), F.class_indices(np.zeros(4, np.int64), device)
    exact = device == "emu"

    def setup():
        model = mnist_cnn(device)
        opt = optim.Adam(model.parameters(), lr=2e-3)  # capturable: its step count lives on the device

        def step():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return model, step

    eager_model, eager_step = setup()
    eager = []
    for xb, yb in batches:
        x.copy_from(xb)
        y.copy_from(yb.astype(np.int32))
        eager.append(eager_step().item())
    model, step = setup()
    captured = graph.capture(step)
    assert captured.launches > 20
    for i, (xb, yb) in enumerate(batches):
        x.copy_from(xb)
        y.copy_from(yb.astype(np.int32))
        captured.replay()
        if exact:
            assert captured.output.item() == eager[i]
        else:
            assert captured.output.item() == pytest.approx(eager[i], rel=1e-5)
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        if exact:
            np.testing.assert_array_equal(p.numpy(), q.numpy())
        else:
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-6)
