"""Graded tests of Phase 3a (the forward pass): forward.cu (`add_bias`, `sigmoid`), forward.py, and the layers
that run on them with the learner's Phase 2 matmul: nn.Linear, nn.Sigmoid, the `+` of a bias, and the
deliverable, a two-layer network with given weights against a hand-computed value.

Run by `grader check phase3a`, on the active device (cuda or emu), with fresh random inputs (seed printed
in the report), odd sizes, empty and size-1 arrays, outputs poisoned with NaN before every launch. Every
expected value comes from NumPy in float64.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from phase3_helpers import device, expect_error, host, launch_checked

import minitorch
from grader import checks
from grader.checks import ODD_SIZES, GradeError
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, kernels, nn, ops

ADD_BIAS = pytest.mark.kernel("forward.cu", "add_bias")
SIGMOID = pytest.mark.kernel("forward.cu", "sigmoid")

BIAS_SHAPES = [(1, 1), (1, 7), (7, 1), (31, 33), (257, 3), (3, 4099), (1000, 257)]


def forward():
    return kernels.load_module("forward.py")


def sigmoid64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


# ---------------------------------------------------------------- grid-stride contracts


@ADD_BIAS
@pytest.mark.hint("a grid-stride loop over rows * cols: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_add_bias_kernel_small_grid_covers_all():
    rows, cols = 97, 103
    x, bias = host((rows, cols), "grid-x"), host(cols, "grid-b")
    out = checks.poison((rows, cols))
    checks.assert_grid_stride(
        f"add_bias launched with grid 3 x block 64 for a {rows} x {cols} matrix", kernels.load_kernel("forward.cu", "add_bias"),
        (backend.asarray(x), backend.asarray(bias), out, np.int32(rows), np.int32(cols)),
        {"out": (out, x.astype(np.float64) + bias)})


@SIGMOID
@pytest.mark.hint("a grid-stride loop: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_sigmoid_kernel_small_grid_covers_all():
    n = 10_007
    x, out = host(n, "grid-sigmoid"), checks.poison(n)
    checks.assert_grid_stride(f"sigmoid launched with grid 3 x block 64 for n={n}", kernels.load_kernel("forward.cu", "sigmoid"),
                              (backend.asarray(x), out, np.int64(n)), {"out": (out, sigmoid64(x))})


@pytest.mark.parametrize("op", ["add_bias", "sigmoid"])
@pytest.mark.hint("past 16,384 blocks the launcher caps the grid: each thread must then loop over several elements")
def test_launchers_past_the_grid_cap(op):
    n = checks.GRID_CAP_ELEMENTS
    if op == "add_bias":
        rows, cols = n // 7, 7
        x, bias = host((rows, cols), "cap-x"), host(cols, "cap-b")
        out = checks.poison((rows, cols))
        on_device(f"forward.add_bias of a {rows} x {cols} matrix",
                  partial(forward().add_bias, backend.asarray(x), backend.asarray(bias), out))
        checks.assert_close(out, x.astype(np.float64) + bias, rtol=1e-6, what=f"add_bias of {rows} x {cols}")
    else:
        x, out = host(n, "cap-sigmoid"), checks.poison(n)
        on_device(f"forward.sigmoid of {n} elements", partial(forward().sigmoid, backend.asarray(x), out))
        checks.assert_close(out, sigmoid64(x), rtol=1e-5, atol=1e-7, what=f"sigmoid of {n} elements")


@pytest.mark.parametrize("op", [pytest.param("add_bias", marks=ADD_BIAS), pytest.param("sigmoid", marks=SIGMOID)])
@pytest.mark.hint("read x[i] and bias[c] only for i < rows * cols and c < cols")
def test_kernels_no_read_past_end(op):
    """Arrays of 21 and 7 floats (sizes not a multiple of 16 bytes), checked at the first byte past each
    (the emulator's check mode, on emu)."""
    x, out = host((3, 7), "bounds-x", op), checks.poison((3, 7))
    if op == "add_bias":
        bias = host(7, "bounds-b")
        on_device("forward.add_bias of a 3 x 7 matrix",
                  partial(forward().add_bias, backend.asarray(x), backend.asarray(bias), out))
        checks.assert_close(out, x.astype(np.float64) + bias, rtol=1e-6, what="add_bias of 3 x 7")
    else:
        on_device("forward.sigmoid of 3 x 7", partial(forward().sigmoid, backend.asarray(x), out))
        checks.assert_close(out, sigmoid64(x), rtol=1e-5, atol=1e-7, what="sigmoid of 3 x 7")


# ---------------------------------------------------------------- add_bias


def run_add_bias(x: np.ndarray, bias: np.ndarray, what: str) -> None:
    xd, bd, out = backend.asarray(x), backend.asarray(bias), checks.poison(x.shape)
    with checks.expect_launch("forward.cu", "add_bias"):
        on_device(what, partial(forward().add_bias, xd, bd, out))
    checks.assert_close(out, x.astype(np.float64) + bias, rtol=1e-6, what=what)
    checks.assert_close(xd, x, rtol=0, what=f"x after {what} (an input must not change)")
    checks.assert_close(bd, bias, rtol=0, what=f"bias after {what} (an input must not change)")


@ADD_BIAS
@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=str)
@pytest.mark.hint("out[r, c] = x[r, c] + bias[c]: element i of the flat array is in column i % cols")
def test_add_bias_values(shape):
    x, bias = host(shape, "add_bias-x"), host(shape[1], "add_bias-b", shape)
    run_add_bias(x, bias, f"forward.add_bias with x of shape {shape}")


