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
