"""Command line: `grader check`, `grader status`, `grader labs`, `grader grade-all`."""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import sys
import tempfile
from pathlib import Path

from grader import deliverables, labs, paths, progress, sandbox
from grader.gate import PhaseLocked, require
from grader.phases import UnknownPhaseError, get_phase
from grader.report import CheckResult, render_report, render_table
from grader.runner import DEFAULT_TIMEOUT_S, CheckOptions, NotPublishedError, check_phase, write_solution_files

EXIT_PASSED, EXIT_FAILED, EXIT_CANNOT_GRADE = 0, 1, 2


def _add_check_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "emu", "cpu"],
                   help="device for the notebook and the tests (default: cuda if a GPU is usable, else emu)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"limit for each notebook cell and each graded test (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--require-perf", action="store_true",
                   help="performance checks that cannot be measured (no GPU) block the phase")
    p.add_argument("--sanitize", action="store_true",
                   help="run the emulator in check mode (MINITORCH_EMU_CHECK=1): slower, stricter")
    p.add_argument("--seed", type=int, help="reuse the seed of an earlier run (printed in its report)")

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description="Grade MiniTorch CUDA labs.")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="grade a phase: run its lab notebook, then its graded tests")
    check.add_argument("phase", help="phase1, phase2, phase3a, ...")
    check.add_argument("--solutions", action="store_true",
                       help="grade the reference solutions in a temporary workspace (records no progress)")
    check.add_argument("--json", action="store_true", help="print a machine-readable result")
    check.add_argument("--notebook", type=Path, help="grade this notebook instead of labs/<lab>.ipynb")
    check.add_argument("--workspace", type=Path,
                       help="learner files directory (default: MINITORCH_WORKSPACE or minitorch/csrc)")
    check.add_argument("--no-notebook", action="store_true",
                       help="skip the notebook: grade the files already in the workspace")
    check.add_argument("--no-record", action="store_true", help="do not record the result in the progress file")
    check.add_argument("-k", "--select", metavar="EXPR",
                       help="run only the graded tests matching this pytest -k expression (never passes the phase)")
    check.add_argument("--keep-temp", action="store_true", help="keep the temporary run directory (debugging)")
    # grade-all's sandbox: the report goes out, authenticated, on an inherited pipe (grader/sandbox.py)
    check.add_argument("--report-fd", type=int, help=argparse.SUPPRESS)
    check.add_argument("--report-key-fd", type=int, help=argparse.SUPPRESS)
    _add_check_options(check)

    status = sub.add_parser("status", help="show each phase: locked / unlocked / passed / stale")
    status.add_argument("--json", action="store_true")

    lab = sub.add_parser("labs", help="generate labs/ from solutions/")
    lab.add_argument("labs", nargs="*", help="only these labs (e.g. phase1_memory)")
    lab.add_argument("--check", action="store_true", help="write nothing; fail if a lab differs (CI)")
    lab.add_argument("--force", action="store_true",
                     help="overwrite labs you edited (a backup labs/<lab>.ipynb.bak-<time> is kept)")
    lab.add_argument("--solutions-dir", type=Path, help=argparse.SUPPRESS)
    lab.add_argument("--labs-dir", type=Path, help=argparse.SUPPRESS)

    grade_all = sub.add_parser("grade-all", help="instructors: grade every submission in a directory")
    grade_all.add_argument("submissions", type=Path,
                           help="one sub-directory per learner, holding <lab>.ipynb (or labs/<lab>.ipynb)")
    grade_all.add_argument("--phase", required=True)
    grade_all.add_argument("--csv", type=Path, required=True, help="write one row per submission here")
    grade_all.add_argument("--unsandboxed", action="store_true",
                           help="grade without the bubblewrap sandbox, with your own permissions "
                                "(only for code you trust)")
    _add_check_options(grade_all)
    return parser

