"""Known-bad Phase 8a loss-scaler code (scaler.cu / scaler.py) must be rejected, each for the right reason.

Every fixture is the reference solution (with the earlier phases' files) with one deliberate mistake, graded from a
prepared workspace on the emulator with only the tests of test_phase8a_amp.py that matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, replace_once, results
from tests.grader.test_grader_fixtures_phase8a import SOLUTION, failed, solution_sources

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase8a_tensor_cores.ipynb not written yet"),
    pytest.mark.timeout(400),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

FLAG = "    if (bad) atomicExch(found, 1.0f);\n"
SKIP = "    if (*found == 0.0f) return;\n"
BACKOFF = "        s *= backoff;\n"


def grade(tmp_path: Path, files: dict[str, str], *args: str) -> dict:
    return grade_workspace(tmp_path, "phase8a", files, "--no-notebook", *args, timeout=300, device="emu")


@needs_emu
@pytest.mark.slow
def test_a_flag_raised_by_a_plain_store_is_named_as_a_race(tmp_path):
    """Every thread that finds an inf storing 1.0f: the same value, so the flag is right, but a race that the
    emulator's check mode names (on a GPU it is undefined behaviour)."""
    files = solution_sources()
    files["scaler.cu"] = replace_once(files["scaler.cu"], FLAG, "    if (bad) *found = 1.0f;\n")
    report = grade(tmp_path, files, "-k", "test_unscale_check_has_no_race")
    [race] = results(report, "test_unscale_check_has_no_race")
    assert failed(race), race
    assert "race" in race["reason"] and "found" in race["reason"] and "scaler.cu:" in race["reason"], race


@needs_emu
@pytest.mark.slow
def test_a_restore_with_the_flag_inverted_is_rejected(tmp_path):
    """Restoring when no overflow was found (and keeping an overflowing step): good steps are undone."""
    files = solution_sources()
    files["scaler.cu"] = replace_once(files["scaler.cu"], SKIP, "    if (*found != 0.0f) return;\n")
    report = grade(tmp_path, files, "-k", "test_restore_if_found or test_a_captured_scaled_step")
    checks = results(report, "test_restore_if_found") + results(report, "test_a_captured_scaled_step")
    assert checks and all(failed(c) for c in checks), checks
    assert any("p left as it was" in c["reason"] for c in checks), checks


@needs_emu
@pytest.mark.slow
def test_a_scale_that_never_backs_off_is_rejected(tmp_path):
    """update_scale ignoring the flag's backoff: an fp16 overflow is never cured (the captured step's scale
    stays too large)."""
    files = solution_sources()
    files["scaler.cu"] = replace_once(files["scaler.cu"], BACKOFF, "")
    report = grade(tmp_path, files, "-k", "test_update_scale or test_a_captured_scaled_step")
    checks = results(report, "test_update_scale") + results(report, "test_a_captured_scaled_step")
    assert len(checks) == 2 and all(failed(c) for c in checks), checks
    assert any("expected scale" in c["reason"] or "expected [" in c["reason"] for c in checks), checks
