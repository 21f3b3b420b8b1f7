"""Philox-4x32-10 (Salmon et al., SC'11; the generator behind cuRAND's ``curand_init`` Philox state),
in NumPy, vectorised over counters.

This is the host reference the learner's CUDA C generator (``init.cu``, Phase 5) must match bit for
bit, and the cpu path of ``minitorch.init``. Stream layout: element ``i`` of a draw with ``seed`` is
word ``i % 4`` of the block for counter ``(i // 4, offset_lo, offset_hi, 0)`` under key
``(seed_lo, seed_hi)``.

Floats are made so that a GPU gives the same bits whether or not it contracts ``a*b+c`` into an FMA:
a uniform keeps the top 23 bits ``k`` of a word and returns ``(2k+1) * 2**-24``, exactly representable
in float32, in the open interval (0, 1).
"""

from __future__ import annotations

import numpy as np

__all__ = ["M0", "M1", "W0", "W1", "normal", "philox4x32", "random_uint32", "uniform"]

M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10


def _mulhilo(a: int, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    prod = np.uint64(a) * b.astype(np.uint64)
    return (prod >> np.uint64(32)).astype(np.uint32), (prod & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def philox4x32(counter: np.ndarray, key: tuple[int, int], rounds: int = ROUNDS) -> np.ndarray:
    """Encrypt counters of shape (n, 4) (uint32) under ``key`` = (k0, k1); returns (n, 4) uint32."""
    c = np.asarray(counter, dtype=np.uint32).reshape(-1, 4)
    c0, c1, c2, c3 = (c[:, j].copy() for j in range(4))
    k0, k1 = np.uint32(key[0] & 0xFFFFFFFF), np.uint32(key[1] & 0xFFFFFFFF)
    for r in range(rounds):
        if r:
            k0 = np.uint32((int(k0) + W0) & 0xFFFFFFFF)
            k1 = np.uint32((int(k1) + W1) & 0xFFFFFFFF)
        hi0, lo0 = _mulhilo(M0, c0)
        hi1, lo1 = _mulhilo(M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack([c0, c1, c2, c3], axis=1)


def random_uint32(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """The first ``n`` 32-bit words of stream ``offset`` under ``seed`` (both 64-bit integers)."""
    if n < 0:
        raise ValueError(f"random_uint32: n must be >= 0, got {n}")
    blocks = (n + 3) // 4
    ctr = np.zeros((blocks, 4), dtype=np.uint32)
    idx = np.arange(blocks, dtype=np.uint64)
    ctr[:, 0] = (idx & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ctr[:, 1] = np.uint32(offset & 0xFFFFFFFF)
    ctr[:, 2] = np.uint32((offset >> 32) & 0xFFFFFFFF)
    return philox4x32(ctr, (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)).reshape(-1)[:n]


def uniform(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """``n`` float32 uniforms in (0, 1): ``(2 * (word >> 9) + 1) * 2**-24``, exact in float32."""
    k = random_uint32(n, seed, offset) >> np.uint32(9)
    return ((2 * k.astype(np.float32) + 1) * np.float32(2.0 ** -24)).astype(np.float32)


def normal(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """``n`` float32 standard normals by Box-Muller on consecutive uniform pairs (u1, u2):
    ``r = sqrt(-2 ln u1)``, ``z0 = r cos(2 pi u2)``, ``z1 = r sin(2 pi u2)``, computed in float64 and
    rounded to float32 (a GPU's double-precision log/sin/cos may differ from the host's by an ulp of
    float64, which changes the float32 result only at rare rounding boundaries)."""
    u = uniform(2 * ((n + 1) // 2), seed, offset).astype(np.float64)
    u1, u2 = u[0::2], u[1::2]
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.empty(u.size, dtype=np.float64)
    z[0::2], z[1::2] = r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)
    return z[:n].astype(np.float32)
