"""The runner survives crashing and hanging tests and attributes each to the right test.

Uses synthetic test files (no minitorch needed): a pass, a failure, a hard crash (os.abort), a
hang (killed by the per-test timeout), and tests after each, which must still run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.options import CheckOptions
from grader.phases import get_phase
from grader.report import CRASH, FAIL, NOT_MEASURED, PASS, SKIP, TIMEOUT
from grader.tests_step import run_tests_step

pytestmark = pytest.mark.slow  # each test starts several Python processes

SYNTHETIC = '''
import os, time, pytest

def test_a_pass():
    assert 1 + 1 == 2

@pytest.mark.hint("look at the values")
def test_b_fail():
    assert False, "values differ: first bad index 3"

@pytest.mark.kernel("memory.cu", "fill")
def test_c_crash():
    os.abort()

def test_d_after_crash():
    pass

@pytest.mark.kernel("memory.cu", "copy")
def test_e_hang():
    time.sleep(60)

def test_f_after_hang():
    pass

@pytest.mark.perf
def test_g_perf():
    pytest.skip("not measured (no GPU)")

def test_h_skip():
    pytest.skip("not relevant here")

def test_i_poisoned():
    raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

def test_j_after_poison():
    pass

@pytest.mark.perf
def test_k_perf_measured(record_property):
    record_property("perf", {"name": "fill", "unit": "GB/s", "measured": 1500.0, "ratio": 0.91, "threshold": 0.6})

def test_l_passes_with_a_warning():
    import warnings
    warnings.warn("thread 3 returned before the __syncthreads() at line 7", UserWarning)
'''


@pytest.fixture
def synthetic_tests(tmp_path: Path) -> Path:
    tests_dir = tmp_path / "graded"
    tests_dir.mkdir()
    (tests_dir / "test_synthetic.py").write_text(textwrap.dedent(SYNTHETIC))
    return tests_dir / "test_synthetic.py"


@pytest.mark.timeout(120)
def test_crash_and_hang_are_attributed_and_the_rest_still_runs(synthetic_tests: Path, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    opts = CheckOptions(phase=get_phase("phase1"), timeout_s=3, tests_file=synthetic_tests)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    import os

    env = {**os.environ, **env, "GRADER_RUNNING": "1"}
    checks, _device = run_tests_step(opts.phase, env, work, opts)
    by_name = {c.name: c for c in checks}
    assert by_name["test_a_pass"].result == PASS
    assert by_name["test_b_fail"].result == FAIL
    assert "first bad index 3" in by_name["test_b_fail"].reason
    assert by_name["test_b_fail"].hint == "look at the values"
    crash = by_name["test_c_crash"]
    assert crash.result == CRASH and "SIGABRT" in crash.reason and "`fill` from memory.cu" in crash.reason
    assert by_name["test_d_after_crash"].result == PASS
    hang = by_name["test_e_hang"]
    assert hang.result == TIMEOUT and "did not finish within 3 s" in hang.reason and "`copy`" in hang.reason
    assert by_name["test_f_after_hang"].result == PASS
    assert by_name["test_g_perf"].result == NOT_MEASURED
    assert by_name["test_h_skip"].result == SKIP
    assert by_name["test_i_poisoned"].result == CRASH
    assert by_name["test_j_after_poison"].result == PASS  # ran in a fresh process
    perf = by_name["test_k_perf_measured"]
    assert perf.result == PASS and perf.measured == "1500 GB/s = 0.91x ref (>= 0.60x)" and perf.perf[0]["ratio"] == 0.91
    warned = by_name["test_l_passes_with_a_warning"]
    assert warned.result == PASS and warned.warnings == ["UserWarning: thread 3 returned before the __syncthreads() at line 7"]
    from grader.report import PhaseReport, render_report

    text = render_report(PhaseReport("phase1", "GPU memory", "emu", 1, checks=checks))
    assert "Warnings" in text and "in test_l_passes_with_a_warning:" in text and "line 7" in text
    assert len(checks) == 12


def _notebook(path: Path, *cells: tuple[str, str]) -> None:
    import json

    nb = {"cells": [{"cell_type": kind, "metadata": {}, "source": src, "id": f"c{i}",
                     **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                    for i, (kind, src) in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


@pytest.mark.timeout(120)
def test_notebook_step_reports_failing_and_hanging_cells_without_touching_the_notebook(tmp_path: Path):
    import os

    from grader.notebook_step import run_notebook_step

    nb = tmp_path / "lab.ipynb"
    _notebook(nb, ("markdown", "## Exercise 1: ok"), ("code", "x = 1"),
              ("markdown", "## Exercise 2: todo"), ("code", 'raise NotImplementedError("lab / Exercise 2: todo")'),
              ("markdown", "## Exercise 3: hang"), ("code", "import time\ntime.sleep(60)"))
    before = nb.read_bytes()
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    opts = CheckOptions(phase=get_phase("phase1"), timeout_s=3)
    checks = run_notebook_step(nb, env, work, opts)
    assert nb.read_bytes() == before
    by_name = {c.name: c for c in checks}
    # The summary never says PASS above failed cells.
    assert by_name["lab notebook: 1 of 3 cells passed"].result == FAIL
    todo = by_name["lab cell 1 (Exercise 2: todo)"]
    assert todo.result == FAIL and "NotImplementedError: lab / Exercise 2: todo" in todo.reason
    assert "TODO" in todo.hint
    assert by_name["lab cell 2 (Exercise 3: hang)"].result == TIMEOUT


def test_measures_are_shown_against_their_kind_of_bar():
    from grader.report import format_measure

    ratio = {"measured": 412.0, "unit": "GB/s", "ratio": 0.93, "threshold": 0.6}
    assert format_measure(ratio) == "412 GB/s = 0.93x ref (>= 0.60x)"
    loss = {"measured": 1.8483, "unit": "nats", "threshold": 2.05, "direction": "at most"}
    assert format_measure(loss) == "1.848 nats (<= 2.05)"
    accuracy = {"measured": 0.9898, "unit": "fraction", "threshold": 0.98, "direction": "at least"}
    assert format_measure(accuracy) == "0.9898 fraction (>= 0.98)"


def test_a_reported_figure_is_shown_as_info_not_as_a_pass():
    """Phase 7's attention against SDPA is reported, never required: INFO with its measurement and no bar, in
    the table and in the JSON, and it counts neither as a passed check nor against the phase."""
    import json

    from grader.report import INFO, PASS, PhaseReport, render_report
    from grader.tests_step import _result_check

    attention = {"name": "attention", "unit": "GFLOP/s", "measured": 295.7, "reference": 4224.0, "ratio": 0.07,
                 "threshold": None, "reported": True, "threshold_key": "phase7.attention_vs_sdpa"}
    layernorm = {"name": "layernorm", "unit": "GB/s", "measured": 2000.0, "ratio": 0.62, "threshold": 0.5}
    checks = [_result_check({"nodeid": f"t.py::test_{name}", "outcome": "passed", "perf": [perf]},
                            {"kernel": None, "perf": True})
              for name, perf in (("attention", attention), ("layernorm", layernorm))]
    assert [c.result for c in checks] == [INFO, PASS]
    assert checks[0].measured == "295.7 GFLOP/s = 0.07x ref (reported, no bar)"
    report = PhaseReport("phase7", "GPT", "cuda", 1, checks=checks)
    assert report.passed
    text = render_report(report)
    row = next(line for line in text.splitlines() if "test_attention" in line)
    assert "INFO" in row and "PASS" not in row and ">=" not in row, row
    assert "INFO is a figure measured and reported, never required" in text
    data = json.loads(report.to_json())
    assert [c["result"] for c in data["checks"]] == ["INFO", "PASS"]
    assert data["checks"][0]["perf"][0]["threshold"] is None and data["checks"][0]["perf"][0]["reported"]


def test_a_perf_check_not_measured_on_a_gpu_says_why():
    """On a GPU without PyTorch the races against cuDNN are not measured: the report's notes say so, with the
    reason, instead of a NOT MEASURED row a reader takes for 'no GPU'."""
    from grader.report import CheckResult, PhaseReport
    from grader.runner import not_measured_notes

    why = 'not measured: PyTorch is not installed, so there is no cuDNN to race (`pip install -e ".[gpu]"`)'
    checks = [CheckResult(f"test_perf_conv[{i}]", NOT_MEASURED, reason=why) for i in range(4)]
    checks.append(CheckResult("test_ok", PASS))
    gpu = PhaseReport("phase6", "CNNs", "cuda: NVIDIA H100", None, checks=checks)
    notes = not_measured_notes(gpu)
    assert len(notes) == 1 and notes[0].startswith("4 performance checks not measured on this GPU: " + why)
    emu = PhaseReport("phase6", "CNNs", "emu", None, checks=checks)
    assert "without a GPU" in not_measured_notes(emu)[0]
    assert not_measured_notes(PhaseReport("phase6", "CNNs", "cuda", None, checks=checks[-1:])) == []


ARCH_TESTS = '''
import pytest

@pytest.mark.needs_arch("sm_90a")
def test_rung6_values():
    raise AssertionError("must not start off Hopper")

@pytest.mark.perf
@pytest.mark.needs_arch("sm_90a")
def test_rung6_perf():
    raise AssertionError("must not start off Hopper")

@pytest.mark.perf
def test_other_perf():
    pytest.skip("not measured: needs an sm_90a GPU (Hopper: H100, H200); said by the test itself")

def test_passes():
    pass
'''


@pytest.mark.timeout(120)
def test_a_check_of_code_for_another_gpu_is_not_measured_and_never_blocks(tmp_path: Path, monkeypatch):
    """Phase 8a's rung 6 (needs_arch("sm_90a")) off Hopper: skipped before it starts, decided by the grader from
    the device, NOT MEASURED with the reason, and the phase still passes with --require-perf; a perf check that
    skips itself with the same words is an ordinary NOT MEASURED, which --require-perf still blocks on."""
    import os

    from grader.report import PhaseReport
    from grader.runner import not_measured_notes

    tests_file = tmp_path / "graded" / "test_arch.py"
    tests_file.parent.mkdir()
    tests_file.write_text(ARCH_TESTS)
    work = tmp_path / "work"
    work.mkdir()
    opts = CheckOptions(phase=get_phase("phase1"), timeout_s=30, tests_file=tests_file)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "GRADER_RUNNING": "1",
           "MINITORCH_DEVICE": "emu"}
    checks, _device = run_tests_step(opts.phase, env, work, opts)
    by_name = {c.name: c for c in checks}
    for name in ("test_rung6_values", "test_rung6_perf"):
        check = by_name[name]
        assert check.result == NOT_MEASURED and check.unavailable, (name, check)
        assert "needs an sm_90a GPU" in check.reason and "'emu' device is not a GPU" in check.reason
        assert not check.blocking(require_perf=True)
    other = by_name["test_other_perf"]
    assert other.result == NOT_MEASURED and not other.unavailable and other.blocking(require_perf=True)
    report = PhaseReport("phase8a", "Tensor cores", "emu", 1, require_perf=True,
                         checks=[c for c in checks if c.name != "test_other_perf"])
    assert report.passed
    assert "2 checks of code this device cannot run not measured" in not_measured_notes(report)[0]
