"""optim.Adam / AdamW against a float64 reference over several steps: the cpu device's NumPy path and
the learner's fused adam_update kernel (reference solution) on the emulator, grid-stride included."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from dev.phase5_training_sources import SOURCES, file_text
from minitorch import optim
from minitorch.ops.dispatch import launch


def reference_adam(p, grads, lr, betas, eps, wd, decoupled):
    """float64, written from the papers' formulas, independent of minitorch."""
    p = p.astype(np.float64).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    b1, b2 = betas
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p, m, v


def _run(device, cls, shape, steps, dtype, **kw):
    rng = np.random.default_rng(3)
    p0 = rng.normal(size=shape)
    grads = [rng.normal(size=shape) for _ in range(steps)]
    p = minitorch.tensor(p0.astype(dtype), device=device, dtype=dtype, requires_grad=True)
    opt = cls([p], **kw)
    for g in grads:
        p.grad = minitorch.tensor(g.astype(dtype), device=device, dtype=dtype)
        opt.step()
    return p, opt, reference_adam(p0, grads, kw["lr"], kw.get("betas", (0.9, 0.999)), kw.get("eps", 1e-8),
                                  kw["weight_decay"], cls is optim.AdamW)


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_cpu_float64_matches_reference(cls):
    p, opt, (ref_p, ref_m, ref_v) = _run("cpu", cls, (5, 7), 6, np.float64, lr=0.01, weight_decay=0.1)
    np.testing.assert_allclose(p.numpy(), ref_p, rtol=1e-12, atol=1e-14)
    state = opt.state_dict()
    assert state["step"] == 6
    np.testing.assert_allclose(state["m"][0], ref_m, rtol=1e-12)
    np.testing.assert_allclose(state["v"][0], ref_v, rtol=1e-12)


def test_adam_and_adamw_differ_and_bias_correction_matters():
    pa, _, _ = _run("cpu", optim.Adam, (9,), 3, np.float64, lr=0.01, weight_decay=0.5)
    pw, _, _ = _run("cpu", optim.AdamW, (9,), 3, np.float64, lr=0.01, weight_decay=0.5)
    assert np.max(np.abs(pa.numpy() - pw.numpy())) > 1e-4
    # The first step of Adam moves every coordinate by ~lr (bias-corrected); without the correction
    # it would move by lr * (1-b1)/sqrt(1-b2) ~ 3.2 lr.
    p, _, _ = _run("cpu", optim.Adam, (9,), 1, np.float64, lr=0.01, weight_decay=0.0)
    rng = np.random.default_rng(3)
    np.testing.assert_allclose(np.abs(p.numpy() - rng.normal(size=(9,))), 0.01, rtol=1e-5)


def test_state_dict_round_trip_continues_identically():
    _, opt, _ = _run("cpu", optim.Adam, (4,), 3, np.float64, lr=0.01, weight_decay=0.0)
    q = minitorch.tensor(np.zeros(4), device="cpu", dtype=np.float64, requires_grad=True)
    other = optim.Adam([q], lr=0.5)
    other.load_state_dict(opt.state_dict())
    assert other.step_count == 3 and other.lr == 0.01
    np.testing.assert_array_equal(other.m[id(q)].numpy(), opt.state_dict()["m"][0])
    with pytest.raises(ValueError, match="shape"):
        optim.Adam([minitorch.tensor(np.zeros(5), device="cpu", dtype=np.float64, requires_grad=True)]).load_state_dict(
            opt.state_dict())


def test_bad_hyperparameters_are_named():
    p = minitorch.tensor(np.zeros(3), device="cpu", dtype=np.float64, requires_grad=True)
    with pytest.raises(ValueError, match="beta2 must be a number in"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr must be"):
        optim.AdamW([p], lr=-1)


@pytest.fixture
def adam_files(workspace):
    for name, cell in SOURCES.items():
        (workspace / name).write_text(file_text(cell))
    return workspace


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_emu_kernel_matches_float64_reference(adam_files, cls):
    p, _, (ref_p, _, _) = _run("emu", cls, (3, 37), 5, np.float32, lr=0.01, weight_decay=0.1)
    np.testing.assert_allclose(p.numpy(), ref_p, rtol=1e-5, atol=1e-6)


def test_emu_kernel_is_grid_stride(adam_files):
    from minitorch import backend

    n = 1000
    rng = np.random.default_rng(4)
    p0, g = rng.normal(size=n), rng.normal(size=n)
    be = backend.get_backend("emu")
    arrays = [be.asarray(a.astype(np.float32)) for a in (p0, g, np.zeros(n), np.zeros(n))]
    launch("emu", "adam.py", "adam_update", *arrays, 0.01, 0.9, 0.999, 1e-8, 0.0, 1, False, blocks=1)
    ref_p, _, _ = reference_adam(p0, [g], 0.01, (0.9, 0.999), 1e-8, 0.0, False)
    np.testing.assert_allclose(be.asnumpy(arrays[0]), ref_p, rtol=1e-5, atol=1e-6)


def test_kernel_without_bias_correction_is_rejected(workspace):
    """A careless kernel that ignores bias1/bias2 must fail the float64 comparison above."""
    bad = file_text(SOURCES["adam.cu"]).replace("(mi / bias1) / (sqrtf(vi / bias2) + eps)",
                                                "mi / (sqrtf(vi) + eps)")
    assert bad != file_text(SOURCES["adam.cu"])
    (workspace / "adam.cu").write_text(bad)
    (workspace / "adam.py").write_text(file_text(SOURCES["adam.py"]))
    p, _, (ref_p, _, _) = _run("emu", optim.Adam, (3, 37), 5, np.float32, lr=0.01, weight_decay=0.1)
    assert not np.allclose(p.numpy(), ref_p, rtol=1e-5, atol=1e-6)
