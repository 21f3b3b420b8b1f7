"""Phase 8a's HGEMM ladder (benchmarks/phase8a_hgemm.py) on an NVIDIA GPU: every rung right at odd sizes, and
the validation's error bound able to fail (run by `make test-gpu`; skipped elsewhere)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def hgemm():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import phase8a_hgemm

    return phase8a_hgemm, phase8a_hgemm.Ladder()


def test_every_rung_layout_and_dtype_is_right_at_odd_sizes(hgemm):
    module, ladder = hgemm
    report = module.validate(ladder, [(1, 1, 1), (17, 1, 33), (129, 71, 130), (257, 1000, 263)])
    assert not report["failures"], "\n".join(report["failures"][:10])


def test_the_bound_rejects_a_product_missing_one_k_step(hgemm):
    import torch

    module, _ = hgemm
    a, b = module.operands(129, 1000, 130, torch.bfloat16, seed=0)
    ref = a.double() @ b.double()
    mag = a.double().abs() @ b.double().abs()
    assert module.check(ref.float(), ref, mag, 1000, "fp32")[0]
    dropped = (a[:, 16:].double() @ b[16:].double()).float()  # k = 0..15 left out, as a skipped tile would
    assert not module.check(dropped, ref, mag, 1000, "fp32")[0]
    assert not module.check(ref.to(torch.bfloat16).float() * 1.02, ref, mag, 1000, "bf16")[0]
