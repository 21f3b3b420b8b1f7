"""Parity cases of Phase 8b's kernels (flash.cu), for tests/test_parity.py.

The inputs make every result exact in float32 whatever the order of the sums and the GPU's approximate exp2 and
log2: query i is 32·e_c (one dimension c = i mod C set), key j holds 0 in dimension c when j is one of the row
class's chosen keys and -32 otherwise, so every score is 0 or -1024. exp2 of 0 is 1 and exp2(-1024·log2(e)/√D)
underflows to 0 on every device; each row's sum is the number of its chosen keys, a power of two, all of them
keys its causal mask lets it see; the values are small integers, so O (a mean of 1, 2 or 4 of them) and the
logsumexp (log2 of a power of two, times ln 2, in float32) are exact. The backward's case has one chosen key a
row: P is 1 or 0, Delta and dV are sums of integer products, and dS (so dQ and dK) is 0 exactly. Rung 5's case
also reads dropout's mask back whole (Q = K = 0, V the identity) and compares it with minitorch.philox's words:
on a GPU, `test_gpu_matches_emulator` then shows the mask is the same bits on cuda and on the emulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from minitorch import backend, kernels

NOTEBOOKS = ("phase8a_tensor_cores.ipynb", "phase8b_flash.ipynb")
FORMATS = ("bfloat16", "float16")
STORAGE = {"float16": np.float16, "bfloat16": np.uint16}
FORWARD = {"flash_fwd_1_scalar": "scalar", "flash_fwd_2_mma": "mma", "flash_fwd_3_ldmatrix": "ldmatrix",
           "flash_fwd_4_cp_async": "cp_async", "flash_fwd_5_tuned": "tuned", "flash_fwd_6_lean": "lean",
           "flash_fwd_7_split_kv": "split_kv"}
D = 64
LN2 = np.float32(0.69314718055994531)


def _bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """Small integers (exact in both formats) as the format's array."""
    if dtype == "float16":
        return x.astype(np.float16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _values(x16: np.ndarray, dtype: str) -> np.ndarray:
    x16 = np.asarray(x16)
    if dtype == "float16":
        return x16.astype(np.float64)
    return (x16.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _problem(n: int, rng: np.random.Generator, single: bool) -> tuple:
    """(q, k, v, chosen) float arrays of (2, T, D) and the chosen keys of each row (2, T, T) booleans."""
    heads, t = 2, n % 150 + 1
    classes = min(D, t)
    q = np.zeros((heads, t, D))
    k = np.full((heads, t, D), -32.0)
    chosen = np.zeros((heads, t, t), bool)
    for h in range(heads):
        for c in range(classes):
            size = 1 if single else min(1 << int(rng.integers(0, 3)), 1 << int(math.log2(c + 1)))
            keys = rng.choice(c + 1, size=size, replace=False)  # keys <= c: seen by every row of class c
            k[h, keys, c] = 0.0
            for row in range(c, t, classes):
                q[h, row, c] = 32.0
                chosen[h, row, keys] = True
    v = rng.integers(-8, 9, (heads, t, D)).astype(np.float64)
    return q, k, v, chosen


def _round16(x: np.ndarray, dtype: str) -> np.ndarray:
    """Exact values rounded once to the 16-bit format (to nearest even), as float64."""
    x32 = np.asarray(x, np.float32)
    if dtype == "float16":
        return x32.astype(np.float16).astype(np.float64)
    b = x32.view(np.uint32).astype(np.uint64)
    return _values(((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16), dtype)


def _forward(variant: str) -> Callable:
    def case(n: int, rng: np.random.Generator):
        dtype, causal = FORMATS[n % 2], bool(n % 3)
        q, k, v, chosen = _problem(n, rng, single=False)
        heads, t, _ = q.shape
        o = backend.asarray(np.full(q.shape, 0xFFFF, np.uint16).view(STORAGE[dtype]))
        lse = backend.asarray(np.full((heads, t), np.nan, np.float32))
        kernels.load_module("flash.py").forward(*(backend.asarray(_bits(x, dtype)) for x in (q, k, v)), o, lse,
                                                dtype, causal=causal, variant=variant)
        count = chosen.sum(-1, keepdims=True)
        want_o = (chosen * 1.0) @ v / count
        want_lse = (np.log2(count[..., 0]).astype(np.float32) * LN2).astype(np.float64)
        got = np.concatenate([_values(backend.asnumpy(o), dtype).ravel(), backend.asnumpy(lse).ravel()])
        want = np.concatenate([_round16(want_o, dtype).ravel(), want_lse.ravel()])
        if variant == "tuned":  # and dropout's mask, read back whole
            mask, expected = _dropout_mask(n, dtype)
            got, want = np.concatenate([got, mask]), np.concatenate([want, expected])
        return got, want
    return case


def _dropout_mask(n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Q = K = 0 (every probability of a row 1/T) and V the identity (T = D): O is dropout's scaled mask itself,
    (1/T)·bf16(1/(1-p)) where kept and 0 where dropped, exact on every device; the mask from minitorch.philox."""
    from minitorch import philox

    heads, t, p, seed, offset = 2, D, 0.25, 0x9E3779B97F4A7C15 + n, n % 7
    zeros = backend.asarray(_bits(np.zeros((heads, t, D)), dtype))
    eye = backend.asarray(_bits(np.broadcast_to(np.eye(t), (heads, t, D)), dtype))
    o = backend.asarray(np.full((heads, t, D), 0xFFFF, np.uint16).view(STORAGE[dtype]))
    lse = backend.asarray(np.zeros((heads, t), np.float32))
    step = backend.asarray(np.array([offset], np.int64))  # the offset from device memory
    kernels.load_module("flash.py").forward(zeros, zeros, eye, o, lse, dtype, dropout_p=p, seed=seed, step=step)
    h, i, j4 = np.meshgrid(np.arange(heads), np.arange(t), np.arange(t // 4), indexing="ij")
    counters = np.stack([j4.ravel(), i.ravel(), h.ravel(), np.full(h.size, offset)], 1).astype(np.uint32)
    words = philox.philox4x32(counters, (seed & 0xFFFFFFFF, seed >> 32)).reshape(heads, t, t)
    kept = words >= np.uint32(math.floor(p * 2 ** 32))
    scaled = _round16(np.float32(1 / (1 - p)), dtype) / t  # P·(1/(1-p)) rounded to 16 bits, then O / l
    return _values(backend.asnumpy(o), dtype).ravel(), np.where(kept, _round16(scaled, dtype), 0.0).ravel()


def _backward_inputs(n: int, rng: np.random.Generator):
    """The forward (rung 5) of a one-chosen-key problem, dO, and the exact Delta, dV of it."""
    fl = kernels.load_module("flash.py")
    dtype, causal = FORMATS[n % 2], bool(n % 3)
    q, k, v, chosen = _problem(n, rng, single=True)
    do = rng.integers(-4, 5, q.shape).astype(np.float64)
    arrays = [backend.asarray(_bits(x, dtype)) for x in (q, k, v, do)]
    o = backend.asarray(np.zeros(q.shape, STORAGE[dtype]))
    lse = backend.asarray(np.zeros(q.shape[:2], np.float32))
    fl.forward(*arrays[:3], o, lse, dtype, causal=causal)
    p = chosen * 1.0
    exact = {"o": p @ v, "delta": (do * (p @ v)).sum(-1), "dv": np.swapaxes(p, -1, -2) @ do}
    return fl, dtype, causal, arrays, o, lse, exact


def _dot_do_o(n: int, rng: np.random.Generator):
    fl, dtype, _, (_, _, _, do), o, _, exact = _backward_inputs(n, rng)
    heads, t, _ = exact["o"].shape
    rows = heads * t
    delta = backend.asarray(np.full((heads, t), np.nan, np.float32))
    dq_acc = backend.asarray(np.full((heads, t, D), np.nan, np.float32))
    name = fl.backward_kernels(fl.FORMATS[dtype][1], D)[0]
    kernels.load_kernel("flash.cu", name, name_expressions=[name])(
        ((rows + 7) // 8,), (256,), (o, do, delta, dq_acc, np.int32(rows)))
    got = np.concatenate([backend.asnumpy(delta).ravel(), backend.asnumpy(dq_acc).ravel()])
    return got, np.concatenate([exact["delta"].ravel(), np.zeros(heads * t * D)])


def _backward(n: int, rng: np.random.Generator):
    """The whole backward (Delta, the main kernel, dQ's conversion): dQ = dK = 0, dV exact."""
    fl, dtype, causal, (q, k, v, do), o, lse, exact = _backward_inputs(n, rng)
    grads = [backend.asarray(np.full(exact["o"].shape, 0xFFFF, np.uint16).view(STORAGE[dtype])) for _ in range(3)]
    fl.backward(q, k, v, o, lse, do, *grads, dtype, causal=causal)
    got = np.concatenate([_values(backend.asnumpy(g), dtype).ravel() for g in grads])
    zeros = np.zeros(exact["dv"].size)
    return got, np.concatenate([zeros, zeros, _round16(exact["dv"], dtype).ravel()])


def _dq_convert(n: int, rng: np.random.Generator):
    """dQ = dQacc / 8 (the scale at D = 64), rounded to 16 bits: small integers stay exact."""
    fl = kernels.load_module("flash.py")
    dtype = FORMATS[n % 2]
    acc = rng.integers(-64, 65, n).astype(np.float32)
    out = backend.asarray(np.full(n, 0xFFFF, np.uint16).view(STORAGE[dtype]))
    name = fl.backward_kernels(fl.FORMATS[dtype][1], D)[2]
    kernels.load_kernel("flash.cu", name, name_expressions=[name])(
        ((n + 255) // 256,), (256,), (backend.asarray(acc), out, np.float32(1 / math.sqrt(D)), np.int64(n)))
    return _values(backend.asnumpy(out), dtype), acc.astype(np.float64) / 8


PHASE8B_CASES: dict[tuple[str, str], Callable] = {
    **{("flash.cu", kernel): _forward(variant) for kernel, variant in FORWARD.items()},
    ("flash.cu", "flash_bwd_dot_do_o"): _dot_do_o,
    ("flash.cu", "flash_bwd_mma"): _backward,
    ("flash.cu", "flash_bwd_dq_convert"): _dq_convert,
}
