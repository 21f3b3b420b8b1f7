"""Known-bad Phase 6 learner code must be rejected, each for the right reason.

Every fixture is the reference solution (with the earlier phases' files, which the framework uses) with one
deliberate mistake, graded from a prepared workspace on the emulator: only the tests that matter run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, replace_once, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase6_cnn.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase6_cnn.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and Phase 6's."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase6":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str) -> dict:
    return grade_workspace(tmp_path, "phase6", files, "--no-notebook", *args, timeout=120)


# ---------------------------------------------------------------- softmax.cu / softmax.py


def test_softmax_without_the_max_subtracted_fails_on_large_logits(tmp_path):
    """exp(x) / sum(exp(x)): right for ordinary logits, inf / inf = NaN for logits of ±1e4."""
    files = solution_sources()
    files["softmax.cu"] = replace_once(files["softmax.cu"], "    m = row_reduce(m, true, scratch);\n",
                                       "    m = 0.0f;  // no maximum subtracted\n")
    report = grade(tmp_path, files, "-k", "test_forward_values and 7-10 or stable_for_large_logits")
    assert all(c["result"] == "PASS" for c in results(report, "test_forward_values")), report["checks"]
    for check in results(report, "test_forward_stable_for_large_logits") + results(
            report, "test_cross_entropy_stable_for_large_logits"):
        assert check["result"] == "FAIL", check
        assert "not finite" in check["reason"] and "Subtract the row's maximum" in check["reason"], check


def test_cross_entropy_gradient_averaged_over_the_classes_is_rejected(tmp_path):
    """The backward's scale divided by the number of classes instead of the batch size."""
    files = solution_sources()
    files["softmax.py"] = replace_once(files["softmax.py"], "np.float32(grad_loss / rows) if rows",
                                       "np.float32(grad_loss / cols) if rows")
    report = grade(tmp_path, files, "-k", "test_cross_entropy_backward_values or test_functional_cross_entropy")
    checks = {c["name"]: c for c in results(report, "test_cross_entropy_backward_values")}
    square = [c for name, c in checks.items() if "[1-1-" in name]
    assert square and all(c["result"] == "PASS" for c in square), checks  # rows == cols: no difference
    wrong = [c for name, c in checks.items() if "[7-10-" in name or "[64-10-" in name]
    assert wrong and all(c["result"] == "FAIL" for c in wrong), wrong
    assert all("divided by the classes" in c["reason"] and "instead of the rows" in c["reason"] for c in wrong), wrong
    [functional] = results(report, "test_functional_cross_entropy_and_its_gradient")
    assert functional["result"] == "FAIL" and "the gradient of F.cross_entropy" in functional["reason"], functional


def test_cross_entropy_summed_over_the_batch_is_rejected(tmp_path):
    """The mean kernel writes the sum of the rows' losses."""
    files = solution_sources()
    files["softmax.cu"] = replace_once(files["softmax.cu"], "        loss[0] = s / rows;\n", "        loss[0] = s;\n")
    report = grade(tmp_path, files, "-k", "test_cross_entropy_values")
    checks = {c["name"]: c for c in results(report, "test_cross_entropy_values")}
    one_row = [c for name, c in checks.items() if "[1-" in name]
    assert one_row and all(c["result"] == "PASS" for c in one_row), checks  # one row: the sum is the mean
    wrong = [c for name, c in checks.items() if "[64-10-" in name]
    assert wrong and all(c["result"] == "FAIL" and "summed over the rows instead of averaged" in c["reason"]
                         for c in wrong), wrong


def test_row_reduce_without_its_second_barrier_is_a_race(tmp_path):
    files = solution_sources()
    cu = files["softmax.cu"]
    marker = "        r = is_max ? fmaxf(r, scratch[first + i]) : r + scratch[first + i];\n    }\n    __syncthreads();\n"
    files["softmax.cu"] = replace_once(cu, marker, marker.replace("    __syncthreads();\n", ""))
    report = grade(tmp_path, files, "-k", "test_block_per_row_has_no_shared_memory_race")
    checks = {c["name"].split("[")[1].rstrip("]"): c for c in results(
        report, "test_block_per_row_has_no_shared_memory_race")}
    for name in ("softmax", "cross_entropy"):  # two row reductions in a row: the second overwrites scratch
        assert checks[name]["result"] in ("FAIL", "CRASH"), checks[name]
        reason = checks[name]["reason"]
        assert "shared-memory race" in reason and "softmax.cu:" in reason, reason
    assert checks["softmax_backward"]["result"] == "PASS", checks  # one reduction only: no race to find


def test_softmax_launcher_computing_with_numpy_is_rejected(tmp_path):
    files = solution_sources()
    files["softmax.py"] = replace_once(
        files["softmax.py"], '    _rows("softmax_forward", (x, out), *x.shape, threads)\n',
        "    h = backend.asnumpy(x).astype(np.float64)  # NumPy, not the kernel\n"
        "    e = np.exp(h - h.max(axis=1, keepdims=True))\n"
        "    out.set((e / e.sum(axis=1, keepdims=True)).astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", "(test_forward_values and softmax and 7-10) or "
                   "(test_results_come_from_your_kernels and softmax)")
    for check in results(report, "test_forward_values"):
        if "log_softmax" not in check["name"]:
            assert check["result"] == "FAIL" and "no launch of `softmax_forward`" in check["reason"], check
    [replay] = [c for c in results(report, "test_results_come_from_your_kernels") if c["name"].endswith("[softmax]")]
    assert replay["result"] == "FAIL" and "no kernel launch was recorded" in replay["reason"], replay