def cmd_check(args: argparse.Namespace) -> int:
    # In grade-all's sandbox: protect this process and take the report key before any learner code runs.
    channel = (sandbox.ReportChannel.open(args.report_fd, args.report_key_fd)
               if args.report_fd is not None and args.report_key_fd is not None else None)

    def emit_json(text: str) -> None:
        print(text)
        if channel is not None:
            channel.send(text)

    phase = get_phase(args.phase)
    if phase.published and not args.solutions:  # reference solutions are graded whatever the progress says
        try:
            require(phase.name)
        except PhaseLocked as err:
            if args.json:
                emit_json(json.dumps({"phase": phase.name, "passed": False, "error": str(err)}))
            else:
                print(f"grader check {phase.name}: {err} (Instructors: GRADER_SKIP_GATES=1 grades it anyway.)",
                      file=sys.stderr)
            return EXIT_CANNOT_GRADE
    opts = CheckOptions(
        phase=phase, device=args.device, solutions=args.solutions, notebook=args.notebook,
        workspace=args.workspace, run_notebook=not args.no_notebook, timeout_s=args.timeout,
        require_perf=args.require_perf, sanitize=args.sanitize, seed=args.seed,
        record=not args.no_record, keep_temp=args.keep_temp, select=args.select)
    try:
        report = check_phase(opts)
    except NotPublishedError as err:
        if args.json:
            emit_json(json.dumps({"phase": phase.name, "passed": False, "error": str(err)}))
        else:
            print(err, file=sys.stderr)
        return EXIT_CANNOT_GRADE
    if args.json:
        emit_json(report.to_json())
    else:
        print(render_report(report))
    return EXIT_PASSED if report.passed else EXIT_FAILED

def cmd_status(args: argparse.Namespace) -> int:
    rows = progress.status_rows()
    deliverables = progress.deliverable_rows()
    if args.json:
        print(json.dumps({"phases": rows, "deliverables": deliverables}, indent=2))
        return EXIT_PASSED
    table = [[r["phase"], r["title"], r["state"].upper(), (r["graded_at"] or "")[:16].replace("T", " "),
              r["device"] or "", r["note"]] for r in rows]
    print(render_table(table, ["phase", "title", "state", "passed (UTC)", "device", "note"],
                       [8, 40, 8, 16, 32, 40]))
    print(render_table([[d["deliverable"], d["title"], d["state"].upper(), f"pass {d['unlocked_by']}"]
                        for d in deliverables], ["deliverable", "title", "state", "unlocked by"], [12, 24, 8, 16]))
    print(f"progress file: {paths.progress_file()}")
    return EXIT_PASSED

