"""Softmax, log-softmax and cross-entropy in the framework (ops, autograd, functional): gradients against
finite differences in float64 on cpu, the emulator against the float64 reference, target checking, and a
captured training step whose targets are refilled between replays."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)
from minitorch import gradcheck, graph, kernels, nn, ops, optim
from tests.phase3_support import PHASE3_NOTEBOOKS, write_solutions

NOTEBOOKS = (*PHASE3_NOTEBOOKS, "phase4_reductions.ipynb", "phase5_fast.ipynb", "phase6_cnn.ipynb")


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


def f64(shape, seed, scale=3.0):
    values = np.random.default_rng(seed).standard_normal(shape) * scale
    return minitorch.tensor(values, "cpu", dtype="float64", requires_grad=True)


def reference_log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------- cpu: finite differences in float64


@pytest.mark.parametrize("shape", [(1, 1), (4, 7), (3, 1), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_gradients_match_finite_differences(solutions, fn, shape):
    x = f64(shape, 1)
    [error] = gradcheck.gradcheck(fn, [x])
    assert error < 1e-6, error


@pytest.mark.parametrize("rows, classes", [(1, 1), (5, 3), (3, 10)])
def test_cross_entropy_gradient_matches_finite_differences(solutions, rows, classes):
    x = f64((rows, classes), 2)
    labels = np.random.default_rng(3).integers(0, classes, rows)
    [error] = gradcheck.gradcheck(lambda z: F.cross_entropy(z, labels), [x])
    assert error < 1e-6, error


def test_cross_entropy_values_and_the_mean_over_the_batch(solutions):
    x = f64((6, 4), 4)
    labels = np.array([0, 3, 1, 1, 2, 0])
    loss = F.cross_entropy(x, labels)
    assert loss.shape == ()
    expected = -reference_log_softmax(x.numpy())[np.arange(6), labels].mean()
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    loss.backward()
    p = np.exp(reference_log_softmax(x.numpy()))
    np.testing.assert_allclose(x.grad.numpy(), (p - np.eye(4)[labels]) / 6, rtol=1e-12, atol=1e-15)


def test_stable_for_large_logits_on_cpu(solutions):
    x = minitorch.tensor(np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], np.float32), "cpu")
    assert np.isfinite(F.softmax(x).numpy()).all()
    assert np.isfinite(F.log_softmax(x).numpy()).all()
    assert np.isfinite(F.cross_entropy(x, np.array([1, 2])).item())


def test_accuracy_counts_the_first_largest_logit():
    logits = minitorch.tensor(np.array([[0, 2, 2], [5, 1, 0], [0, 0, 1], [1, 1, 1]], np.float32), "cpu")
    assert F.accuracy(logits, np.array([1, 0, 0, 0])) == pytest.approx(0.75)
    assert F.accuracy(logits, np.array([2, 0, 2, 1])) == pytest.approx(0.5)


# ---------------------------------------------------------------- targets


def test_class_indices_dtype_per_device(solutions):
    assert F.class_indices([1, 2], "cpu").dtype == np.int64
    t = F.class_indices(np.array([3, 0, 2], np.uint8), "emu")
    assert t.dtype == np.int32 and t.device == "emu" and t.numpy().tolist() == [3, 0, 2]


@pytest.mark.parametrize("labels, error, words", [
    (np.array([0, -1]), ValueError, ["-1", "0 .. 2"]),
    (np.array([0, 3]), ValueError, ["3", "0 .. 2"]),
    (np.array([0.0, 1.0]), TypeError, ["integer", "float64"]),
    (np.array([[0, 1]]), TypeError, ["(1, 2)"]),
    (np.array([0, 1, 2]), ValueError, ["(2,)", "(3,)"]),
])
def test_bad_targets_are_named(solutions, labels, error, words):
    x = minitorch.tensor(np.zeros((2, 3), np.float32), "cpu")
    with pytest.raises(error) as err:
        F.cross_entropy(x, labels)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_targets_on_another_device_or_of_floats_are_refused(solutions):
    x = minitorch.tensor(np.zeros((2, 3), np.float32), "emu")
    with pytest.raises(ValueError, match="'cpu'.*'emu'"):
        F.cross_entropy(x, F.class_indices([0, 1], "cpu"))
    with pytest.raises(TypeError, match="int32.*float32"):
        F.cross_entropy(x, minitorch.tensor(np.zeros(2, np.float32), "emu"))
    with pytest.raises(ValueError, match="batch, classes"):
        F.cross_entropy(minitorch.tensor(np.zeros(3, np.float32), "emu"), [0])


def test_softmax_of_a_dim_other_than_the_last_is_refused(solutions):
    with pytest.raises(ValueError, match="dim=0"):
        F.softmax(minitorch.tensor(np.zeros((2, 3), np.float32), "cpu"), dim=0)


# ---------------------------------------------------------------- the emulator runs the learner's kernels


def test_emulator_matches_float64(solutions):
    rng = np.random.default_rng(5)
    x_host = (rng.standard_normal((9, 13)) * 5).astype(np.float32)
    labels = rng.integers(0, 13, 9)
    x = minitorch.tensor(x_host, "emu", requires_grad=True)
    kernels.reset_launch_counts()
    loss = F.cross_entropy(x, F.class_indices(labels, "emu"))
    loss.backward()
    assert kernels.launch_count("softmax.cu", "cross_entropy_forward") == 1
    assert kernels.launch_count("softmax.cu", "cross_entropy_backward") == 1
    logp = reference_log_softmax(x_host)
    assert loss.item() == pytest.approx(-logp[np.arange(9), labels].mean(), rel=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), (np.exp(logp) - np.eye(13)[labels]) / 9, atol=1e-7)
    np.testing.assert_allclose(F.log_softmax(x).numpy(), logp, atol=1e-5)
    np.testing.assert_allclose(ops.softmax(x).numpy(), np.exp(logp), atol=1e-6)


def test_captured_classifier_step_with_targets_refilled(solutions):
    """A training step captured into a graph: inputs and int32 targets copied in before each replay."""
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((8, 5)).astype(np.float32), rng.integers(0, 3, 8)) for _ in range(3)]

    def model_and_step(x, y):
        model = nn.Sequential(nn.Linear(5, 6, seed=1, device="emu"), nn.ReLU(), nn.Linear(6, 3, seed=2, device="emu"))
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return model, step

    x, y = minitorch.zeros((8, 5), "emu"), F.class_indices(np.zeros(8, np.int64), "emu")
    eager_model, eager_step = model_and_step(x, y)
    eager = []
    for xb, yb in batches:
        x.copy_from(xb)
        y.copy_from(yb.astype(np.int32))
        eager.append(eager_step().item())
    model, step = model_and_step(x, y)
    captured = graph.capture(step)
    replayed = []
    for xb, yb in batches:
        x.copy_from(xb)
        y.copy_from(yb.astype(np.int32))
        captured.replay()
        replayed.append(captured.output.item())
    np.testing.assert_array_equal(replayed, eager)
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
