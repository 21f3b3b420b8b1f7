"""Phase 7's layernorm.py runs, for variant "best", the thread-a-row kernels on the emulator and the warp kernels on
a GPU (default_variant, the given part of the lab's launcher): on the emulator, a CPU, the warp kernels' shuffles
and barriers make every CUDA thread a fiber (benchmarks/results/phase7_layernorm_emu-*.json: the thread kernels
take a fraction of their CPU time at the GPT step's shape); on a GPU nothing changes."""

from __future__ import annotations

import types

import numpy as np
import pytest

from minitorch import backend, kernels
from tests.solution_files import solution_files


def layernorm_module() -> types.ModuleType:
    module = types.ModuleType("layernorm_solution")
    exec(compile(solution_files("phase7_gpt.ipynb")["layernorm.py"], "layernorm.py", "exec"), module.__dict__)
    return module


def test_best_is_the_thread_kernels_on_the_emulator_and_the_warp_kernels_on_a_gpu(monkeypatch):
    lm = layernorm_module()
    for device, expected in (("emu", "thread"), ("cuda", "warp")):
        monkeypatch.setattr(lm.backend, "get_device", lambda device=device: device)
        assert lm.default_variant() == expected, device
        assert lm.kernel_variant("layernorm_forward", "best") == expected, device
        for explicit in ("warp", "thread"):  # an explicit variant runs on either device
            assert lm.kernel_variant("layernorm_forward", explicit) == explicit, (device, explicit)
    with pytest.raises(ValueError, match=r"layernorm_backward: variant must be one of \('warp', 'thread', 'best'\), "
                                         r"got 'rows'"):
        lm.kernel_variant("layernorm_backward", "rows")


@pytest.fixture
def layernorm_workspace(workspace):
    for notebook in ("phase1_memory.ipynb", "phase3b_backward.ipynb", "phase7_gpt.ipynb"):
        for name, text in solution_files(notebook).items():
            kernels.write_source(name, text)
    return workspace


def _layer_norm_launches(device: str) -> tuple[list[str], list[str], tuple, tuple]:
    """The kernels F.layer_norm's forward and backward launch on `device` (the framework's path: ops.layernorm,
    the launcher's default), and their results with float64 NumPy's."""
    import minitorch
    from minitorch import functional

    previous = backend.get_device()
    backend.set_device(device)
    try:
        rng = np.random.default_rng(0)
        x = (rng.standard_normal((130, 37)) * 3 + 5).astype(np.float32)
        w, b = rng.uniform(0.5, 2, 37).astype(np.float32), rng.standard_normal(37).astype(np.float32)
        g = rng.standard_normal((130, 37)).astype(np.float32)
        xt, wt, bt = (minitorch.tensor(a, requires_grad=True) for a in (x, w, b))
        with kernels.recording() as forward:
            y = functional.layer_norm(xt, wt, bt)
        with kernels.recording() as backward:
            y.backward(minitorch.tensor(g))
        got = (y.numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy())
    finally:
        backend.set_device(previous)
    x64 = x.astype(np.float64)
    rstd = 1 / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    xhat = (x64 - x64.mean(axis=1, keepdims=True)) * rstd
    gw = g * w.astype(np.float64)
    dx = rstd * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    expected = (xhat * w + b, dx, (g * xhat).sum(axis=0), g.astype(np.float64).sum(axis=0))
    return ([launch.kernel.function for launch in forward], [launch.kernel.function for launch in backward], got,
            expected)


def _check(got: tuple, expected: tuple) -> None:
    for name, a, e in zip(("out", "grad_x", "grad_weight", "grad_bias"), got, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * float(np.abs(e).max()), err_msg=name)


def test_the_emulator_runs_the_thread_kernels(layernorm_workspace):
    forward, backward, got, expected = _layer_norm_launches("emu")
    assert forward == ["layernorm_forward_thread"]
    assert backward == ["layernorm_backward_thread", "layernorm_param_partials", "layernorm_param_grads"]
    _check(got, expected)


@pytest.mark.gpu
def test_a_gpu_runs_the_warp_kernels(layernorm_workspace):
    forward, backward, got, expected = _layer_norm_launches("cuda")
    assert forward == ["layernorm_forward"]
    assert backward == ["layernorm_backward", "layernorm_param_grads"]
    _check(got, expected)