@ADD_BIAS
@pytest.mark.hint("a batch of a million rows: a 1-D grid-stride loop over rows * cols elements covers any shape "
                  "(a 2-D grid has at most 65,535 blocks along y)")
def test_add_bias_tall_matrix():
    shape = (1_000_003, 1)
    run_add_bias(host(shape, "tall-x"), host(1, "tall-b"), f"forward.add_bias with x of shape {shape}")


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
@pytest.mark.hint("an empty matrix has nothing to add: the launcher must not fail")
def test_add_bias_empty(shape):
    x, out = backend.asarray(np.zeros(shape, np.float32)), backend.zeros(shape)
    on_device(f"forward.add_bias on an empty x of shape {shape}",
              partial(forward().add_bias, x, backend.zeros(shape[1]), out))
    checks.assert_close(out, np.zeros(shape), what=f"add_bias output of shape {shape}")


@pytest.mark.hint("keep the argument checks of forward.py: they run before any launch")
def test_add_bias_rejects_bad_arguments():
    x, out = backend.zeros((4, 3)), backend.zeros((4, 3))
    expect_error("add_bias with a bias of 4 values for 3 columns",
                 partial(forward().add_bias, x, backend.zeros(4), out), ValueError, "(3,)", "(4,)")
    expect_error("add_bias with out of shape (3, 4)",
                 partial(forward().add_bias, x, backend.zeros(3), backend.zeros((3, 4))), ValueError, "(3, 4)")
    expect_error("add_bias with a 1-D x", partial(forward().add_bias, backend.zeros(12), backend.zeros(3),
                                                                     backend.zeros(12)), ValueError, "(12,)")
    expect_error("add_bias with a float64 bias",
                 partial(forward().add_bias, x, backend.zeros(3, np.float64), out), TypeError, "float64")


# ---------------------------------------------------------------- sigmoid

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 20, -20, 88, -88, 89, -89, 100, -100, 1e4, -1e4, 1e30, -1e30,
                     3.4e38, -3.4e38, np.inf, -np.inf, np.nan, 1e-30, -1e-30], np.float32)


def run_sigmoid(x: np.ndarray, what: str) -> np.ndarray:
    xd, out = backend.asarray(x), checks.poison(x.shape)
    with checks.expect_launch("forward.cu", "sigmoid"):
        on_device(what, partial(forward().sigmoid, xd, out))
    # expf is within a few ulp; the result near 0 may be a denormal (hence the tiny atol)
    checks.assert_close(out, sigmoid64(x), rtol=1e-5, atol=1e-37, what=what)
    checks.assert_close(xd, x, rtol=0, what=f"x after {what} (an input must not change)")
    return checks.to_host(out)


@SIGMOID
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("out[i] = 1 / (1 + expf(-x[i])) for every i in [0, n)")
def test_sigmoid_values(n):
    run_sigmoid(host(n, "sigmoid", scale=8.0), f"forward.sigmoid with n={n}")


@SIGMOID
@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (2, 3, 4, 5)], ids=str)
@pytest.mark.hint("sigmoid works on x.size elements, whatever the shape")
def test_sigmoid_any_shape(shape):
    run_sigmoid(host(shape, "sigmoid-shape", scale=4.0), f"forward.sigmoid with shape {shape}")


