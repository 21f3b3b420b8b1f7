"""Graded tests of Phase 3b (the backward pass): backward.cu/.py (sigmoid, ReLU and bias gradients, MSE loss
and its gradient), sgd.cu/.py (SGD with momentum), backprop.py (the tape-based autograd), and the
deliverable: the XOR network, retrained here with the learner's kernels and autograd.

Run by `grader check phase3b`, on the active device (cuda or emu), with fresh random inputs (seed printed in
the report), odd sizes, empty and size-1 arrays, outputs poisoned with NaN before every launch. Expected
values come from NumPy in float64; expected gradients from central finite differences of a float64 forward
pass on the cpu device (NumPy only: none of the learner's code runs in a reference).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from phase3_helpers import (
    XOR_EPOCHS,
    XOR_X,
    XOR_Y,
    device,
    expect_error,
    host,
    launch_checked,
    on_kernel,
    rel_error,
    train_xor_parameters,
    xor_forward,
)

import minitorch
from grader import checks, learner_process
from grader.checks import ODD_SIZES, GradeError
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, functional, kernels, nn, optim
from minitorch.gradcheck import numerical_gradients

SIGMOID_BACKWARD = pytest.mark.kernel("backward.cu", "sigmoid_backward")
RELU_BACKWARD = pytest.mark.kernel("backward.cu", "relu_backward")
BIAS_GRAD = pytest.mark.kernel("backward.cu", "bias_grad")
MSE_LOSS = pytest.mark.kernel("backward.cu", "mse_loss")
MSE_BACKWARD = pytest.mark.kernel("backward.cu", "mse_backward")
SGD = pytest.mark.kernel("sgd.cu", "sgd_momentum")


def backward():
    return kernels.load_module("backward.py")


def sgd():
    return kernels.load_module("sgd.py")


def backprop():
    return kernels.load_module("backprop.py")


def launch(what: str, expected_kernel: tuple[str, str], fn: Callable[[], object]) -> None:
    with checks.expect_launch(*expected_kernel):
        on_device(what, fn)


# ---------------------------------------------------------------- grid-stride contracts

GRID_N = 10_007  # far more elements than the 3 x 64 threads of a deliberately small grid


def _small_grid_cases() -> dict[str, Callable[[], None]]:
    """Each backward kernel launched by the grader itself with a small grid, over every element."""
    def kernel(name: str, file: str = "backward.cu") -> Any:
        return kernels.load_kernel(file, name)

    def elementwise(name: str, first: np.ndarray, grad: np.ndarray, expected: np.ndarray) -> None:
        out = checks.poison(GRID_N)
        checks.assert_grid_stride(f"{name} launched with grid 3 x block 64 for n={GRID_N}", kernel(name),
                                  (backend.asarray(first), backend.asarray(grad), out, np.int64(GRID_N)),
                                  {"grad_in": (out, expected)})

    def sigmoid_backward() -> None:
        y = (1 / (1 + np.exp(-host(GRID_N, "grid-y")))).astype(np.float32)
        g = host(GRID_N, "grid-g")
        elementwise("sigmoid_backward", y, g, g.astype(np.float64) * y * (1 - y.astype(np.float64)))

    def relu_backward() -> None:
        x, g = relu_input(GRID_N, "grid"), host(GRID_N, "grid-g")
        elementwise("relu_backward", x, g, np.where(x > 0, g, 0).astype(np.float64))

    def mse_backward() -> None:
        p, t, out = host(GRID_N, "grid-p"), host(GRID_N, "grid-t"), checks.poison(GRID_N)
        checks.assert_grid_stride(
            f"mse_backward launched with grid 3 x block 64 for n={GRID_N}", kernel("mse_backward"),
            (backend.asarray(p), backend.asarray(t), out, np.float32(0.5), np.int64(GRID_N)),
            {"grad": (out, 0.5 * 2 * (p.astype(np.float64) - t) / GRID_N)}, rtol=1e-5)

    def mse_loss() -> None:
        p, t, loss = host(GRID_N, "grid-p"), host(GRID_N, "grid-t"), backend.zeros(1)
        checks.assert_grid_stride(
            f"mse_loss launched with grid 3 x block 64 for n={GRID_N} (loss zeroed first)", kernel("mse_loss"),
            (backend.asarray(p), backend.asarray(t), loss, np.int64(GRID_N)),
            {"loss": (loss, [np.mean((p.astype(np.float64) - t) ** 2)])}, rtol=1e-4)

    def bias_grad() -> None:
        rows, cols = 5, 1001
        g, out = host((rows, cols), "grid-bias"), checks.poison(cols)
        checks.assert_grid_stride(
            f"bias_grad launched with grid 3 x block 64 for {rows} x {cols}", kernel("bias_grad"),
            (backend.asarray(g), out, np.int32(rows), np.int32(cols)),
            {"grad_bias": (out, g.astype(np.float64).sum(axis=0))}, rtol=1e-5, atol=1e-6)

    def sgd_momentum() -> None:
        param, grad, vel = host(GRID_N, "grid-param"), host(GRID_N, "grid-grad"), host(GRID_N, "grid-vel")
        p_dev, v_dev = backend.asarray(param), backend.asarray(vel)
        v_ref = 0.9 * vel.astype(np.float64) + grad
        checks.assert_grid_stride(
            f"sgd_momentum launched with grid 3 x block 64 for n={GRID_N}", kernel("sgd_momentum", "sgd.cu"),
            (p_dev, backend.asarray(grad), v_dev, np.float32(0.125), np.float32(0.9), np.int64(GRID_N)),
            {"velocity": (v_dev, v_ref), "param": (p_dev, param - 0.125 * v_ref)}, rtol=1e-5, atol=1e-6)

    return {"sigmoid_backward": sigmoid_backward, "relu_backward": relu_backward, "mse_backward": mse_backward,
            "mse_loss": mse_loss, "bias_grad": bias_grad, "sgd_momentum": sgd_momentum}


@pytest.mark.parametrize("kernel_name", list(_small_grid_cases()))
@pytest.mark.hint("a grid-stride loop: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_backward_kernels_small_grid_cover_all(kernel_name):
    _small_grid_cases()[kernel_name]()


@pytest.mark.hint("past 16,384 blocks the launcher caps the grid: each thread must then loop over several elements")
def test_launchers_past_the_grid_cap():
    n = checks.GRID_CAP_ELEMENTS
    y = (1 / (1 + np.exp(-host(n, "cap-y")))).astype(np.float32)
    g, out = host(n, "cap-g"), checks.poison(n)
    on_device(f"backward.sigmoid_backward of {n} elements",
              partial(backward().sigmoid_backward, backend.asarray(y), backend.asarray(g), out))
    checks.assert_close(out, g.astype(np.float64) * y * (1 - y.astype(np.float64)), rtol=1e-5, atol=1e-7,
                        what=f"sigmoid_backward of {n} elements")
    p_dev, v_dev = backend.asarray(y), backend.zeros(n)
    on_device(f"sgd.sgd_momentum of {n} elements",
              partial(sgd().sgd_momentum, p_dev, backend.asarray(g), v_dev, 0.5, 0.0))
    checks.assert_close(p_dev, y - 0.5 * g.astype(np.float64), rtol=1e-5, atol=1e-6, what=f"sgd_momentum of {n}")


# ---------------------------------------------------------------- sigmoid and ReLU backward


@SIGMOID_BACKWARD
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("grad_in[i] = grad_out[i] * y[i] * (1 - y[i]) for every i in [0, n)")
def test_sigmoid_backward_values(n):
    r = checks.rng("sigmoid_backward", n)
    y = r.uniform(0, 1, n).astype(np.float32)
    y[: min(n, 2)] = [0.0, 1.0][: min(n, 2)]
    g = host(n, "sigmoid_backward-g", scale=3.0)
    out = checks.poison(n)
    launch(f"backward.sigmoid_backward with n={n}", ("backward.cu", "sigmoid_backward"),
           partial(backward().sigmoid_backward, backend.asarray(y), backend.asarray(g), out))
    y64 = y.astype(np.float64)
    checks.assert_close(out, g * y64 * (1 - y64), rtol=1e-6, atol=1e-30, what=f"sigmoid_backward with n={n}")


@SIGMOID_BACKWARD
@pytest.mark.hint("y is the forward OUTPUT sigmoid(x): grad_in = grad_out * y * (1 - y), with no sigmoid computed "
                  "again")
def test_sigmoid_backward_uses_the_forward_output():
    y = np.array([0.5, 0.25, 0.9, 0.01, 0.999], np.float32)
    g = np.ones(5, np.float32)
    out = checks.poison(5)
    launch("sigmoid_backward(y, 1)", ("backward.cu", "sigmoid_backward"),
           partial(backward().sigmoid_backward, backend.asarray(y), backend.asarray(g), out))
    got, expected = checks.to_host(out), y.astype(np.float64) * (1 - y)
    s = 1 / (1 + np.exp(-y.astype(np.float64)))
    if np.allclose(got, s * (1 - s), rtol=1e-5) and not np.allclose(got, expected, rtol=1e-5):
        raise GradeError(f"sigmoid_backward({y.tolist()}, 1) gave {got.tolist()}, which is sigma(y)(1 - sigma(y)): "
                         f"y is already sigma(x), the forward output; expected y (1 - y) = {expected.tolist()}")
    checks.assert_close(got, expected, rtol=1e-6, what="sigmoid_backward(y, grad_out = 1) = y (1 - y)")


def relu_input(n: int, *salt: object) -> np.ndarray:
    x = host(n, "relu_backward", *salt, scale=10.0)
    # No denormals: an H100 compared 1e-45 > 0.0f as false (flushed to zero), which the course does not grade.
    specials = np.array([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 1.2e-38], np.float32)
    x[: min(n, specials.size)] = specials[: min(n, specials.size)]
    return x


@RELU_BACKWARD
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("grad_in[i] = grad_out[i] where x[i] > 0, else 0 (also at x = 0)")
def test_relu_backward_values(n):
    x, g = relu_input(n), host(n, "relu_backward-g", scale=3.0)
    out = checks.poison(n)
    launch(f"backward.relu_backward with n={n}", ("backward.cu", "relu_backward"),
           partial(backward().relu_backward, backend.asarray(x), backend.asarray(g), out))
    checks.assert_close(out, np.where(x > 0, g, 0.0), rtol=0, what=f"relu_backward with n={n}")


@RELU_BACKWARD
@pytest.mark.hint("the gradient passes UNCHANGED where x > 0: grad_in = grad_out, not grad_out times the input or "
                  "the output")
def test_relu_backward_is_a_mask_not_a_product():
    x = np.array([2.0, 0.5, 3.0, -1.0], np.float32)
    g = np.array([1.0, 1.0, -2.0, 5.0], np.float32)
    out = checks.poison(4)
    launch("relu_backward(x, g)", ("backward.cu", "relu_backward"),
           partial(backward().relu_backward, backend.asarray(x), backend.asarray(g), out))
    checks.assert_close(out, [1.0, 1.0, -2.0, 0.0], rtol=0,
                        what="relu_backward(x=[2, 0.5, 3, -1], grad_out=[1, 1, -2, 5])")


# ---------------------------------------------------------------- bias gradient

BIAS_GRAD_SHAPES = [(1, 1), (1, 7), (7, 1), (31, 33), (4099, 3), (3, 4099), (1000, 257), (100_003, 2)]


def check_bias_grad(shape: tuple[int, int]) -> None:
    g = host(shape, "bias_grad")
    out = checks.poison(shape[1])
    launch(f"backward.bias_grad with grad_out of shape {shape}", ("backward.cu", "bias_grad"),
           partial(backward().bias_grad, backend.asarray(g), out))
    g64 = g.astype(np.float64)
    # a float32 sum of `rows` terms: its rounding error grows with the sum of their magnitudes
    atol = 1e-6 * max(1.0, float(np.abs(g64).sum(axis=0).max())) if g.size else 0.0
    checks.assert_close(out, g64.sum(axis=0), rtol=1e-5, atol=atol,
                        what=f"bias_grad (column sums) of grad_out of shape {shape}")


@BIAS_GRAD
@pytest.mark.parametrize("shape", BIAS_GRAD_SHAPES, ids=str)
@pytest.mark.hint("grad_bias[c] = sum over the rows r of grad_out[r * cols + c]: the sum of COLUMN c")
def test_bias_grad_values(shape):
    check_bias_grad(shape)


@BIAS_GRAD
@pytest.mark.parametrize("shape", [(0, 5), (0, 1)], ids=str)
@pytest.mark.hint("with no rows each column sums to 0: grad_bias must still be written")
def test_bias_grad_no_rows_is_zero(shape):
    out = checks.poison(shape[1])
    on_device(f"backward.bias_grad of grad_out of shape {shape}",
              partial(backward().bias_grad, backend.zeros(shape), out))
    checks.assert_close(out, np.zeros(shape[1]), rtol=0, what=f"bias_grad of an empty grad_out of shape {shape}")


@pytest.mark.hint("no columns: nothing to compute, and the launcher must not fail")
def test_bias_grad_no_columns():
    on_device("backward.bias_grad of grad_out of shape (5, 0)",
              partial(backward().bias_grad, backend.zeros((5, 0)), backend.zeros(0)))


# ---------------------------------------------------------------- MSE loss and its gradient


@MSE_LOSS
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("loss[0] = sum of (pred - target)^2 over all n elements, divided by n; the launcher zeroes loss first")
def test_mse_loss_values(n):
    p, t = host(n, "mse-p"), host(n, "mse-t")
    loss = checks.poison(1)  # the launcher must zero it
    launch(f"backward.mse_loss with n={n}", ("backward.cu", "mse_loss"),
           partial(backward().mse_loss, backend.asarray(p), backend.asarray(t), loss))
    expected = np.mean((p.astype(np.float64) - t) ** 2)
    rtol = 1e-4 if n > 1000 else 1e-5  # float32 atomics add up partial sums in any order
    checks.assert_close(loss, [expected], rtol=rtol, what=f"mse_loss with n={n}")
    on_device(f"backward.mse_loss with n={n}, a second time into the same loss",
              partial(backward().mse_loss, backend.asarray(p), backend.asarray(t), loss))
    checks.assert_close(loss, [expected], rtol=rtol, what=f"mse_loss with n={n} called twice (zero the loss in the launcher)")


@MSE_LOSS
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (4, 1)], ids=str)
@pytest.mark.hint("the mean is over every element, whatever the shape")
def test_mse_loss_any_shape(shape):
    p, t = host(shape, "mse-shape-p"), host(shape, "mse-shape-t")
    loss = checks.poison(1)
    launch(f"mse_loss of shape {shape}", ("backward.cu", "mse_loss"),
           partial(backward().mse_loss, backend.asarray(p), backend.asarray(t), loss))
    checks.assert_close(loss, [np.mean((p.astype(np.float64) - t) ** 2)], rtol=1e-5, what=f"mse_loss of shape {shape}")


@MSE_BACKWARD
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("grad[i] = scale * 2 * (pred[i] - target[i]) / n")
def test_mse_backward_values(n):
    p, t = host(n, "mseb-p"), host(n, "mseb-t")
    scale = float(np.float32(checks.rng("mseb-scale", n).uniform(0.1, 3.0)))
    out = checks.poison(n)
    launch(f"backward.mse_backward with n={n}, scale={scale}", ("backward.cu", "mse_backward"),
           partial(backward().mse_backward, backend.asarray(p), backend.asarray(t), out, scale))
    checks.assert_close(out, scale * 2 * (p.astype(np.float64) - t) / n, rtol=1e-5, atol=1e-37,
                        what=f"mse_backward with n={n}, scale={scale}")


@pytest.mark.hint("keep the argument checks of backward.py: they run before any launch")
def test_backward_launchers_reject_bad_arguments():
    a, b = backend.zeros((4, 3)), backend.zeros((3, 4))
    expect_error("sigmoid_backward with grad_out of another shape",
                 partial(backward().sigmoid_backward, a, b, backend.zeros((4, 3))), ValueError, "(3, 4)")
    expect_error("relu_backward with a float64 x",
                 partial(backward().relu_backward, backend.zeros((4, 3), np.float64), a, backend.zeros((4, 3))),
                 TypeError, "float64")
    expect_error("bias_grad with grad_bias of 4 values for 3 columns",
                 partial(backward().bias_grad, a, backend.zeros(4)), ValueError, "(4,)")
    expect_error("mse_loss with target of another shape",
                 partial(backward().mse_loss, a, b, backend.zeros(1)), ValueError, "(3, 4)")
    expect_error("mse_loss with a loss of 2 elements",
                 partial(backward().mse_loss, a, a, backend.zeros(2)), ValueError, "(2,)")


# ---------------------------------------------------------------- SGD with momentum


@SGD
@pytest.mark.parametrize("n, momentum", [(1, 0.9), (257, 0.9), (4099, 0.0), (100_003, 0.5)])
@pytest.mark.hint("each step: v = momentum * v + grad; param -= lr * v (both updated in place)")
def test_sgd_momentum_several_steps(n, momentum):
    r = checks.rng("sgd", n, momentum)
    lr = float(np.float32(r.uniform(0.01, 0.5)))
    param = host(n, "sgd-param")
    p_dev, v_dev = backend.asarray(param), backend.zeros(n)
    p_ref, v_ref = param.astype(np.float64), np.zeros(n)
    for step in range(4):
        grad = host(n, "sgd-grad", step)
        launch(f"sgd.sgd_momentum step {step + 1} (n={n}, lr={lr}, momentum={momentum})", ("sgd.cu", "sgd_momentum"),
               partial(sgd().sgd_momentum, p_dev, backend.asarray(grad), v_dev, lr, momentum))
        v_ref = momentum * v_ref + grad
        p_ref = p_ref - lr * v_ref
        checks.assert_close(v_dev, v_ref, rtol=1e-5, atol=1e-6,
                            what=f"velocity after step {step + 1} of SGD (n={n}, momentum={momentum})")
        checks.assert_close(p_dev, p_ref, rtol=1e-5, atol=1e-6,
                            what=f"param after step {step + 1} of SGD (n={n}, lr={lr}, momentum={momentum})")


@SGD
@pytest.mark.hint("optim.SGD.step runs your sgd_momentum on every parameter that has a gradient")
def test_optimizer_steps_on_your_kernel():
    layer = nn.Linear(5, 3, seed=checks.seed())
    w0, b0 = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    opt = optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    gw, gb = host((5, 3), "opt-gw"), host(3, "opt-gb")
    layer.weight.grad, layer.bias.grad = minitorch.tensor(gw), minitorch.tensor(gb)
    with checks.expect_launch("sgd.cu", "sgd_momentum"):  # the framework's step, not a launcher: run as it is
        launch_checked("optim.SGD.step()", opt.step)
    launch_checked("optim.SGD.step() again", opt.step)
    # two steps with the same gradient: v1 = g, v2 = 0.9 g + g; p = p0 - 0.1 (v1 + v2)
    checks.assert_close(layer.weight, w0 - 0.1 * 2.9 * gw, rtol=1e-5, atol=1e-6, what="weight after two SGD steps")
    checks.assert_close(layer.bias, b0 - 0.1 * 2.9 * gb, rtol=1e-5, atol=1e-6, what="bias after two SGD steps")


@pytest.mark.hint("keep the argument checks of sgd.py: they run before any launch")
def test_sgd_rejects_bad_arguments():
    p = backend.zeros(5)
    expect_error("sgd_momentum with a grad of another shape",
                 partial(sgd().sgd_momentum, p, backend.zeros(4), backend.zeros(5), 0.1, 0.9), ValueError, "(4,)")
    expect_error("sgd_momentum with a float64 velocity",
                 partial(sgd().sgd_momentum, p, backend.zeros(5), backend.zeros(5, np.float64), 0.1, 0.9), TypeError,
                 "float64")


# ---------------------------------------------------------------- the tape: topological order


def diamond(dev: str):
    """a, b leaves; c = a * b; d = c + a; e = d * c: c and a are used twice."""
    a = minitorch.tensor(host((2, 3), "diamond-a"), device=dev, requires_grad=True)
    b = minitorch.tensor(host((2, 3), "diamond-b"), device=dev, requires_grad=True)
    c = a * b
    d = c + a
    e = d * c
    return e, {"a": a, "b": b, "c": c, "d": d, "e": e}


def check_order(order: list, root, names: dict) -> None:
    label = {id(t): n for n, t in names.items()}
    shown = [label.get(id(t), "?") for t in order]
    if len({id(t) for t in order}) != len(order):
        raise GradeError(f"topological_order listed a tensor twice: {shown}")
    if {id(t) for t in order} != {id(t) for t in names.values()}:
        missing = sorted(set(names) - {label.get(id(t)) for t in order})
        raise GradeError(f"topological_order must list every tensor the root depends on, root included, once; got "
                         f"{shown}" + (f", missing {missing}" if missing else ""))
    position = {id(t): i for i, t in enumerate(order)}
    if position[id(root)] != 0:
        raise GradeError(f"topological_order must start at the root: got {shown}")
    for t in order:
        for x in (t.grad_fn.inputs if t.grad_fn else ()):
            if position[id(x)] < position[id(t)]:
                raise GradeError(f"topological_order: {label[id(x)]} comes before {label[id(t)]}, which uses it; "
                                 f"each tensor must come after all tensors that use it (got {shown})")


@pytest.mark.hint("every tensor the root depends on, once, each after all the tensors that use it: a depth-first "
                  "search appending a tensor after its inputs, then reversed")
def test_topological_order_of_a_diamond():
    root, names = diamond("cpu")  # the order is pure Python: the cpu device runs no kernel
    order = backprop().topological_order(root)
    check_order(list(order), root, names)


@pytest.mark.hint("breadth-first order is not topological: a tensor reached early by a short path may still be used "
                  "by one on a longer path; a depth-first search appending a tensor after its inputs, then reversed")
def test_topological_order_with_a_short_and_a_long_path():
    """root = a + b with a = (b * 2) * 3: b is one step from the root and three steps away through a.
    Breadth-first lists b right after a, before c = b * 2, which uses it."""
    b = minitorch.tensor(host((3,), "paths-b"), device="cpu", requires_grad=True)
    c = b * 2.0
    a = c * 3.0
    root = a + b
    order = backprop().topological_order(root)
    check_order(list(order), root, {"root": root, "a": a, "b": b, "c": c})


@pytest.mark.hint("a deep network exceeds Python's recursion limit (1000): use an explicit stack, not recursion")
def test_topological_order_of_a_deep_chain():
    x = minitorch.tensor([1.0], device="cpu", requires_grad=True)
    names, t = {"x": x}, x
    for i in range(3000):
        t = t * 1.0
        names[f"t{i}"] = t
    try:
        order = backprop().topological_order(t)
    except RecursionError:
        raise GradeError("topological_order of a chain of 3000 operations hit Python's recursion limit") from None
    check_order(list(order), t, names)


# ---------------------------------------------------------------- gradients through your autograd

RELU_SAFE = 0.05  # inputs of relu are kept this far from its kink at 0, where finite differences are wrong

GRAPHS: dict[str, tuple[Callable, list[tuple[int, ...]], tuple[str, str]]] = {
    "add": (lambda a, b: a + b, [(7, 5), (7, 5)], ("elementwise.cu", "add")),
    "add_bias": (lambda x, b: x + b, [(9, 4), (4,)], ("backward.cu", "bias_grad")),
    "sub": (lambda a, b: a - b, [(3, 7), (3, 7)], ("elementwise.cu", "scalar_mul")),
    "mul": (lambda a, b: a * b, [(31,), (31,)], ("elementwise.cu", "mul")),
    "scalar_mul": (lambda a: a * -1.75, [(2, 3, 5)], ("elementwise.cu", "scalar_mul")),
    "matmul": (lambda a, b: a @ b, [(7, 5), (5, 3)], ("matmul.cu", "matmul_naive")),
    "matmul_size1": (lambda a, b: a @ b, [(1, 1), (1, 1)], ("matmul.cu", "matmul_naive")),
    "matmul_empty_batch": (lambda a, b: a @ b, [(0, 3), (3, 2)], ("matmul.cu", "matmul_naive")),
    "transpose": (lambda a: a.T, [(5, 7)], ("transpose.cu", "transpose_tiled")),
    "relu": (lambda a: a.relu(), [(33,)], ("backward.cu", "relu_backward")),
    "sigmoid": (lambda a: a.sigmoid(), [(6, 7)], ("backward.cu", "sigmoid_backward")),
    "mse_loss": (lambda p, t: functional.mse_loss(p, t), [(9, 3), (9, 3)], ("backward.cu", "mse_backward")),
    "linear_sigmoid_linear": (lambda x, w1, b1, w2, b2: (x @ w1 + b1).sigmoid() @ w2 + b2,
                              [(5, 3), (3, 4), (4,), (4, 2), (2,)], ("backward.cu", "sigmoid_backward")),
    "relu_layer_mse": (lambda x, w, b, t: functional.mse_loss((x @ w + b).relu(), t),
                       [(6, 4), (4, 3), (3,), (6, 3)], ("backward.cu", "relu_backward")),
}


def graph_inputs(name: str, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    values = [checks.rng("graph", name, i).standard_normal(s) for i, s in enumerate(shapes)]
    # keep relu's inputs (and everything feeding them) clear of 0, where relu has no derivative
    return [np.where(np.abs(v) < RELU_SAFE, 0.5, v) for v in values]


def reference_gradients(fn: Callable, values: list[np.ndarray], weights: np.ndarray) -> list[np.ndarray]:
    leaves = [minitorch.tensor(v, device="cpu", dtype="float64") for v in values]
    return numerical_gradients(fn, leaves, weights)


def check_gradients(name: str, leaves: list, reference: list[np.ndarray], rtol: float, where: str) -> None:
    for i, (t, expected) in enumerate(zip(leaves, reference, strict=True)):
        if t.grad is None:
            raise GradeError(f"{name} on {where}: no gradient reached input {i} (shape {t.shape}); .grad is None")
        if t.grad.shape != t.shape:
            raise GradeError(f"{name} on {where}: the gradient of input {i} has shape {t.grad.shape}, expected {t.shape}")
        err = rel_error(t.grad.numpy(), expected)
        if not err < rtol:
            raise GradeError(f"{name} on {where}: the gradient of input {i} (shape {t.shape}) has relative error "
                             f"{err:.2e} against central finite differences in float64 (at most {rtol:g} allowed)\n"
                             f"  got      {np.array2string(t.grad.numpy().ravel()[:6], precision=5)}\n"
                             f"  expected {np.array2string(expected.ravel()[:6], precision=5)}")


@pytest.mark.parametrize("name", [on_kernel(*GRAPHS[n][2], n) for n in GRAPHS])
@pytest.mark.hint("backpropagate: walk topological_order(root); call grad_fn.backward(g) on each recorded tensor; "
                  "add the gradients of a tensor's uses; accumulate into .grad of the leaves that require grad")
def test_gradients_on_the_device(name):
    fn, shapes, _ = GRAPHS[name]
    values = graph_inputs(name, shapes)
    leaves = [minitorch.tensor(v.astype(np.float32), requires_grad=True) for v in values]
    out = launch_checked(f"{name} forward", lambda: fn(*leaves))
    weights = np.asarray(checks.rng("weights", name).standard_normal(out.shape))
    launch_checked(f"{name} backward", lambda: out.backward(minitorch.tensor(weights.astype(np.float32))))
    check_gradients(name, leaves, reference_gradients(fn, values, weights), 2e-5, f"{device()} (float32)")


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.hint("your backprop.py runs on the cpu device too (NumPy, float64): there the gradients must match "
                  "finite differences to 1e-4")
def test_gradients_on_the_cpu_in_float64(name):
    fn, shapes, _ = GRAPHS[name]
    values = graph_inputs(name, shapes)
    leaves = [minitorch.tensor(v, device="cpu", dtype="float64", requires_grad=True) for v in values]
    out = fn(*leaves)
    weights = np.asarray(checks.rng("weights", name).standard_normal(out.shape))
    out.backward(minitorch.tensor(weights, device="cpu", dtype="float64"))
    check_gradients(name, leaves, reference_gradients(fn, values, weights), 1e-4, "cpu (float64)")


@pytest.mark.hint("a tensor used twice receives the SUM of the gradients of its uses: add, never overwrite")
def test_shared_parameter_gets_the_sum():
    def fn(x, w):
        return (x @ w).sigmoid() @ w  # w is used by two layers

    values = graph_inputs("shared", [(5, 4), (4, 4)])
    leaves = [minitorch.tensor(v.astype(np.float32), requires_grad=True) for v in values]
    out = launch_checked("(x @ W).sigmoid() @ W", lambda: fn(*leaves))
    weights = checks.rng("weights-shared").standard_normal(out.shape)
    launch_checked("backward", lambda: out.backward(minitorch.tensor(weights.astype(np.float32))))
    check_gradients("(x @ W).sigmoid() @ W, W shared", leaves, reference_gradients(fn, values, weights), 2e-5, device())
    x = minitorch.tensor([1.5, -2.0, 3.0], requires_grad=True)
    launch_checked("x * x backward", lambda: (x * x).backward(minitorch.ones(3)))
    checks.assert_close(x.grad, [3.0, -4.0, 6.0], rtol=1e-6, what="d(x * x)/dx (x is used twice: 2x)")


@pytest.mark.hint("a leaf accumulates: .grad = g the first time, .grad + g after (as in PyTorch; zero_grad resets it)")
def test_gradients_accumulate_over_backward_calls():
    layer = nn.Linear(3, 2, seed=checks.seed())
    x, t = minitorch.tensor(host((4, 3), "acc-x")), minitorch.tensor(host((4, 2), "acc-t"))
    launch_checked("backward", lambda: functional.mse_loss(layer(x), t).backward())
    first = layer.weight.grad.numpy().astype(np.float64)
    launch_checked("a second backward", lambda: functional.mse_loss(layer(x), t).backward())
    checks.assert_close(layer.weight.grad, 2 * first, rtol=1e-5, atol=1e-7,
                        what="weight.grad after two backward passes (must be twice the first)")
    layer.zero_grad()
    launch_checked("backward after zero_grad", lambda: functional.mse_loss(layer(x), t).backward())
    checks.assert_close(layer.weight.grad, first, rtol=1e-5, atol=1e-7, what="weight.grad after zero_grad and backward")


@pytest.mark.hint("only leaves that require grad receive .grad: skip inputs with requires_grad=False and leave the "
                  "tensors made by operations alone")
def test_only_leaves_that_require_grad_get_grad():
    x = minitorch.tensor(host((4, 3), "leaf-x"))  # data: no gradient wanted
    w = minitorch.tensor(host((3, 2), "leaf-w"), requires_grad=True)
    hidden = x @ w
    out = hidden.sigmoid()
    launch_checked("backward", lambda: out.backward(minitorch.ones(out.shape)))
    if x.grad is not None:
        raise GradeError("x has requires_grad=False but received a .grad")
    if hidden.grad is not None or out.grad is not None:
        raise GradeError("a tensor made by an operation (not a leaf) received a .grad: only leaves that require grad "
                         "keep their gradient")
    if w.grad is None:
        raise GradeError("w requires grad but received no .grad")
    if w.grad.requires_grad or w.grad.grad_fn is not None:
        raise GradeError("w.grad was recorded on the tape: gradients must not require grad themselves")


@pytest.mark.hint("inside minitorch.no_grad() nothing is recorded: evaluation gives the same values, and backward "
                  "has nothing to run through")
def test_no_grad_records_nothing():
    layer = nn.Linear(3, 2, seed=checks.seed())
    x = minitorch.tensor(host((4, 3), "nograd"))
    recorded = layer(x)
    with minitorch.no_grad():
        plain = layer(x)
    if plain.requires_grad or plain.grad_fn is not None:
        raise GradeError("an operation inside no_grad() was recorded")
    checks.assert_close(plain, recorded.numpy(), rtol=0, what="Linear under no_grad() vs recorded")
    try:
        plain.backward(minitorch.ones(plain.shape))
    except RuntimeError:
        pass
    else:
        raise GradeError("backward() of a tensor computed under no_grad() must raise RuntimeError")


# ---------------------------------------------------------------- the deliverable: XOR


@pytest.mark.timeout(600)  # 5000 epochs, replayed from a graph: about 10 s on the emulator
@pytest.mark.hint("the XOR network of the lab, retrained with your kernels, your autograd and your SGD: 5000 epochs "
                  "must bring the loss below 0.01")
def test_xor_trains():
    checks.reset_launches()
    # Trained where the learner's code runs (its own process when isolated); the trained weights are scored here.
    losses, params = launch_checked("training the XOR network",
                                    lambda: learner_process.run_in_learner_process(train_xor_parameters, 0))
    for file, function in (("backward.cu", "sigmoid_backward"), ("backward.cu", "bias_grad"),
                           ("backward.cu", "mse_loss"), ("backward.cu", "mse_backward"), ("sgd.cu", "sgd_momentum")):
        checks.require_launch(file, function)
    pred, loss = xor_forward(params)
    if not np.isfinite(loss) or loss >= 0.01:
        raise GradeError(f"XOR: the loss after {XOR_EPOCHS} epochs is {loss:.4g}, not below 0.01 "
                         f"(epoch 1: {losses[0]:.4g}, epoch {XOR_EPOCHS // 2 + 1}: {losses[1]:.4g})")
    truth = XOR_Y.ravel() > 0.5
    if not np.array_equal(pred > 0.5, truth):
        rows = ", ".join(f"{a} xor {b} -> {p:.3f}" for (a, b), p in zip(XOR_X.astype(int), pred, strict=True))
        raise GradeError(f"XOR: the predictions do not match the truth table: {rows}")


# ---------------------------------------------------------------- results written by your kernels


@pytest.mark.parametrize("launcher", ["sigmoid_backward", "relu_backward", "bias_grad", "mse_loss", "mse_backward",
                                      "sgd_momentum"])
@pytest.mark.hint("compute the result with your kernel, on the device: no NumPy/CuPy result copied in after the launch")
def test_results_come_from_your_kernels(launcher):
    n = 4099
    a, b = backend.asarray(host(n, "host-writes-a")), backend.asarray(host(n, "host-writes-b"))
    out = checks.poison(n)
    if launcher in ("sigmoid_backward", "relu_backward"):
        checks.assert_computed_on_device(launcher, lambda: getattr(backward(), launcher)(a, b, out), inputs=(a, b),
                                         outputs=(out,))
    elif launcher == "bias_grad":
        g, gb = backend.asarray(host((37, 53), "host-writes-g")), checks.poison(53)
        checks.assert_computed_on_device(launcher, partial(backward().bias_grad, g, gb), inputs=(g,), outputs=(gb,))
    elif launcher == "mse_loss":
        loss = checks.poison(1)
        checks.assert_computed_on_device(launcher, partial(backward().mse_loss, a, b, loss), inputs=(a, b),
                                         outputs=(loss,), rtol=1e-4)
    elif launcher == "mse_backward":
        checks.assert_computed_on_device(launcher, partial(backward().mse_backward, a, b, out, 0.5), inputs=(a, b),
                                         outputs=(out,))
    else:
        velocity = backend.asarray(host(n, "host-writes-v"))
        checks.assert_computed_on_device(launcher, partial(sgd().sgd_momentum, a, b, velocity, 0.1, 0.9), inputs=(b,),
                                         in_place=(a, velocity))
