"""Grading on a school's engine (a GitHub Actions runner, a Gradescope container): one learner per
machine, so no sandbox of our own; the engine's machine is thrown away after the run.

`grade_notebook` grades one lab notebook in a fresh workspace that holds the files of the earlier
phases; `scored_checks` turns the report into points, one share per graded check, so that the full
score is reached exactly when the phase passes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader import deliverables
from grader.phases import Phase
from grader.report import INFO, NOT_MEASURED, PASS, SKIP, CheckResult, PhaseReport, format_measure
from grader.runner import CheckOptions, check_phase

MAX_TEST_OUTPUT = 8000  # characters of one check's explanation (the engines show it on a web page)


@dataclass
class Graded:
    report: PhaseReport
    deliverable: deliverables.Verdict | None

    @property
    def passed(self) -> bool:
        return self.report.passed and (self.deliverable is None or self.deliverable.passed)


def grade_notebook(phase: Phase, notebook: Path, earlier_files: dict[str, str], *, device: str | None = "emu",
                   timeout_s: float | None = None, seed: int | None = None) -> Graded:
    """Run `notebook` and the phase's graded tests in a fresh workspace seeded with `earlier_files`
    (the earlier phases' learner files), then re-evaluate the phase's deliverable from what it saved."""
    with tempfile.TemporaryDirectory(prefix="grader-hosted-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        for name, text in earlier_files.items():
            (workspace / name).write_text(text, encoding="utf-8")
        opts = CheckOptions(phase=phase, device=device, notebook=notebook, workspace=workspace, seed=seed,
                            record=False)
        if timeout_s is not None:
            opts.timeout_s = timeout_s
        report = check_phase(opts)
        return Graded(report, deliverables.verify(phase.name, workspace))


@dataclass(frozen=True)
class ScoredCheck:
    name: str
    passed: bool
    score: float
    max_score: float
    output: str
    step: str


def counts(check: CheckResult, require_perf: bool) -> bool:
    """A check that decides the phase: it passed, or it blocks it. SKIP, INFO and an unmeasured performance
    check (without --require-perf) decide nothing and are worth no points."""
    if check.result in (SKIP, INFO):
        return False
    return check.result != NOT_MEASURED or (require_perf and not check.unavailable)


def check_output(check: CheckResult) -> str:
    parts = [f"result: {check.result}"]
    if check.perf:
        parts += [f"measured: {format_measure(p)}" for p in check.perf]
    elif check.measured:
        parts.append(f"measured: {check.measured}")
    if check.reason.strip():
        parts.append(check.reason.strip())
    if check.hint and check.result not in (PASS, INFO, SKIP, NOT_MEASURED):
        parts.append(f"hint: {check.hint}")
    parts += [f"warning: {w.strip()}" for w in check.warnings]
    text = "\n".join(parts)
    return text if len(text) <= MAX_TEST_OUTPUT else text[:MAX_TEST_OUTPUT] + "\n... (cut)"


def scored_checks(graded: Graded, points: float) -> list[ScoredCheck]:
    """One entry per check of the report (and one for a deliverable re-evaluated outside the tests), each
    deciding check worth an equal share of `points`."""
    report = graded.report
    deciding = [c for c in report.checks if counts(c, report.require_perf)]
    n = len(deciding) + (graded.deliverable is not None)
    share = points / n if n else 0.0
    out = []
    for c in report.checks:
        worth = share if counts(c, report.require_perf) else 0.0
        passed = c.result == PASS or not counts(c, report.require_perf)
        out.append(ScoredCheck(c.name, passed, worth if c.result == PASS else 0.0, worth, check_output(c), c.step))
    if (v := graded.deliverable) is not None:
        out.append(ScoredCheck(f"{v.deliverable} (re-evaluated by the grader)", v.passed, share if v.passed else 0.0,
                               share, str(v), "deliverable"))
    if not n:  # nothing decided the phase (the notebook is missing, say): the phase's points are lost
        out.append(ScoredCheck(f"{report.phase}: graded", False, 0.0, points,
                               "no check decided the phase: see the report above", "setup"))
    return out
