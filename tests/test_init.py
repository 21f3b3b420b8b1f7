"""minitorch.init: Xavier/Kaiming scales, same seed -> same numbers on cpu and emu, and the Philox
normal stream's mean, variance and Kolmogorov-Smirnov distance to N(0, 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch
from minitorch import init, philox
from tests.test_philox import _ks_statistic

KS_1PCT = 1.63  # asymptotic Kolmogorov critical value at the 1% level, times sqrt(n)


def _normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def test_normal_stream_statistics():
    n = 100_000
    z = philox.normal(n, seed=11).astype(np.float64)
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 0.02
    assert _ks_statistic(z, _normal_cdf) < KS_1PCT / math.sqrt(n)
    assert _ks_statistic(1.1 * z, _normal_cdf) > KS_1PCT / math.sqrt(n)  # a wrong scale is caught


def _weight(device, shape=(300, 200)):
    return minitorch.zeros(shape, device=device)


@pytest.mark.parametrize("fn,kind,scale", [
    (init.xavier_uniform_, "uniform", math.sqrt(6 / 500)),
    (init.xavier_normal_, "normal", math.sqrt(2 / 500)),
    (lambda t, seed: init.kaiming_uniform_(t, nonlinearity="relu", seed=seed), "uniform", math.sqrt(6 / 300)),
    (lambda t, seed: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu", seed=seed), "normal",
     math.sqrt(2 / 200)),
])
def test_scales_and_distributions(fn, kind, scale):
    w = fn(_weight("cpu"), seed=5).numpy().astype(np.float64).ravel()
    n = w.size
    if kind == "uniform":
        assert np.abs(w).max() <= scale and np.abs(w).max() > 0.99 * scale
        assert _ks_statistic(w, lambda x: (x + scale) / (2 * scale)) < KS_1PCT / math.sqrt(n)
    else:
        assert abs(w.std() / scale - 1) < 0.02
        assert _ks_statistic(w / scale, _normal_cdf) < KS_1PCT / math.sqrt(n)


def test_same_seed_same_numbers_on_every_device():
    a = init.kaiming_normal_(_weight("cpu", (17, 9)), seed=3).numpy()
    b = init.kaiming_normal_(_weight("emu", (17, 9)), seed=3).numpy()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, init.kaiming_normal_(_weight("cpu", (17, 9)), seed=4).numpy())


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.xavier_uniform_(minitorch.zeros((5,), device="cpu"))
    with pytest.raises(ValueError, match="mode must be"):
        init.kaiming_normal_(_weight("cpu"), mode="fan")
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        init.calculate_gain("swish")


@pytest.fixture
def init_files(workspace, monkeypatch):
    """init.cu / init.py (reference solution) and Phase 1's memory files in the workspace."""
    from tests.solution_files import solution_files

    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    files = {**solution_files("phase1_memory.ipynb"), **solution_files("phase5_fast.ipynb")}
    for name in ("memory.cu", "memory.py", "init.cu", "init.py"):
        (workspace / name).write_text(files[name])
    return workspace


@pytest.mark.parametrize("device", ["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_device_draws_use_the_learner_generator_and_match_the_host(init_files, device, monkeypatch):
    """On cuda/emu the weights come from init.cu, in place; the uniforms are the host's bits exactly and
    the normals within one float32 ulp (the same numbers on every device)."""
    from minitorch import kernels

    kernels.reset_launch_counts()
    w = _weight(device, (301, 77))
    data_before = w.data
    init.xavier_uniform_(w, seed=2**40 + 3)
    assert kernels.launch_count("init.cu", "philox_uniform") == 1 and w.data is data_before
    host = init.xavier_uniform_(_weight("cpu", (301, 77)), seed=2**40 + 3).numpy()
    assert np.array_equal(w.numpy(), host)
    z = init.kaiming_normal_(_weight(device, (301, 77)), nonlinearity="relu", seed=9).numpy()
    z_host = init.kaiming_normal_(_weight("cpu", (301, 77)), nonlinearity="relu", seed=9).numpy()
    assert kernels.launch_count("init.cu", "philox_normal") == 1
    ulps = np.abs(z.view(np.int32).astype(np.int64) - z_host.view(np.int32))
    assert ulps.max() <= 1 and np.count_nonzero(ulps) <= 5
    monkeypatch.setenv("MINITORCH_PHASE", "phase4")  # grading Phase 4: the host draws, as before Phase 5
    kernels.reset_launch_counts()
    assert np.array_equal(init.xavier_uniform_(_weight(device, (301, 77)), seed=2**40 + 3).numpy(), host)
    assert kernels.launch_count("init.cu", "philox_uniform") == 0


def test_seeds_outside_64_bits_are_refused():
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        init.xavier_uniform_(_weight("cpu"), seed=-1)
