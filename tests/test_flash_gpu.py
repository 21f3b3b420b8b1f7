"""Phase 8b's FlashAttention ladder (benchmarks/phase8b_flash.py) on an NVIDIA GPU: every forward rung and the
backward right at odd sequence lengths (1, 65, 1000), D = 64 and 128, causal and not, fp16 and bf16, against
float64 (run by `make test-gpu`; skipped elsewhere)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def flash():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import phase8b_flash

    return phase8b_flash, phase8b_flash.Flash()


def test_every_rung_and_the_backward_are_right_at_odd_sizes(flash):
    module, kernels = flash
    failures = module.validate_small(kernels, module.RUNGS, (64, 128))
    assert not failures, "\n".join(failures[:10])

