"""Autograd: finite-difference gradient checks of every operation on the cpu device in float64, the emulator's
float32 gradients against them, accumulation, no_grad, requires_grad, and the errors of backward.

The tape is run by the reference backprop.py (solutions/phase3b_backward.ipynb), written into the test's
workspace with the other solution files.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import Context, Function, functional, kernels, ops
from minitorch.gradcheck import gradcheck, numerical_gradients, relative_error
from tests.phase3_support import PHASE3_NOTEBOOKS, write_solutions
from tests.solution_files import SOLUTIONS


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace)


def leaf(values, device="cpu", dtype="float64"):
    return minitorch.tensor(np.asarray(values), device=device, dtype=dtype, requires_grad=True)


OPS = {  # name: (function, input shapes)
    "add": (lambda a, b: a + b, [(3, 5), (3, 5)]),
    "add_bias": (lambda x, b: x + b, [(4, 3), (3,)]),
    "bias_add": (lambda b, x: b + x, [(3,), (4, 3)]),
    "sub": (lambda a, b: a - b, [(3, 5), (3, 5)]),
    "mul": (lambda a, b: a * b, [(7,), (7,)]),
    "scalar_mul": (lambda a: 2.5 * a, [(2, 3)]),
    "neg": (lambda a: -a, [(4,)]),
    "div": (lambda a: a / 4.0, [(4,)]),
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 2)]),
    "matmul_1x1": (lambda a, b: a @ b, [(1, 1), (1, 1)]),
    "transpose": (lambda a: a.T, [(3, 4)]),
    "relu": (lambda a: a.relu(), [(4, 5)]),
    "sigmoid": (lambda a: a.sigmoid(), [(4, 5)]),
    "mse_loss": (lambda p, t: functional.mse_loss(p, t), [(4, 3), (4, 3)]),
    "reshape": (lambda a: a.reshape(6, 2), [(3, 4)]),
    "two_layers": (lambda x, w, b, v: ((x @ w + b).sigmoid() @ v).relu(), [(5, 3), (3, 4), (4,), (4, 2)]),
    "square": (lambda a: a * a, [(5,)]),
    "sum": (lambda a: a.sum(), [(3, 4)]),
    "mean": (lambda a: a.mean(), [(3, 4)]),
}
NEEDS_PHASE4 = {"sum", "mean"}  # on cuda/emu they run Phase 4's reductions


def op_inputs(name: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, len(name)])
    vals = [rng.standard_normal(s) for s in OPS[name][1]]
    return [np.where(np.abs(v) < 0.05, 0.5, v) for v in vals]  # away from relu's kink


@pytest.mark.parametrize("name", list(OPS))
def test_cpu_float64_gradients_match_finite_differences(solutions, name):
    fn, _ = OPS[name]
    errors = gradcheck(fn, [leaf(v) for v in op_inputs(name)])
    assert max(errors) < 1e-4, errors


@pytest.mark.parametrize("device", ["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", list(OPS))
def test_device_float32_gradients_match_float64(solutions, name, device):
    if name in NEEDS_PHASE4:
        if not (SOLUTIONS / "phase4_reductions.ipynb").exists():
            pytest.skip("sum and mean run Phase 4's reduce.py on cuda and emu")
        write_solutions(solutions, PHASE3_NOTEBOOKS + ("phase4_reductions.ipynb",))
    fn, _ = OPS[name]
    values = op_inputs(name, seed=1)
    on_cpu = [leaf(v) for v in values]
    out64 = fn(*on_cpu)
    weights = np.asarray(np.random.default_rng(5).standard_normal(out64.shape))
    out64.backward(minitorch.tensor(weights, device="cpu", dtype="float64"))
    on_device = [leaf(v.astype(np.float32), device=device, dtype=None) for v in values]
    out32 = fn(*on_device)
    assert out32.device == device and out32.grad_fn is not None
    np.testing.assert_allclose(out32.numpy(), out64.numpy(), rtol=1e-5, atol=1e-6)
    out32.backward(minitorch.tensor(weights.astype(np.float32), device=device))
    for a, b in zip(on_device, on_cpu, strict=True):
        assert a.grad.device == device and a.grad.dtype == np.float32
        assert relative_error(a.grad.numpy(), b.grad.numpy()) < 1e-5


def test_numerical_gradients_are_independent_of_backprop(workspace):
    # no backprop.py in this workspace: finite differences need only the forward pass
    x = minitorch.tensor([[1.0, -2.0], [0.5, 3.0]], device="cpu", dtype="float64")
    [g] = numerical_gradients(lambda a: a.sigmoid(), [x], np.ones((2, 2)))
    s = 1 / (1 + np.exp(-x.numpy()))
    np.testing.assert_allclose(g, s * (1 - s), rtol=1e-8)
    with pytest.raises(TypeError, match="float64 cpu tensor"):
        numerical_gradients(lambda a: a, [minitorch.zeros(2, device="cpu")], np.ones(2))
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0 and relative_error(np.ones(2), np.ones(3)) == float("inf")


def test_gradients_accumulate_and_zero_grad(solutions):
    w = leaf([[1.0, -1.0], [0.5, 2.0]])
    x = minitorch.tensor([[1.0, 2.0]], device="cpu", dtype="float64")
    (x @ w).backward(minitorch.ones((1, 2), device="cpu", dtype="float64"))
    first = w.grad.numpy()
    np.testing.assert_allclose(first, [[1, 1], [2, 2]])
    (x @ w).backward(minitorch.ones((1, 2), device="cpu", dtype="float64"))
    np.testing.assert_allclose(w.grad.numpy(), 2 * first)
    assert x.grad is None  # no requires_grad: no gradient


def test_a_tensor_used_twice_gets_the_sum(solutions):
    for device, dtype in (("cpu", "float64"), ("emu", None)):
        w = leaf(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32), device=device, dtype=dtype)
        x = minitorch.tensor(np.array([[1.0, 2.0]], np.float32), device=device, dtype=dtype or "float32")
        out = (x @ w).sigmoid() @ w
        out.backward(minitorch.ones(out.shape, device=device, dtype=dtype))
        w64, x64 = w.numpy().astype(np.float64), x.numpy().astype(np.float64)

        def forward(wv, xv=x64):
            return (1 / (1 + np.exp(-(xv @ wv)))) @ wv

        numeric = np.zeros_like(w64)
        for i in np.ndindex(w64.shape):
            plus, minus = w64.copy(), w64.copy()
            plus[i] += 1e-6
            minus[i] -= 1e-6
            numeric[i] = (forward(plus).sum() - forward(minus).sum()) / 2e-6
        assert relative_error(w.grad.numpy(), numeric) < 1e-5


def test_intermediate_tensors_keep_no_grad(solutions):
    w = leaf([[1.0, 2.0]])
    h = w.T
    y = h.sigmoid()
    y.backward(minitorch.ones((2, 1), device="cpu", dtype="float64"))
    assert h.grad is None and y.grad is None and w.grad is not None
    assert not h.is_leaf and w.is_leaf
    assert not w.grad.requires_grad and w.grad.grad_fn is None


def test_requires_grad_propagates_and_only_leaves_change_it(solutions):
    a = minitorch.tensor([1.0, 2.0], device="cpu")
    b = minitorch.tensor([3.0, 4.0], device="cpu", requires_grad=True)
    assert not (a * a).requires_grad and (a * b).requires_grad and (a * b).grad_fn.function.__name__ == "Mul"
    c = a * b
    with pytest.raises(RuntimeError, match="only be changed on a leaf"):
        c.requires_grad = False
    d = c.detach()
    assert d.is_leaf and not d.requires_grad and d.data is c.data
    assert a.requires_grad_() is a and a.requires_grad
    assert "grad_fn=<Mul>" in repr(c) and "requires_grad=True" in repr(b)


def test_no_grad_records_nothing(solutions):
    w = leaf([1.0, 2.0])
    assert minitorch.is_grad_enabled()
    with minitorch.no_grad():
        assert not minitorch.is_grad_enabled()
        y = w * 3.0
        with minitorch.enable_grad():
            z = w * 3.0
    assert minitorch.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad

    @minitorch.no_grad()
    def evaluate(t):
        return t * 2.0

    assert not evaluate(w).requires_grad and minitorch.is_grad_enabled()
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward(minitorch.ones(2, device="cpu", dtype="float64"))


def test_backward_errors(solutions):
    w = leaf([1.0, 2.0])
    y = w * 2.0
    with pytest.raises(RuntimeError, match=r"single-element tensor .a loss.; this one has shape \(2,\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"expected a float64 tensor of shape \(2,\) on 'cpu', got float64 \(3,\)"):
        y.backward(minitorch.ones(3, device="cpu", dtype="float64"))
    with pytest.raises(ValueError, match="float32"):
        y.backward(minitorch.ones(2, device="cpu"))
    with pytest.raises(TypeError, match="takes a Tensor, got ndarray"):
        y.backward(np.ones(2))
    s = (w * w).sum()
    s.backward()  # a single element: the gradient 1 is implied
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])


def test_backward_needs_backprop_py(workspace):
    y = minitorch.tensor([1.0], device="cpu", requires_grad=True) * 2.0
    with pytest.raises(minitorch.KernelNotWrittenError, match=r"backprop.py.*Exercise 6: a tape-based autograd"):
        y.backward()


def test_operator_errors():
    a = minitorch.tensor(np.ones((2, 3), np.float32), device="cpu")
    with pytest.raises(ValueError, match=r"\+: shapes \(2, 3\) and \(2,\) do not match"):
        a + minitorch.ones(2, device="cpu")
    with pytest.raises(ValueError, match=r"-: shapes \(2, 3\) and \(3,\) differ"):
        a - minitorch.ones(3, device="cpu")
    with pytest.raises(TypeError):
        a + 1.0  # no scalar-add kernel
    with pytest.raises(ValueError, match="mean of no elements"):
        minitorch.zeros(0, device="cpu").mean()


class Cube(Function):
    """A Function written outside minitorch: x**3 with its own backward."""

    @staticmethod
    def forward(ctx: Context, x):
        ctx.save_for_backward(x)
        return ops.mul(ops.mul(x, x), x)

    @staticmethod
    def backward(ctx: Context, grad):
        (x,) = ctx.saved_tensors
        return ops.scalar_mul(ops.mul(grad, ops.mul(x, x)), 3.0)


class WrongShape(Function):
    @staticmethod
    def forward(ctx, x):
        return ops.scalar_mul(x, 1.0)

    @staticmethod
    def backward(ctx, grad):
        return ops.reshape(grad, (-1, 1))


class TwoGrads(Function):
    @staticmethod
    def forward(ctx, x):
        return ops.scalar_mul(x, 1.0)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


def test_custom_functions(solutions):
    x = leaf([1.0, -2.0, 0.5])
    assert max(gradcheck(Cube.apply, [x])) < 1e-6
    ctx = Cube.apply(x).grad_fn
    assert ctx.function is Cube and ctx.inputs == (x,) and ctx.needs_input_grad == (True,) and "Cube" in repr(ctx)
    ones = minitorch.ones(3, device="cpu", dtype="float64")
    with pytest.raises(RuntimeError, match=r"WrongShape.backward: the gradient of input 0 must have the input's shape \(3,\)"):
        WrongShape.apply(x).backward(ones)
    with pytest.raises(RuntimeError, match=r"TwoGrads.backward returned 2 gradient\(s\) for 1 input\(s\)"):
        TwoGrads.apply(x).backward(ones)


def test_deep_graph(solutions):
    x = leaf([1.0])
    y = x
    for _ in range(3000):
        y = y * 1.0
    y.backward()
    assert x.grad.numpy().tolist() == [1.0]


def test_topological_order_of_a_diamond(solutions):
    backprop = kernels.load_module("backprop.py")
    a, b = leaf([1.0]), leaf([2.0])
    c = a * b
    d = c + a
    e = d * c
    order = backprop.topological_order(e)
    position = {id(t): i for i, t in enumerate(order)}
    assert len(order) == 5 and set(position) == {id(t) for t in (a, b, c, d, e)} and order[0] is e
    for t in order:
        for x in t.grad_fn.inputs if t.grad_fn else ():
            assert position[id(t)] < position[id(x)]


def test_mse_loss_gradient_for_the_target(solutions):
    p, target = leaf([1.0, 2.0]), leaf([0.0, 4.0])
    functional.mse_loss(p, target).backward()
    np.testing.assert_allclose(p.grad.numpy(), [1.0, -2.0])
    np.testing.assert_allclose(target.grad.numpy(), [-1.0, 2.0])
    with pytest.raises(ValueError, match=r"target must have the shape of pred, \(2,\); got \(3,\)"):
        functional.mse_loss(p, leaf([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="`x` must be a minitorch Tensor, got list"):
        functional.sigmoid([1.0])