@SIGMOID
@pytest.mark.hint("evaluate expf only of a non-positive number: 1 / (1 + expf(-x)) for x >= 0, "
                  "e / (1 + e) with e = expf(x) for x < 0; expf(x) / (1 + expf(x)) is inf / inf = NaN for x > 88")
def test_sigmoid_stable_for_large_inputs():
    x = np.resize(SPECIALS, 1001)
    out = run_sigmoid(x, "forward.sigmoid of extreme inputs (±1e30, ±inf, NaN, ...)")
    finite = ~np.isnan(x)
    if np.isnan(out[finite]).any() or (out[finite] < 0).any() or (out[finite] > 1).any():
        bad = x[finite][np.isnan(out[finite]) | (out[finite] < 0) | (out[finite] > 1)][0]
        raise GradeError(f"sigmoid({bad!r}) is not in [0, 1]: the formula overflows for large |x|")


@pytest.mark.hint("an empty array has nothing to compute: the launcher must not fail")
def test_sigmoid_empty():
    on_device("forward.sigmoid of an empty array", partial(forward().sigmoid, backend.zeros(0), backend.zeros(0)))


@pytest.mark.hint("keep the argument checks of forward.py: they run before any launch")
def test_sigmoid_rejects_bad_arguments():
    expect_error("sigmoid with out of another shape",
                 partial(forward().sigmoid, backend.zeros((3, 4)), backend.zeros((4, 3))), ValueError, "(4, 3)")
    expect_error("sigmoid of a float64 array",
                 partial(forward().sigmoid, backend.zeros(5, np.float64), backend.zeros(5)), TypeError, "float64")


# ---------------------------------------------------------------- layers on your kernels


def expect_launches(*names: tuple[str, str]) -> None:
    for file, function in names:
        checks.require_launch(file, function)


@pytest.mark.parametrize("batch, n_in, n_out", [(1, 1, 1), (4, 2, 3), (33, 17, 5), (257, 31, 7), (2, 1, 40)],
                         ids=str)
@pytest.mark.hint("nn.Linear computes x @ W + b with your matmul (Phase 2) and your add_bias")
def test_linear_forward(batch, n_in, n_out):
    layer = nn.Linear(n_in, n_out, seed=checks.seed())
    x = host((batch, n_in), "linear", n_out)
    checks.reset_launches()
    y = launch_checked(f"Linear({n_in}, {n_out}) on a batch of {batch}", lambda: layer(minitorch.tensor(x)))
    expect_launches(("matmul.cu", "matmul_naive"), ("forward.cu", "add_bias"))
    if y.shape != (batch, n_out) or y.device != device():
        raise GradeError(f"Linear({n_in}, {n_out}) gave shape {y.shape} on {y.device!r}; expected "
                         f"{(batch, n_out)} on {device()!r}")
    w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    bound = np.abs(x) @ np.abs(w) + np.abs(b)  # float32 accumulation error grows with this
    checks.assert_close(y, x @ w + b, rtol=1e-5, atol=float(bound.max()) * 1e-6,
                        what=f"Linear({n_in}, {n_out}) forward on a batch of {batch}")


@pytest.mark.hint("an empty batch gives an empty output, with no launch of an empty grid")
def test_linear_empty_batch():
    y = launch_checked("Linear(3, 2) on a batch of 0", lambda: nn.Linear(3, 2)(minitorch.zeros((0, 3))))
    if y.shape != (0, 2):
        raise GradeError(f"Linear(3, 2) on a (0, 3) batch gave shape {y.shape}, expected (0, 2)")


@pytest.mark.hint("x + b for x of shape (rows, cols) and b of shape (cols,) runs your add_bias")
def test_bias_broadcast_operator():
    x, b = host((9, 5), "broadcast-x"), host(5, "broadcast-b")
    with checks.expect_launch("forward.cu", "add_bias"):
        y = launch_checked("x + b", lambda: minitorch.tensor(x) + minitorch.tensor(b))
    checks.assert_close(y, x.astype(np.float64) + b, rtol=1e-6, what="x + b (bias broadcast over the rows)")


@SIGMOID
@pytest.mark.hint("nn.Sigmoid, Tensor.sigmoid and ops.sigmoid run your sigmoid kernel")
def test_sigmoid_module_and_relu_module():
    x = host((6, 7), "modules", scale=5.0)
    with checks.expect_launch("forward.cu", "sigmoid"):
        y = launch_checked("nn.Sigmoid()(x)", lambda: nn.Sigmoid()(minitorch.tensor(x)))
    checks.assert_close(y, sigmoid64(x), rtol=1e-5, what="nn.Sigmoid()(x)")
    with checks.expect_launch("elementwise.cu", "relu"):
        r = launch_checked("nn.ReLU()(x)", lambda: nn.ReLU()(minitorch.tensor(x)))
    checks.assert_close(r, np.maximum(x, 0), rtol=0, what="nn.ReLU()(x)")


