"""minitorch.functional.scaled_dot_product_attention on the Phase 8b lab's own flash.cu / flash.py (the solution
notebook's files): the forward and the gradients of the autograd Function against an independent float64 NumPy
attention (its dropout mask from minitorch.philox), causal and not, with and without dropout, 16-bit tensors of a
sequence length no tile divides; the errors the op raises. Emu at small sizes; cuda under -m gpu."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch
from minitorch import functional, kernels, philox
from tests.phase3_support import PHASE3_NOTEBOOKS, write_solutions

NOTEBOOKS = PHASE3_NOTEBOOKS + ("phase8a_tensor_cores.ipynb", "phase8b_flash.ipynb")
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request, workspace, monkeypatch):
    write_solutions(workspace, NOTEBOOKS)
    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    previous = minitorch.get_device()
    minitorch.set_device(request.param)
    yield request.param
    minitorch.set_device(previous)


def bits_of(x: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "float16":
        return x.astype(np.float16).view(np.uint16)
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def values_of(bits: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "float16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def keep_mask(slices: int, t: int, p: float, seed: int) -> np.ndarray:
    """float32(1/(1-p)) where kept, 0 where dropped: word j % 4 of block (j / 4, i, slice, 0), >= floor(p 2^32)."""
    out = np.zeros((slices, t, t))
    threshold = math.floor(p * 2 ** 32)
    for h in range(slices):
        for i in range(t):
            blocks = np.array([[j4, i, h, 0] for j4 in range((t + 3) // 4)], np.uint32)
            words = philox.philox4x32(blocks, (seed & 0xFFFFFFFF, seed >> 32)).reshape(-1)[:t]
            out[h, i] = np.where(words >= threshold, float(np.float32(1 / (1 - p))), 0.0)
    return out


def reference(q, k, v, do, causal, keep):
    t, d = q.shape[-2:]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p * keep) @ v
    dp = (do @ np.swapaxes(v, -1, -2)) * keep
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return o, ds @ k / math.sqrt(d), np.swapaxes(ds, -1, -2) @ q / math.sqrt(d), np.swapaxes(p * keep, -1, -2) @ do


@pytest.mark.parametrize("fmt, causal, dropout_p", [("bfloat16", True, 0.2), ("float16", False, 0.0)])
def test_attention_and_its_gradients_match_float64(device, fmt, causal, dropout_p):
    b, h, t, d, seed = 1, 2, 37, 64, 2024
    rng = np.random.default_rng(3)
    host = [bits_of(rng.standard_normal((b, h, t, d)), fmt) for _ in range(4)]
    q, k, v = (minitorch.from_bits(x, fmt, device, requires_grad=True) for x in host[:3])
    kernels.reset_launch_counts()
    o = functional.scaled_dot_product_attention(q, k, v, causal=causal, dropout_p=dropout_p, seed=seed)
    o.backward(minitorch.from_bits(host[3], fmt, device))
    assert any(n for (file, _), n in kernels.launch_counts().items() if file == "flash.cu")
    keep = keep_mask(b * h, t, dropout_p, seed).reshape(b, h, t, t) if dropout_p else np.ones((b, h, t, t))
    want = reference(*(values_of(x, fmt) for x in host[:3]), values_of(host[3], fmt), causal, keep)
    for name, got, ref in zip(("o", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), want, strict=True):
        assert got.dtype == fmt and got.shape == (b, h, t, d), name
        err = np.abs(values_of(got.bits(), fmt) - ref)
        # a loose bound: 16-bit P and dS, fp32 sums; the kernels' own bound is the grader's (phase 8b)
        assert np.all(err <= 8 * UNIT[fmt] * (np.abs(ref) + np.abs(ref).max())), (name, float(err.max()))


def test_no_dropout_when_not_training(device):
    rng = np.random.default_rng(4)
    q, k, v = (minitorch.from_bits(bits_of(rng.standard_normal((1, 1, 9, 64)), "bfloat16"), "bfloat16", device)
               for _ in range(3))
    plain = functional.scaled_dot_product_attention(q, k, v).bits()
    assert np.array_equal(functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=False).bits(), plain)
    dropped = functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=7).bits()
    assert not np.array_equal(dropped, plain)
    assert np.array_equal(functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=7).bits(), dropped)


def test_unsupported_inputs_are_refused_by_name(device):
    x32 = minitorch.tensor(np.zeros((1, 1, 4, 64), np.float32), device)
    with pytest.raises(TypeError, match=r"to\('bfloat16'\)"):
        functional.scaled_dot_product_attention(x32, x32, x32)
    x48 = minitorch.from_bits(np.zeros((1, 1, 4, 48), np.uint16), "bfloat16", device)
    with pytest.raises(ValueError, match="64 or 128.*48"):
        functional.scaled_dot_product_attention(x48, x48, x48)
    x = minitorch.from_bits(np.zeros((1, 1, 4, 64), np.uint16), "bfloat16", device)
    with pytest.raises(ValueError, match="dropout_p"):
        functional.scaled_dot_product_attention(x, x, x, dropout_p=1.0)
    other = minitorch.from_bits(np.zeros((1, 1, 5, 64), np.uint16), "bfloat16", device)
    with pytest.raises(ValueError, match=r"\(1, 1, 5, 64\)"):
        functional.scaled_dot_product_attention(x, other, x)


def test_the_cpu_path_is_the_same_attention(workspace):
    """On cpu the op is NumPy in float64 (any float dtype), with the same dropout mask."""
    write_solutions(workspace, PHASE3_NOTEBOOKS)  # Tensor.backward runs the learner's backprop.py
    rng = np.random.default_rng(5)
    host = [rng.standard_normal((2, 3, 11, 16)) for _ in range(4)]
    q, k, v = (minitorch.tensor(x, "cpu", dtype=minitorch.float64, requires_grad=True) for x in host[:3])
    o = functional.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.3, seed=11)
    o.backward(minitorch.tensor(host[3], "cpu", dtype=minitorch.float64))
    keep = keep_mask(6, 11, 0.3, 11).reshape(2, 3, 11, 11)
    want = reference(*host[:3], host[3], True, keep)
    for got, ref in zip((o, q.grad, k.grad, v.grad), want, strict=True):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
