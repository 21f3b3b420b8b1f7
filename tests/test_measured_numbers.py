"""Numbers typed in the chapters with the ``{measured}`` role hold in their committed result files
(book/_ext/measured.py checks the same at build time)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("measured", ROOT / "book" / "_ext" / "measured.py")
measured = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measured)
CHAPTERS = sorted((ROOT / "book").glob("*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_measured_numbers_match_their_files(chapter):
    assert measured.problems(chapter.read_text()) == []


def test_the_check_rejects_a_number_its_file_does_not_hold():
    """The check can fail: a mistyped digit, a file that does not exist, a number on another line, a scale."""
    ncu = "phase5_gemm_ncu_cublas-nvidia-h100-80gb-hbm3.txt"  # Compute (SM) Throughput 87.23, DRAM 4.47
    assert measured.check("87%", f"{ncu}, near=Compute (SM) Throughput") is None
    assert measured.check("87.2%", f"{ncu}, near=Compute (SM) Throughput") is None
    assert "rounds to 88" in measured.check("88%", f"{ncu}, near=Compute (SM) Throughput")
    assert "rounds to 87.3" in measured.check("87.3%", ncu)
    assert "on a line with 'DRAM Throughput'" in measured.check("87%", f"{ncu}, near=DRAM Throughput")
    assert measured.check("0.0872", f"{ncu}, scale=1e-3, near=Compute (SM) Throughput") is None
    assert "does not exist" in measured.check("1", "no_such_result.json")
    assert "no number" in measured.check("many", ncu)
    assert "target must be" in measured.check("87%", f"{ncu}, nearby=Compute")
    assert measured.problems("It ran {measured}`88% <" + ncu + ", near=Compute (SM)>`.") != []