@pytest.mark.hint("a random two-layer network: Linear -> Sigmoid -> Linear, every step on your kernels")
def test_random_two_layer_network():
    s = checks.seed()
    l1, l2 = nn.Linear(13, 9, seed=s), nn.Linear(9, 3, seed=s + 1)
    x = host((37, 13), "mlp", scale=2.0)
    checks.reset_launches()
    y = launch_checked("Linear(13, 9) -> Sigmoid -> Linear(9, 3)", lambda: l2(nn.Sigmoid()(l1(minitorch.tensor(x)))))
    expect_launches(("matmul.cu", "matmul_naive"), ("forward.cu", "add_bias"), ("forward.cu", "sigmoid"))
    w1, b1, w2, b2 = (t.numpy().astype(np.float64) for t in (l1.weight, l1.bias, l2.weight, l2.bias))
    expected = sigmoid64(x @ w1 + b1) @ w2 + b2
    checks.assert_close(y, expected, rtol=1e-5, atol=1e-5, what="Linear(13, 9) -> Sigmoid -> Linear(9, 3)")


# ---------------------------------------------------------------- the deliverable

W1 = [[1, -1, 0.5], [-0.5, 0.5, -0.25]]
B1 = [0.5, -0.5, 0]
W2 = [[1], [1], [2]]
B2 = [-1]


@pytest.mark.hint("Linear(2, 3) -> Sigmoid -> Linear(3, 1) with the chapter's weights on [[1, 2], [3, 4]] gives "
                  "[[1], [2 sigmoid(1/2)]]")
def test_deliverable_matches_hand_computed_value():
    layer1, layer2 = nn.Linear(2, 3), nn.Linear(3, 1)
    layer1.set_weights(W1, B1)
    layer2.set_weights(W2, B2)
    checks.reset_launches()
    y = launch_checked("the deliverable network",
                       lambda: layer2(nn.Sigmoid()(layer1(minitorch.tensor([[1, 2], [3, 4]])))))
    expect_launches(("matmul.cu", "matmul_naive"), ("forward.cu", "add_bias"), ("forward.cu", "sigmoid"))
    by_hand = np.array([[1.0], [2 / (1 + np.exp(-0.5))]])
    checks.assert_close(y, by_hand, rtol=1e-6, what="Linear(2, 3) -> Sigmoid -> Linear(3, 1) on [[1, 2], [3, 4]]")


@pytest.mark.hint("set_weights takes the weight as (in_features, out_features): the forward is x @ W")
def test_set_weights_layout():
    layer = nn.Linear(2, 3)
    w = host((2, 3), "set_weights")
    layer.set_weights(w, np.zeros(3))
    checks.assert_close(layer.weight, w, rtol=0, what="Linear.set_weights then .weight")
    y = layer(minitorch.tensor(np.eye(2, dtype=np.float32)))
    checks.assert_close(y, w, rtol=1e-6, what="Linear(2, 3) with weight W and bias 0 applied to the identity")
    ops_y = ops.add_bias(ops.matmul(minitorch.tensor(np.eye(2, dtype=np.float32)), layer.weight), layer.bias)
    checks.assert_close(ops_y, w, rtol=1e-6, what="ops.add_bias(ops.matmul(I, W), 0)")


# ---------------------------------------------------------------- results written by your kernels


@pytest.mark.parametrize("launcher", ["add_bias", "sigmoid"])
@pytest.mark.hint("compute the result with your kernel, on the device: no NumPy/CuPy result copied in after the launch")
def test_results_come_from_your_kernels(launcher):
    x = backend.asarray(host((57, 31), "host-writes"))
    out = checks.poison((57, 31))
    if launcher == "add_bias":
        bias = backend.asarray(host(31, "host-writes-b"))
        checks.assert_computed_on_device("forward.add_bias", partial(forward().add_bias, x, bias, out),
                                         inputs=(x, bias), outputs=(out,))
    else:
        checks.assert_computed_on_device("forward.sigmoid", partial(forward().sigmoid, x, out), inputs=(x,),
                                         outputs=(out,))
