"""Tensor creation, copies and errors, on the cpu device (the emulator and GPU are tested elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import backend


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch):
    monkeypatch.setattr(backend, "_active", "cpu")


SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 4, 5), (0,), (4, 0, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_is_bitwise_lossless(shape):
    rng = np.random.default_rng()
    host = rng.standard_normal(shape).astype(np.float32)
    flat = host.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38], np.float32)
    flat[: min(flat.size, specials.size)] = specials[: flat.size]
    t = minitorch.from_numpy(host)
    assert t.shape == shape and t.dtype == np.float32 and t.device == "cpu"
    back = t.numpy()
    assert back.tobytes() == host.tobytes()
    host[...] = 0  # the tensor owns a copy
    assert back.tobytes() == t.numpy().tobytes()


def test_creation_functions():
    assert np.array_equal(minitorch.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    assert np.array_equal(minitorch.ones(4).numpy(), np.ones(4, np.float32))
    assert np.array_equal(minitorch.full((2, 2), -1.5).numpy(), np.full((2, 2), -1.5, np.float32))
    a, b = minitorch.randn((3, 3), seed=7), minitorch.randn((3, 3), seed=7)
    assert np.array_equal(a.numpy(), b.numpy())
    assert abs(float(minitorch.randn(100_000, seed=1).numpy().std()) - 1.0) < 0.02
    assert minitorch.tensor([[1, 2], [3, 4]]).numpy().dtype == np.float32
    c = minitorch.randn(5, seed=3)
    assert np.array_equal(c.clone().numpy(), c.numpy()) and c.clone().data is not c.data
    assert minitorch.tensor(2.5).shape == ()


def test_wrong_dtype_names_expected_and_got():
    with pytest.raises(TypeError, match=r"float32, got a int64 array.*astype\(numpy.float32\)"):
        minitorch.from_numpy(np.arange(3))
    with pytest.raises(TypeError, match=r"float32, got a float64"):
        minitorch.tensor(np.zeros(3))
    with pytest.raises(TypeError, match="numpy.ndarray, got list"):
        minitorch.from_numpy([1.0])
    with pytest.raises(TypeError, match="float32 tensor from str"):
        minitorch.tensor("abc")
    with pytest.raises(TypeError, match="real number"):
        minitorch.zeros(3).fill_("1")


@pytest.mark.parametrize("shape", [(-1,), (2, -3), (2.5,), ("3",), (True,)])
def test_wrong_shape_names_what_came(shape):
    with pytest.raises(ValueError, match="non-negative integers; got"):
        minitorch.zeros(shape)


def test_wrong_device_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown device 'gpu': expected one of 'cuda', 'emu', 'cpu'"):
        minitorch.zeros(3).to("gpu")
    with pytest.raises(ValueError, match="unknown device"):
        minitorch.set_device("tpu")


def test_cuda_without_a_gpu_says_what_to_use(monkeypatch):
    monkeypatch.setattr(backend, "cuda_status", lambda: (False, "CuPy is not installed"))
    backend._BACKENDS.pop("cuda", None)
    with pytest.raises(minitorch.DeviceError, match=r"not usable here: CuPy is not installed.*'emu'"):
        minitorch.set_device("cuda")


def test_default_device(monkeypatch):
    monkeypatch.setenv("MINITORCH_DEVICE", "cpu")
    assert backend.default_device() == "cpu"
    monkeypatch.delenv("MINITORCH_DEVICE")
    monkeypatch.setattr(backend, "cuda_status", lambda: (False, "no GPU"))
    assert backend.default_device() == "emu"
    monkeypatch.setattr(backend, "cuda_status", lambda: (True, ""))
    assert backend.default_device() == "cuda"


def test_cpu_device_runs_no_cuda_c():
    with pytest.raises(minitorch.DeviceError, match="runs no CUDA C.*'emu'"):
        backend.RawModule('extern "C" __global__ void k() {}')


def test_to_same_device_is_identity_and_len():
    t = minitorch.zeros((4, 2))
    assert t.to("cpu") is t and len(t) == 4 and t.nbytes == 32 and t.ndim == 2
    with pytest.raises(TypeError, match="0-d"):
        len(minitorch.tensor(1.0))
    assert "device='cpu'" in repr(t)
