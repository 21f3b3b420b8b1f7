"""The cuda device end to end (run by `make test-gpu` on an NVIDIA GPU; skipped elsewhere)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minitorch
from minitorch import backend, kernels
from tests.conftest import ROOT
from tests.solution_files import solution_files

pytestmark = pytest.mark.gpu


@pytest.fixture
def on_cuda(workspace):
    previous = backend.get_device()
    backend.set_device("cuda")
    for name, text in solution_files("phase1_memory.ipynb").items():
        kernels.write_source(name, text)
    yield workspace
    backend.set_device(previous)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4, 5), (0,), (1_000_003,)])
def test_round_trip_bitwise(on_cuda, shape):
    host = np.random.default_rng().standard_normal(shape).astype(np.float32)
    if host.size:
        host.reshape(-1)[:1] = np.nan
    t = minitorch.from_numpy(host)
    assert type(t.data).__module__.startswith("cupy")
    assert t.numpy().tobytes() == host.tobytes()
    assert t.to("cpu").to("cuda").numpy().tobytes() == host.tobytes()


@pytest.mark.parametrize("n", [1, 7, 257, 4099, 1_000_003])
def test_fill_and_clone_use_the_learner_kernels(on_cuda, n):
    kernels.reset_launch_counts()
    t = minitorch.full(n, -2.75)
    assert np.all(t.numpy() == np.float32(-2.75))
    r = minitorch.randn(n, seed=n)
    assert r.clone().numpy().tobytes() == r.numpy().tobytes()
    assert kernels.launch_count("memory.cu", "fill") == 1 and kernels.launch_count("memory.cu", "copy") == 1


def test_compile_error_names_the_learner_file_and_line(on_cuda):
    kernels.write_source("broken.cu", 'extern "C" __global__ void k(float* x) {\n    x[0] = y;\n}\n')
    with pytest.raises(minitorch.KernelCompileError, match=r"broken.cu\(2\).*identifier \"y\" is undefined"):
        kernels.load_kernel("broken.cu", "k")


def test_launch_errors_name_the_kernel(on_cuda):
    fill = kernels.load_kernel("memory.cu", "fill")
    out = backend.zeros(10)
    with pytest.raises(minitorch.KernelLaunchError, match=r"kernel `fill` from memory.cu failed \(grid=\(1,\), block=\(2048,\)\)"):
        fill((1,), (2048,), (out, np.float32(1), np.int64(10)))
    with pytest.raises(TypeError, match="numpy.float32"):
        fill((1,), (32,), (out, 1.0, np.int64(10)))


def test_illegal_address_is_reported_with_the_kernel_name():
    """An illegal address poisons the CUDA context, so it runs in a subprocess, as the grader does."""
    script = textwrap.dedent('''
        import numpy as np
        from minitorch import backend, kernels
        backend.set_device("cuda")
        kernels.write_source("oob.cu", 'extern "C" __global__ void smash(float* x, long long n) {\\n  x[n] = 1.0f;\\n}\\n')
        out = backend.zeros(10)
        kernels.load_kernel("oob.cu", "smash")((1,), (1,), (out, np.int64(1 << 40)))
    ''')
    env = {"MINITORCH_SYNC_LAUNCHES": "1", "PYTHONPATH": str(ROOT)}
    import os
    import tempfile

    env = {**os.environ, **env, "MINITORCH_WORKSPACE": tempfile.mkdtemp()}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert "kernel `smash` from oob.cu failed" in proc.stderr
    assert "illegal" in proc.stderr.lower() or "address" in proc.stderr.lower()
