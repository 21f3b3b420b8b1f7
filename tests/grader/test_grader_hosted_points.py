"""Points on Gradescope and Classroom: each check that decides the phase is worth an equal share, so the
full score is reached exactly when the phase passes; a figure reported, a skipped test and a performance
check not measured (no GPU) are shown and worth nothing."""

from __future__ import annotations

import pytest

from grader import deliverables, gradescope, hosted
from grader.report import CheckResult, PhaseReport


def _graded(*results: str, require_perf: bool = False, deliverable: bool | None = None) -> hosted.Graded:
    report = PhaseReport("phase1", "GPU memory", "emu", 1, require_perf=require_perf,
                         checks=[CheckResult(f"test_{i}", r, reason=f"why {i}") for i, r in enumerate(results)])
    verdict = None if deliverable is None else deliverables.Verdict("sales", deliverable, "RMSE 0.1")
    return hosted.Graded(report, verdict)


def test_full_points_exactly_when_the_phase_passes():
    graded = _graded("PASS", "PASS", "INFO", "SKIP", "NOT MEASURED")
    scored = hosted.scored_checks(graded, 30)
    assert graded.passed
    assert [c.max_score for c in scored] == [15, 15, 0, 0, 0]
    assert sum(c.score for c in scored) == pytest.approx(30)

    failing = _graded("PASS", "FAIL", "CRASH", "INFO")
    scored = hosted.scored_checks(failing, 30)
    assert not failing.passed
    assert [c.score for c in scored] == [10, 0, 0, 0] and [c.passed for c in scored] == [True, False, False, True]


def test_require_perf_makes_an_unmeasured_check_cost_points():
    scored = hosted.scored_checks(_graded("PASS", "NOT MEASURED", require_perf=True), 10)
    assert [c.max_score for c in scored] == [5, 5] and sum(c.score for c in scored) == 5


def test_a_failed_deliverable_costs_its_share_even_when_every_check_passed():
    graded = _graded("PASS", "PASS", "PASS", deliverable=False)
    assert not graded.passed
    data = gradescope.results(graded, 100.0, "report", 12.3)
    assert data["score"] == pytest.approx(75) and data["tests"][-1]["status"] == "failed"
    assert data["tests"][-1]["name"].startswith("sales")


def test_nothing_graded_is_zero_of_the_points():
    data = gradescope.results(None, 50.0, "no phase1_memory.ipynb", 0.0)
    assert data["score"] == 0 and data["tests"][0]["max_score"] == 50 and data["tests"][0]["status"] == "failed"
    scored = hosted.scored_checks(_graded("SKIP"), 50)
    assert sum(c.max_score for c in scored) == 50 and sum(c.score for c in scored) == 0
