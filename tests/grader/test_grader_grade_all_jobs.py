"""`grader grade-all --jobs N`: parallel, resumable, one timed submission per GPU, a report per learner.

The grading itself is replaced by a fake here (the sandboxed grading of a real submission is exercised by
test_grader_sandbox.py and test_grader_forgery.py, which run `grade-all` end to end): what is tested is
the scheduling around it, which no real grading would show reliably.
"""

from __future__ import annotations

import argparse
import csv
import signal
import threading
import time
from pathlib import Path

import pytest

from grader import grade_all
from grader.phases import get_phase

PHASE = get_phase("phase1")


def _submissions(tmp_path: Path, names: list[str], without_notebook: tuple[str, ...] = ()) -> Path:
    subs = tmp_path / "submissions"
    for name in names:
        (subs / name).mkdir(parents=True)
        if name not in without_notebook:
            (subs / name / f"{PHASE.lab}.ipynb").write_text("{}")
    return subs


def _args(subs: Path, out: Path, jobs: int, device: str = "emu") -> argparse.Namespace:
    return argparse.Namespace(submissions=subs, phase=PHASE.name, csv=out, jobs=jobs, reports=None,
                              unsandboxed=False, device=device, timeout=120.0, require_perf=False,
                              sanitize=False, seed=None)


def _rows(out: Path) -> list[dict]:
    with open(out, newline="") as fh:
        return list(csv.DictReader(fh))


def test_parallel_rows_are_complete_sorted_and_each_learner_has_a_report(tmp_path, monkeypatch):
    names = [f"learner{i:02d}" for i in range(7)]
    subs = _submissions(tmp_path, names, without_notebook=("learner03",))
    running, peak, lock, three = [0], [0], threading.Lock(), threading.Event()

    def fake(args, phase, sub, notebook, env):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                three.set()
        three.wait(30)  # the first ones wait until three run at once
        time.sleep(0.2 if sub.name.endswith(("0", "5")) else 0.05)  # finish out of order
        with lock:
            running[0] -= 1
        passed = int(sub.name[-1]) % 2 == 0
        return grade_all.Graded({"passed": passed, "passed_checks": 3, "failed_checks": "" if passed else "x [FAIL]"},
                                f"report of {sub.name}")

    monkeypatch.setattr(grade_all, "grade_sandboxed", fake)
    out = tmp_path / "grades.csv"
    assert grade_all.grade_all(_args(subs, out, jobs=3), PHASE) == 7
    rows = _rows(out)
    assert [r["submission"] for r in rows] == names  # rewritten in order, although finished out of order
    assert peak[0] == 3  # three at once, never more
    by = {r["submission"]: r for r in rows}
    assert by["learner03"]["passed"] == "False" and "no phase1_memory.ipynb" in by["learner03"]["failed_checks"]
    assert by["learner02"]["passed"] == "True" and by["learner01"]["passed"] == "False"
    assert all(r["phase"] == "phase1" and r["graded_at"] and r["course_version"] for r in rows)
    reports = tmp_path / "grades-reports"
    assert sorted(p.stem for p in reports.glob("*.txt")) == names
    assert (reports / "learner04.txt").read_text().startswith("report of learner04")


def test_an_interrupted_run_keeps_its_rows_and_the_rerun_grades_only_the_rest(tmp_path, monkeypatch):
    names = [f"s{i}" for i in range(6)]
    subs = _submissions(tmp_path, names)
    graded: list[str] = []
    stopped = threading.Event()
    close = grade_all.RowWriter.close
    monkeypatch.setattr(grade_all.RowWriter, "close", lambda self: (close(self), stopped.set()))

    def interrupted(args, phase, sub, notebook, env):
        if sub.name == "s3":  # Ctrl-C while s3 is being graded: it reaches the main thread
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # a real Ctrl-C
            assert stopped.wait(30)  # s3 ends only after the run stopped: its row must not count
            return grade_all.Graded({"passed": True, "passed_checks": 1, "failed_checks": ""}, "killed")
        graded.append(sub.name)
        return grade_all.Graded({"passed": True, "passed_checks": 1, "failed_checks": ""}, "ok")

    monkeypatch.setattr(grade_all, "grade_sandboxed", interrupted)
    out = tmp_path / "grades.csv"
    with pytest.raises(KeyboardInterrupt):
        grade_all.grade_all(_args(subs, out, jobs=1), PHASE)
    assert [r["submission"] for r in _rows(out)] == ["s0", "s1", "s2"]  # flushed as they finished
    assert "s4" not in graded and "s5" not in graded  # nothing more started after Ctrl-C

    graded.clear()
    monkeypatch.setattr(grade_all, "grade_sandboxed",
                        lambda a, p, sub, n, e: graded.append(sub.name) or grade_all.Graded(
                            {"passed": False, "passed_checks": 0, "failed_checks": "y [FAIL]"}, "no"))
    assert grade_all.grade_all(_args(subs, out, jobs=2), PHASE) == 3
    assert sorted(graded) == ["s3", "s4", "s5"]  # the finished rows were not graded again
    rows = {r["submission"]: r["passed"] for r in _rows(out)}
    assert rows == {"s0": "True", "s1": "True", "s2": "True", "s3": "False", "s4": "False", "s5": "False"}


def test_a_csv_of_another_phase_is_refused_not_mixed(tmp_path):
    subs = _submissions(tmp_path, ["a"])
    out = tmp_path / "grades.csv"
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=grade_all.FIELDS)
        writer.writeheader()
        writer.writerow({"submission": "a", "phase": "phase2", "passed": True})
    with pytest.raises(grade_all.GradeAllError, match=r"holds grades of \['phase2'\], not phase1"):
        grade_all.grade_all(_args(subs, out, jobs=1), PHASE)
    out.write_text("name,grade\nx,1\n")
    with pytest.raises(grade_all.GradeAllError, match="not a grade-all CSV"):
        grade_all.grade_all(_args(subs, out, jobs=1), PHASE)


def test_on_gpus_no_two_submissions_share_a_gpu(tmp_path, monkeypatch):
    subs = _submissions(tmp_path, [f"g{i}" for i in range(8)])
    monkeypatch.setattr(grade_all, "visible_gpus", lambda: ["0", "1"])
    holders: dict[str, int] = {}
    lock, clashes, seen = threading.Lock(), [], set()

    def timed(args, phase, sub, notebook, env):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            holders[gpu] = holders.get(gpu, 0) + 1
            seen.add(gpu)
            if holders[gpu] > 1:
                clashes.append(gpu)
        time.sleep(0.05)
        with lock:
            holders[gpu] -= 1
        return grade_all.Graded({"passed": True, "passed_checks": 1, "failed_checks": ""}, "ok")

    monkeypatch.setattr(grade_all, "grade_sandboxed", timed)
    assert grade_all.grade_all(_args(subs, tmp_path / "g.csv", jobs=4, device="cuda"), PHASE) == 8
    assert not clashes and seen == {"0", "1"}
    slots, note = grade_all.grading_slots("cuda", 4)
    assert len(slots) == 2 and "2 GPU(s)" in note
    slots, note = grade_all.grading_slots("emu", 4)
    assert len(slots) == 4 and note is None and not any(slots)