def cmd_labs(args: argparse.Namespace) -> int:
    solutions_dir = args.solutions_dir or paths.solutions_dir()
    labs_dir = args.labs_dir or paths.labs_dir()
    try:
        results = labs.sync_labs(solutions_dir, labs_dir, names=args.labs or None, check=args.check, force=args.force)
    except labs.LabError as err:
        print(f"grader labs: {err}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    if not results:
        print(f"grader labs: no solution notebooks in {solutions_dir}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    for r in results:
        print(f"{r.lab:30} {r.action}" + (f": {r.detail}" if r.detail else ""))
    failed = [r for r in results if r.failed]
    if failed and args.check:
        print(f"{len(failed)} lab(s) out of date: run `grader labs` and commit labs/", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_PASSED

def _find_submission_notebook(sub: Path, lab: str) -> Path | None:
    for candidate in (sub / f"{lab}.ipynb", sub / "labs" / f"{lab}.ipynb"):
        if candidate.exists():
            return candidate
    return None

def _check_args(args: argparse.Namespace, phase) -> list[str]:
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

def _with_deliverable(row: dict, verdict: deliverables.Verdict | None) -> dict:
    """A row's verdict: the report's, and the deliverable as the grader re-evaluated it from the files."""
    if verdict is None:
        return row
    failed = [row["failed_checks"]] if row.get("failed_checks") else []
    if not verdict.passed:
        failed.append(f"{verdict.deliverable} (re-evaluated by the grader): {verdict.message}")
    return {**row, "passed": bool(row["passed"]) and verdict.passed, "deliverable": str(verdict),
            "failed_checks": "; ".join(failed)}


def _grade_unsandboxed(args: argparse.Namespace, phase, notebook: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="grader-ws-") as ws:
        write_solution_files(Path(ws), phase, include_own=False)  # earlier phases: the reference files
        report = check_phase(CheckOptions(
            phase=phase, device=args.device, notebook=notebook, workspace=Path(ws), timeout_s=args.timeout,
            require_perf=args.require_perf, sanitize=args.sanitize, seed=args.seed, record=False))
        verdict = deliverables.verify(phase.name, Path(ws))
    failed = [c for c in report.checks if c.blocking(report.require_perf)]
    row = {"passed": report.passed, "device": report.device, "seed": report.seed,
           "passed_checks": sum(c.result == "PASS" for c in report.checks),
           "failed_checks": "; ".join(f"{c.name} [{c.result}]" for c in failed)}
    return _with_deliverable(row, verdict)


def _grade_sandboxed(args: argparse.Namespace, phase, sub: Path, notebook: Path) -> dict:
    result = sandbox.grade_in_sandbox(sub, notebook, args.submissions, _check_args(args, phase),
                                      sandbox.Limits(wall_seconds=max(600.0, 20 * args.timeout)),
                                      prepare=lambda ws: write_solution_files(ws, phase, include_own=False))
    report = result.report
    if report is None:
        if result.returncode is None:
            why = "killed after the sandbox's time limit"
        elif result.rejected:
            why = "the report channel carried a report that failed authentication (refused)"
        else:
            why = f"no authentic report (exit code {result.returncode}): " + result.output.strip()[-300:]
        return _with_deliverable({"passed": False, "failed_checks": f"sandbox: {why}"}, result.deliverable)
    require_perf = bool(report.get("require_perf"))
    checks = report.get("checks") or []
    failed = [c for c in checks if CheckResult(c.get("name", ""), str(c.get("result")), "", "").blocking(require_perf)]
    row = {"passed": bool(report.get("passed")), "device": report.get("device"), "seed": report.get("seed"),
           "passed_checks": sum(c.get("result") == "PASS" for c in checks),
           "failed_checks": "; ".join(f"{c.get('name')} [{c.get('result')}]" for c in failed)}
    return _with_deliverable(row, result.deliverable)

def cmd_grade_all(args: argparse.Namespace) -> int:
    phase = get_phase(args.phase)
    if not phase.published:
        print(f"{phase.name}: the lab of this phase is not published yet", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    if not args.unsandboxed and (why := sandbox.check_works()):
        print(f"grader grade-all: {why}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    rows = []
    course = progress.course_version()  # the instructor's course grades every submission

    def graded(sub: Path, row: dict) -> dict:
        return {"submission": sub.name, "phase": phase.name, **row,
                "graded_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "course_version": course}

    for sub in sorted(p for p in args.submissions.iterdir() if p.is_dir()):
        notebook = _find_submission_notebook(sub, phase.lab)
        if notebook is None:
            rows.append(graded(sub, {"passed": False, "failed_checks": f"no {phase.lab}.ipynb"}))
            continue
        row = (_grade_unsandboxed(args, phase, notebook) if args.unsandboxed
               else _grade_sandboxed(args, phase, sub, notebook))
        rows.append(graded(sub, row))
        print(f"{sub.name:30} {'PASSED' if row['passed'] else 'NOT PASSED'}", flush=True)
    # progress.GRADE_FIELDS under the names `grader status --json` uses, then what only grading shows
    fields = ["submission", *progress.GRADE_FIELDS, "passed_checks", "failed_checks", "deliverable"]
    with open(args.csv, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv} ({len(rows)} submissions)")
    return EXIT_PASSED

COMMANDS = {"check": cmd_check, "status": cmd_status, "labs": cmd_labs, "grade-all": cmd_grade_all}

def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UnknownPhaseError as err:
        print(f"grader: {err}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    except BrokenPipeError:  # `grader status | head`
        sys.stderr.close()
        return EXIT_PASSED

