"""Philox-4x32-10 host reference: Random123's known-answer vectors, a pure-Python cross-check, and
statistical tests of the uniform stream (mean, variance, Kolmogorov-Smirnov)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitorch import philox

# Random123 kat_vectors, philox4x32 with 10 rounds: (counter, key, expected output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _philox_pure(ctr: tuple[int, ...], key: tuple[int, int]) -> tuple[int, ...]:
    """Python integers only: an implementation independent of NumPy's uint arithmetic."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    mask = 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
    return c0, c1, c2, c3


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answer_vectors(ctr, key, expected):
    assert _philox_pure(ctr, key) == expected
    got = philox.philox4x32(np.array([ctr], dtype=np.uint32), key)[0]
    assert tuple(int(x) for x in got) == expected


def test_numpy_matches_pure_python_on_many_counters():
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2**32, size=(200, 4), dtype=np.uint64).astype(np.uint32)
    key = (0x12345678, 0x9ABCDEF0)
    got = philox.philox4x32(ctr, key)
    for row, out in zip(ctr, got, strict=True):
        assert tuple(int(x) for x in out) == _philox_pure(tuple(int(x) for x in row), key)


def test_stream_layout_and_offsets():
    seed = (7 << 32) | 3
    words = philox.random_uint32(10, seed, offset=5)
    for i in range(10):
        block = _philox_pure((i // 4, 5, 0, 0), (3, 7))
        assert int(words[i]) == block[i % 4]
    assert not np.array_equal(philox.random_uint32(8, seed, 0), philox.random_uint32(8, seed, 1))
    assert np.array_equal(philox.random_uint32(8, seed), philox.random_uint32(13, seed)[:8])


def _ks_statistic(sample: np.ndarray, cdf) -> float:
    x = np.sort(np.asarray(sample, dtype=np.float64))
    n = x.size
    f = cdf(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def test_uniform_is_open_interval_exact_and_uniform():
    n = 200_000
    u = philox.uniform(n, seed=2024)
    assert u.dtype == np.float32 and u.min() > 0 and u.max() < 1
    k = (philox.random_uint32(n, 2024) >> np.uint32(9)).astype(np.float64)
    assert np.array_equal(u.astype(np.float64), (2 * k + 1) * 2.0**-24)  # exact, no rounding
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    d = _ks_statistic(u, lambda x: x)
    assert d < 1.63 / math.sqrt(n)  # 1% critical value of the asymptotic Kolmogorov distribution
    # The test can fail: a biased stream (u**1.05) is rejected.
    assert _ks_statistic(u**1.05, lambda x: x) > 1.63 / math.sqrt(n)
