"""`grader grade-all`: every submission of a class, graded in parallel, resumable.

Each submission is graded by `grader check` in its own bubblewrap sandbox (grader/sandbox.py), so the
submissions graded at the same time cannot see each other. A row is appended to the CSV (and flushed)
the moment its submission is graded: a crash or Ctrl-C keeps every finished row, and running the same
command again grades only the submissions without one. When the run completes, the CSV is rewritten
in the submissions' order and each learner gets a plain-text report (the table `grader check` prints).

On a GPU, timed checks must not share a GPU (two kernels timed at once halve each other's bandwidth):
each GPU is a slot that one submission holds for the whole of its grading (CUDA_VISIBLE_DEVICES names
it), so at most one submission per GPU runs at a time whatever --jobs says. On the emulator nothing is
timed, and --jobs submissions run at once.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from tqdm import tqdm

from grader import deliverables, progress, sandbox
from grader.phases import Phase
from grader.report import CheckResult, PhaseReport, render_report
from grader.runner import CheckOptions, check_phase, write_solution_files

EXTRA_FIELDS = ("passed_checks", "failed_checks", "deliverable", "grading_seconds")
FIELDS = ("submission", *progress.GRADE_FIELDS, *EXTRA_FIELDS)


class GradeAllError(RuntimeError):
    """The CSV or the options cannot be used (the message says what was expected and what came)."""


def find_submission_notebook(sub: Path, lab: str) -> Path | None:
    for candidate in (sub / f"{lab}.ipynb", sub / "labs" / f"{lab}.ipynb"):
        if candidate.is_file():
            return candidate
    return None


def check_args(args: argparse.Namespace, phase: Phase) -> list[str]:
    """The options of `grade-all` passed on to the sandboxed `grader check` (the phase first)."""
    out = [phase.name, "--timeout", str(args.timeout)]
    if args.device:
        out += ["--device", args.device]
    if args.require_perf:
        out.append("--require-perf")
    if args.sanitize:
        out.append("--sanitize")
    if args.seed is not None:
        out += ["--seed", str(args.seed)]
    return out


def report_from_json(data: dict) -> PhaseReport:
    """A `grader check --json` report back as a PhaseReport (to render its table)."""
    names = {f.name for f in dataclasses.fields(CheckResult)}
    checks = [CheckResult(**{k: v for k, v in c.items() if k in names}) for c in data.get("checks") or []
              if isinstance(c, dict)]
    names = {f.name for f in dataclasses.fields(PhaseReport)} - {"checks"}
    return PhaseReport(**{"phase": "", "title": "", "device": "", "seed": None,
                          **{k: v for k, v in data.items() if k in names}}, checks=checks)


def _with_deliverable(row: dict, verdict: deliverables.Verdict | None) -> dict:
    """A row's verdict: the report's, and the deliverable as the grader re-evaluated it from the files."""
    if verdict is None:
        return row
    failed = [row["failed_checks"]] if row.get("failed_checks") else []
    if not verdict.passed:
        failed.append(f"{verdict.deliverable} (re-evaluated by the grader): {verdict.message}")
    return {**row, "passed": bool(row["passed"]) and verdict.passed, "deliverable": str(verdict),
            "failed_checks": "; ".join(failed)}


def _row_of(report: PhaseReport) -> dict:
    failed = [c for c in report.checks if c.blocking(report.require_perf)]
    return {"passed": report.passed, "device": report.device, "seed": report.seed,
            "passed_checks": sum(c.result == "PASS" for c in report.checks),
            "failed_checks": "; ".join(f"{c.name} [{c.result}]" for c in failed)}


@dataclasses.dataclass
class Graded:
    row: dict
    text: str  # the learner's report


def grade_unsandboxed(args: argparse.Namespace, phase: Phase, notebook: Path, env: dict[str, str]) -> Graded:
    del env  # one process: the slot's GPU cannot be chosen per submission (--jobs is 1 here)
    with tempfile.TemporaryDirectory(prefix="grader-ws-") as ws:
        write_solution_files(Path(ws), phase, include_own=False)  # earlier phases: the reference files
        report = check_phase(CheckOptions(
            phase=phase, device=args.device, notebook=notebook, workspace=Path(ws), timeout_s=args.timeout,
            require_perf=args.require_perf, sanitize=args.sanitize, seed=args.seed, record=False))
        verdict = deliverables.verify(phase.name, Path(ws))
    text = render_report(report) + (f"\ndeliverable: {verdict}" if verdict else "")
    return Graded(_with_deliverable(_row_of(report), verdict), text)


def grade_sandboxed(args: argparse.Namespace, phase: Phase, sub: Path, notebook: Path,
                    env: dict[str, str]) -> Graded:
    result = sandbox.grade_in_sandbox(sub, notebook, args.submissions, check_args(args, phase),
                                      sandbox.Limits(wall_seconds=max(600.0, 20 * args.timeout)),
                                      prepare=lambda ws: write_solution_files(ws, phase, include_own=False),
                                      extra_env=env)
    verdict = result.deliverable
    if result.report is None:
        if result.returncode is None:
            why = "killed after the sandbox's time limit"
        elif result.rejected:
            why = "the report channel carried a report that failed authentication (refused)"
        else:
            why = f"no authentic report (exit code {result.returncode}): " + result.output.strip()[-300:]
        text = f"{phase.name}: NOT GRADED\nsandbox: {why}\n\nwhat the sandbox printed (end):\n" \
               + result.output.strip()[-4000:]
        return Graded(_with_deliverable({"passed": False, "failed_checks": f"sandbox: {why}"}, verdict), text)
    report = report_from_json(result.report)
    row = _row_of(report)
    row["passed"] = bool(result.report.get("passed"))  # the authenticated verdict, as sent
    text = render_report(report) + (f"\ndeliverable (re-evaluated by the grader): {verdict}" if verdict else "")
    return Graded(_with_deliverable(row, verdict), text)


# ---------------------------------------------------------------- GPUs


def visible_gpus() -> list[str]:
    """The GPUs this machine shows (CUDA_VISIBLE_DEVICES when set, else nvidia-smi's list)."""
    if (visible := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [m.group(1) for m in re.finditer(r"^GPU (\d+):", out, re.MULTILINE)]


def grading_slots(device: str | None, jobs: int) -> tuple[list[dict[str, str]], str | None]:
    """One environment per slot a submission grades in, and a note when --jobs was lowered."""
    from grader.runner import _cuda_unusable

    on_gpu = device == "cuda" or (device is None and _cuda_unusable() is None)
    if not on_gpu:
        return [{} for _ in range(jobs)], None
    gpus = visible_gpus() or ["0"]
    slots = [{"CUDA_VISIBLE_DEVICES": g} for g in gpus[:jobs]]
    note = None
    if jobs > len(slots):
        note = (f"--jobs {jobs}: {len(gpus)} GPU(s), and a GPU is never shared by two timed checks: "
                f"grading {len(slots)} submission(s) at a time")
    return slots, note


# ---------------------------------------------------------------- the CSV


def read_finished(path: Path, phase: str) -> dict[str, dict]:
    """The rows an earlier (interrupted) run of the same phase already wrote, by submission."""
    if not path.exists() or path.stat().st_size == 0:
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise GradeAllError(f"{path} exists but is not a grade-all CSV of this grader (columns "
                                f"{reader.fieldnames}, expected {list(FIELDS)}): choose another --csv")
        rows = {r["submission"]: r for r in reader if r.get("submission")}
    phases = {r["phase"] for r in rows.values()}
    if phases - {phase}:
        raise GradeAllError(f"{path} holds grades of {sorted(phases)}, not {phase}: choose another --csv "
                            f"(rerunning with the same --csv and --phase resumes)")
    return rows


class RowWriter:
    """Appends one row at a time and flushes it to disk: an interruption loses no finished row."""

    def __init__(self, path: Path) -> None:
        new = not path.exists() or path.stat().st_size == 0
        self._fh = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._writer = csv.DictWriter(self._fh, fieldnames=FIELDS)
        self._lock = threading.Lock()
        if new:
            self._writer.writeheader()
            self._flush()

    def _flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def write(self, row: dict) -> None:
        with self._lock:
            if self._fh.closed:  # the run was interrupted: a sandbox killed then is no grade
                return
            self._writer.writerow(row)
            self._flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def rewrite_sorted(path: Path) -> int:
    """The finished CSV in the submissions' order (rows were appended in the order they finished)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: r["submission"])
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return len(rows)


def reports_dir_for(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + "-reports")


# ---------------------------------------------------------------- the run


def grade_all(args: argparse.Namespace, phase: Phase) -> int:
    """Grade every submission directory without a finished row; returns how many were graded now."""
    jobs = args.jobs
    if jobs < 1:
        raise GradeAllError(f"--jobs must be at least 1, got {jobs}")
    if args.unsandboxed and jobs > 1:
        raise GradeAllError("--unsandboxed grades in this process, one submission at a time: "
                            "drop --jobs, or grade in the sandbox")
    finished = read_finished(args.csv, phase.name)
    subs = sorted(p for p in args.submissions.iterdir() if p.is_dir())
    todo = [s for s in subs if s.name not in finished]
    reports = args.reports or reports_dir_for(args.csv)
    reports.mkdir(parents=True, exist_ok=True)
    if finished:
        print(f"{args.csv}: {len(finished)} submission(s) already graded (kept); {len(todo)} to grade",
              flush=True)
    slots, note = grading_slots(args.device, jobs)
    if note:
        print(note, flush=True)
    free: queue.Queue[dict[str, str]] = queue.Queue()
    for slot in slots:
        free.put(slot)
    course = progress.course_version()  # the instructor's course grades every submission
    grade = grade_unsandboxed if args.unsandboxed else None

    def one(sub: Path) -> dict:
        started = time.monotonic()
        notebook = find_submission_notebook(sub, phase.lab)
        if notebook is None:
            graded = Graded({"passed": False, "failed_checks": f"no {phase.lab}.ipynb"},
                            f"{phase.name}: NOT GRADED\nno {phase.lab}.ipynb (nor labs/{phase.lab}.ipynb) in "
                            f"{sub.name}")
        else:
            env = free.get()
            try:
                graded = (grade(args, phase, notebook, env) if grade is not None
                          else grade_sandboxed(args, phase, sub, notebook, env))
            finally:
                free.put(env)
        row = {"submission": sub.name, "phase": phase.name, **graded.row,
               "graded_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "course_version": course,
               "grading_seconds": f"{time.monotonic() - started:.1f}"}
        (reports / f"{sub.name}.txt").write_text(graded.text + "\n", encoding="utf-8")
        writer.write(row)  # on disk the moment it is finished, whatever happens to the run afterwards
        return row

    writer = RowWriter(args.csv)
    bar = tqdm(total=len(subs), initial=len(finished), unit="submission", desc=phase.name, file=sys.stderr,
               dynamic_ncols=True)
    pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="grade")
    pending: dict[Future, Path] = {}
    try:
        for sub in todo:
            pending[pool.submit(one, sub)] = sub
        while pending:
            # With a timeout: the main thread comes back to Python twice a second, so a Ctrl-C that lands just
            # before it blocks is acted on at once, not when the submission being graded finishes.
            done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in done:
                sub = pending.pop(fut)
                row = fut.result()
                bar.write(f"{sub.name:30} {'PASSED' if row['passed'] else 'NOT PASSED'}")
                bar.update(1)
    except BaseException:
        # Ctrl-C or a grader bug: the rows written so far stay; the next run grades the others.
        for fut in pending:
            fut.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
        writer.close()
        print(f"\ngrade-all interrupted: {args.csv} keeps the finished rows; run the same command again "
              f"to grade the {len(pending)} other(s)", file=sys.stderr)
        raise
    pool.shutdown(wait=True)
    bar.close()
    writer.close()
    total = rewrite_sorted(args.csv)
    print(f"wrote {args.csv} ({total} submissions) and a report per learner in {reports}/")
    return len(todo)
