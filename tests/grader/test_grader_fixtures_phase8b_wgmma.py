"""Known-bad Phase 8b rung 8 (flash_wgmma.cu, both products on wgmma) must be rejected on an sm_90 GPU, each for
the right reason; and off Hopper the rung's checks must neither run nor hold the phase back.

The GPU fixtures are the reference solution with one deliberate mistake in the wgmma plumbing that the emulator
cannot run (wgmma is an sm_90a instruction): S accumulated over every key tile (the first k-step's scale_d left at
1, so each tile's scores add onto the last tile's), V described as a K-major operand (its k16 steps 32 bytes apart
instead of 16 rows), a launcher that hands variant="wgmma" to rung 5. Only rung 8's value test runs.
"""

from __future__ import annotations

import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, replace_once, results
from tests.grader.test_grader_fixtures_phase8a_wgmma import _has_sm90
from tests.grader.test_grader_fixtures_phase8b import solution_sources

S_FIRST_STEP = "                            kk > 0);\n"
V_STEP = "            wgmma_rs<T, D>(o, a[kk], smem_desc(svt + kk * 2048, SLAB_KV, 1024));\n"
BEST = "    if variant == \"best\":\n        variant = best_variant(dropout_p > 0)\n"
RUNG8 = "test_forward_rung_values and wgmma"

pytestmark = [pytest.mark.timeout(400)]
needs_sm90 = pytest.mark.skipif(not _has_sm90(), reason="needs an sm_90 GPU (H100, H200): rung 8 is sm_90a code")


def grade(tmp_path, files: dict[str, str], *args: str, device: str) -> dict:
    return grade_workspace(tmp_path, "phase8b", files, "--no-notebook", *args, timeout=360, device=device,
                           expect_pass=False)


def test_the_mutations_find_their_lines():
    """Each mutation's line is in the reference files (a fixture whose line moved would test nothing)."""
    files = solution_sources()
    for name, line in (("flash_wgmma.cu", S_FIRST_STEP), ("flash_wgmma.cu", V_STEP), ("flash.py", BEST)):
        replace_once(files[name], line, line)


@pytest.mark.gpu
@needs_sm90
def test_scores_never_reset_are_rejected(tmp_path):
    """scale_d 1 on S's first k-step: the scores of key tile j are added to those of tile j - 1 (and the first
    tile's to whatever the registers held). Which check sees it first depends on what the registers held: O
    beyond the bound, or (O within it at some length) the rows' logsumexp; an H100 showed both."""
    files = solution_sources()
    files["flash_wgmma.cu"] = replace_once(files["flash_wgmma.cu"], S_FIRST_STEP, "                            1);\n")
    report = grade(tmp_path, files, "-k", RUNG8, device="cuda")
    [check] = results(report, "test_forward_rung_values")
    assert check["result"] == "FAIL", check
    assert "differ from float64 attention" in check["reason"] or "the logsumexp of" in check["reason"], check


@pytest.mark.gpu
@needs_sm90
def test_v_described_as_k_major_is_rejected(tmp_path):
    """V's k16 steps 32 bytes apart (a K-major operand's step) instead of 16 rows: P multiplies the wrong rows of
    V, wrong values at every length."""
    files = solution_sources()
    files["flash_wgmma.cu"] = replace_once(files["flash_wgmma.cu"], V_STEP, V_STEP.replace("kk * 2048", "kk * 32"))
    report = grade(tmp_path, files, "-k", RUNG8, device="cuda")
    [check] = results(report, "test_forward_rung_values")
    assert check["result"] == "FAIL" and "differ from float64 attention" in check["reason"], check


@pytest.mark.gpu
@needs_sm90
def test_rung8_answered_by_rung5_is_rejected(tmp_path):
    """variant='wgmma' handed to rung 5: the values are right, but rung 8's kernel never ran."""
    files = solution_sources()
    files["flash.py"] = replace_once(files["flash.py"], BEST, BEST + '    if variant == "wgmma":\n'
                                                                     '        variant = "tuned"  # rung 5 instead\n')
    report = grade(tmp_path, files, "-k", RUNG8, device="cuda")
    [check] = results(report, "test_forward_rung_values")
    assert check["result"] == "FAIL" and "no launch of `flash_fwd_8_wgmma`" in check["reason"], check


@pytest.mark.slow
@pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")
@pytest.mark.skipif(_has_sm90(), reason="on an sm_90 GPU rung 8 runs")
def test_off_hopper_rung8_is_not_measured_and_blocks_nothing(tmp_path):
    """On the emulator, with --require-perf: rung 8's check is NOT MEASURED with the reason and blocks nothing; a
    flash_wgmma.cu that would be wrong on a GPU is never even compiled; "best" runs rung 5."""
    files = solution_sources()
    files["flash_wgmma.cu"] = replace_once(files["flash_wgmma.cu"], V_STEP, V_STEP.replace("kk * 2048", "kk * 32"))
    report = grade(tmp_path, files, "--require-perf", "-k", RUNG8 + " or (test_forward_rung_values and tuned) or "
                   "test_launcher_rejects_bad_arguments", device="emu")
    [rung8] = [c for c in results(report, "test_forward_rung_values") if "wgmma" in c["nodeid"]]
    assert rung8["result"] == "NOT MEASURED" and rung8["unavailable"], rung8
    assert "needs an sm_90a GPU" in rung8["reason"], rung8
    assert not any(c["result"] in ("FAIL", "CRASH", "TIMEOUT") for c in report["checks"]), report["checks"]
