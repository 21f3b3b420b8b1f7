"""minitorch.ops: NumPy on the cpu device (float32 and float64), the learner's launchers on emu, and the
errors that name what was expected and what came."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import backend, kernels, ops
from tests.phase3_support import write_solutions

RNG = np.random.default_rng(1234)


def t(array, device="cpu", dtype=None):
    return minitorch.tensor(np.asarray(array), device=device, dtype=dtype or np.asarray(array).dtype)


def values(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace)


def expected(op: str, *a: np.ndarray, s: float = 1.5):
    x = [v.astype(np.float64) for v in a]
    return {
        "add": lambda: x[0] + x[1], "mul": lambda: x[0] * x[1], "scalar_mul": lambda: s * x[0],
        "relu": lambda: np.maximum(x[0], 0), "transpose": lambda: x[0].T, "matmul": lambda: x[0] @ x[1],
        "add_bias": lambda: x[0] + x[1], "sigmoid": lambda: 1 / (1 + np.exp(-x[0])),
        "sigmoid_backward": lambda: x[1] * x[0] * (1 - x[0]), "relu_backward": lambda: np.where(x[0] > 0, x[1], 0),
        "bias_grad": lambda: x[0].sum(axis=0), "mse_loss": lambda: np.mean((x[0] - x[1]) ** 2),
        "mse_backward": lambda: s * 2 * (x[0] - x[1]) / max(x[0].size, 1),
    }[op]()


def run(op: str, inputs: list[np.ndarray], device: str, s: float = 1.5) -> np.ndarray:
    args = [t(v, device) for v in inputs]
    if op == "scalar_mul":
        return ops.scalar_mul(args[0], s).numpy()
    if op == "mse_backward":
        return ops.mse_backward(args[0], args[1], s).numpy()
    return getattr(ops, op)(*args).numpy()


CASES = [  # (op, input shapes)
    ("add", [(7, 3), (7, 3)]), ("mul", [(257,), (257,)]), ("scalar_mul", [(2, 3, 5)]), ("relu", [(31,)]),
    ("transpose", [(5, 7)]), ("matmul", [(7, 5), (5, 3)]), ("add_bias", [(9, 4), (4,)]), ("sigmoid", [(6, 7)]),
    ("sigmoid_backward", [(33,), (33,)]), ("relu_backward", [(4, 5), (4, 5)]), ("bias_grad", [(11, 3)]),
    ("mse_loss", [(9, 3), (9, 3)]), ("mse_backward", [(9, 3), (9, 3)]),
]
EDGE_CASES = [  # empty and size-1
    ("add", [(0,), (0,)]), ("add", [(1,), (1,)]), ("relu", [(0, 3)]), ("transpose", [(0, 4)]), ("transpose", [(1, 1)]),
    ("matmul", [(0, 3), (3, 2)]), ("matmul", [(4, 0), (0, 2)]), ("matmul", [(1, 1), (1, 1)]),
    ("add_bias", [(0, 3), (3,)]), ("add_bias", [(1, 1), (1,)]), ("sigmoid", [()]), ("bias_grad", [(0, 3)]),
    ("bias_grad", [(1, 1)]), ("mse_loss", [(1,), (1,)]), ("mse_backward", [(0,), (0,)]),
]


def inputs_for(op: str, shapes) -> list[np.ndarray]:
    vals = [values(*s) for s in shapes]
    if op == "sigmoid_backward":
        vals[0] = RNG.uniform(0, 1, shapes[0]).astype(np.float32)
    return vals


@pytest.mark.parametrize("op, shapes", CASES + EDGE_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_matches_numpy(op, shapes, dtype):
    inputs = [v.astype(dtype) for v in inputs_for(op, shapes)]
    got = run(op, inputs, "cpu")
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected(op, *inputs), rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-7)


@pytest.mark.parametrize("device", ["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("op, shapes", CASES + EDGE_CASES, ids=lambda v: str(v))
def test_device_runs_the_launchers(solutions, op, shapes, device):
    inputs = inputs_for(op, shapes)
    got = run(op, inputs, device)
    np.testing.assert_allclose(got, expected(op, *inputs), rtol=2e-6, atol=1e-6)


def test_sgd_momentum_in_place(solutions):
    for device in ("cpu", "emu"):
        p0, g = values(13), values(13)
        p, v = t(p0, device), minitorch.zeros(13, device=device)
        ops.sgd_momentum_(p, t(g, device), v, 0.5, 0.9)
        ops.sgd_momentum_(p, t(g, device), v, 0.5, 0.9)
        np.testing.assert_allclose(v.numpy(), 1.9 * g.astype(np.float64), rtol=1e-6)
        np.testing.assert_allclose(p.numpy(), p0 - 0.5 * 2.9 * g.astype(np.float64), rtol=1e-5, atol=1e-6)


def test_tensors_of_another_device_than_the_active_one(solutions, monkeypatch):
    monkeypatch.setattr(backend, "_active", "cpu")
    a, b = values(4, 3), values(3, 2)
    out = ops.matmul(t(a, "emu"), t(b, "emu"))
    assert out.device == "emu" and backend.get_device() == "cpu"
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-5)
    assert minitorch.full(3, 2.0, device="emu").numpy().tolist() == [2.0] * 3


def test_empty_outputs_launch_nothing(solutions):
    kernels.reset_launch_counts()
    out = ops.matmul(t(values(0, 3), "emu"), t(values(3, 2), "emu"))
    zeros = ops.matmul(t(values(4, 0), "emu"), t(values(0, 2), "emu"))
    assert out.shape == (0, 2) and np.array_equal(zeros.numpy(), np.zeros((4, 2)))
    assert ops.bias_grad(t(values(0, 3), "emu")).numpy().tolist() == [0.0, 0.0, 0.0]
    assert kernels.launch_count("matmul.cu", "matmul_naive") == 0
    assert kernels.launch_count("backward.cu", "bias_grad") == 0


def test_expand_and_reshape(solutions):
    for device in ("cpu", "emu"):
        e = ops.expand(t(np.float32(2.5).reshape(()), device), (2, 3))
        assert e.shape == (2, 3) and np.all(e.numpy() == 2.5)
        r = ops.reshape(t(values(2, 6), device), (3, -1))
        assert r.shape == (3, 4)
    with pytest.raises(ValueError, match=r"cannot view 12 elements \(shape \(2, 6\)\) as shape \(5, -1\)"):
        ops.reshape(t(values(2, 6)), (5, -1))
    with pytest.raises(ValueError, match=r"single-element tensor, got shape \(2,\)"):
        ops.expand(t(values(2)), (3,))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("call, error, pattern", [
    (lambda: ops.add(t(values(2, 3)), t(values(3, 2))), ValueError, r"add: `b` must have the shape of `a`, \(2, 3\); got \(3, 2\)"),
    (lambda: ops.matmul(t(values(2, 3)), t(values(2, 3))), ValueError, r"a is \(2, 3\) \(M, K\), so b must be \(3, N\); got \(2, 3\)"),
    (lambda: ops.matmul(t(values(3)), t(values(3, 2))), ValueError, r"`a` must be a 2-D tensor \(rows, cols\), got shape \(3,\)"),
    (lambda: ops.add_bias(t(values(4, 3)), t(values(4))), ValueError, r"`bias` must have shape \(3,\).*got \(4,\)"),
    (lambda: ops.mse_loss(t(values(4)), t(values(5))), ValueError, r"`target` must have the shape of `pred`, \(4,\); got \(5,\)"),
    (lambda: ops.mse_loss(t(values(0)), t(values(0))), ValueError, "mean of no elements"),
    (lambda: ops.max(t(values(0))), ValueError, "no largest element"),
    (lambda: ops.column_mean_var(t(values(0, 3))), ValueError, "no rows"),
    (lambda: ops.sgd_momentum_(t(values(3)), t(values(4)), t(values(3)), 0.1, 0.9), ValueError, r"`grad`.*\(3,\); got \(4,\)"),
    (lambda: ops.add(t(values(3)), t(values(3, dtype=np.float64))), TypeError, "`a` float32 and `b` float64"),
    (lambda: ops.add(t(values(3)), values(3)), TypeError, "`b` must be a minitorch Tensor, got ndarray"),
    (lambda: ops.scalar_mul(t(values(3)), "2"), TypeError, "`s` must be a real number, got str"),
    (lambda: ops.scalar_mul(t(values(3)), True), TypeError, "`s` must be a real number, got bool"),
])
def test_errors_name_expected_and_got(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_device_mismatch_names_both_devices(solutions):
    with pytest.raises(ValueError, match=r"`a` on 'cpu' and `b` on 'emu'; move one with .to\('cpu'\)"):
        ops.add(t(values(3)), t(values(3), "emu"))


def test_float64_lives_on_the_cpu_only():
    with pytest.raises(TypeError, match="float64 tensors live on the 'cpu' device only"):
        minitorch.zeros(3, device="emu", dtype="float64")
    with pytest.raises(TypeError, match="float64 tensors live on the 'cpu' device only"):
        minitorch.tensor(np.zeros(3), device="cpu", dtype="float64").to("emu")
    with pytest.raises(TypeError, match="float32 .or float64 on the cpu device., got dtype int64"):
        minitorch.zeros(3, device="cpu", dtype=np.int64)  # (int32 holds ids, from Phase 7 on)
    x = minitorch.tensor([1.0, 2.0], device="cpu", dtype="float64")
    assert x.dtype == np.float64 and x.float().dtype == np.float32 and x.float().double().dtype == np.float64


def test_missing_learner_files_name_the_lab_cell(workspace):
    x = t(values(4, 3), "emu")
    with pytest.raises(minitorch.KernelNotWrittenError, match=r"forward.py.*Exercise 2: launching the forward kernels"):
        ops.add_bias(x, t(values(3), "emu"))
    with pytest.raises(minitorch.KernelNotWrittenError, match=r"reduce.py.*labs/phase4_reductions.ipynb"):
        x.sum()


def test_launcher_without_the_function_is_named(workspace):
    (workspace / "forward.py").write_text("def sigmoid(x, out):\n    pass\n")
    with pytest.raises(AttributeError, match="forward.py defines no function `add_bias`"):
        ops.add_bias(t(values(4, 3), "emu"), t(values(3), "emu"))
