"""Phase 7's attention.py (the reference solution): `bmm` and the two softmaxes run the GPU's kernels on a GPU
(`bmm`, shared-memory tiles; `softmax_forward` / `softmax_backward`, a warp a row) and the emulator's elsewhere
(`bmm_regtile`; `softmax_forward_rows` / `softmax_backward_rows`, a thread a row: no shuffle, no barrier, several
times faster there: benchmarks/results/phase7_emu_attention-*.json); a named variant runs on any device."""

from __future__ import annotations

import types

import numpy as np
import pytest

from tests.solution_files import solution_files


def attention_module(device: str, launched: list) -> types.ModuleType:
    """The solution's attention.py on `device` (as backend.get_device() says), its launches recorded, not run."""
    module = types.ModuleType("attention_solution")
    exec(compile(solution_files("phase7_gpt.ipynb")["attention.py"], "attention.py", "exec"), module.__dict__)
    module.backend = types.SimpleNamespace(get_device=lambda: device, is_device_array=lambda a: True)

    def load_kernel(file: str, name: str):
        return lambda grid, block, args, **kw: launched.append((file, name, tuple(grid), tuple(block)))

    module.load_kernel = load_kernel
    return module


def launches(device: str, **variants: str) -> list:
    """The kernels, grids and blocks of a causal attention's bmm (Q Kᵀ, 256 matrices of 64 x 16 by 16 x 64) and
    its softmax forward and backward (256 x 64 rows of 64), on `device`."""
    launched: list = []
    am = attention_module(device, launched)
    q, s = np.zeros((256, 64, 16), np.float32), np.zeros((256, 64, 64), np.float32)
    am.bmm(q, q, s, False, True, **({"variant": variants["bmm"]} if "bmm" in variants else {}))
    softmax = {"variant": variants["softmax"]} if "softmax" in variants else {}
    am.softmax_forward(s, s, 0.25, True, **softmax)
    am.softmax_backward(s, s, s, 0.25, True, **softmax)
    return launched


def test_the_emulator_runs_its_own_kernels_and_a_gpu_does_not():
    gpu, emu = launches("cuda"), launches("emu")
    assert gpu == [("attention.cu", "bmm", (1, 1, 256), (16, 16)),
                   ("attention.cu", "softmax_forward", (2048,), (256,)),  # 8 rows (warps) a block
                   ("attention.cu", "softmax_backward", (2048,), (256,))]
    assert emu == [("attention.cu", "bmm_regtile", (1, 1, 256), (16, 16)),  # bmm's grid and blocks
                   ("attention.cu", "softmax_forward_rows", (64,), (256,)),  # 256 rows (threads) a block
                   ("attention.cu", "softmax_backward_rows", (64,), (256,))]


@pytest.mark.parametrize("device", ["cuda", "emu"])
def test_a_named_variant_runs_on_any_device(device):
    assert [k for _, k, _, _ in launches(device, bmm="regtile", softmax="rows")] == [
        "bmm_regtile", "softmax_forward_rows", "softmax_backward_rows"]
    assert [k for _, k, _, _ in launches(device, bmm="tiled", softmax="warp")] == [
        "bmm", "softmax_forward", "softmax_backward"]


def test_an_unknown_variant_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"softmax_forward: variant must be one of warp, rows or 'best', got 'row'"):
        launches("emu", softmax="row")
    with pytest.raises(ValueError, match=r"bmm: variant must be one of tiled, regtile or 'best', got 'shared'"):
        launches("cuda", bmm="shared")
