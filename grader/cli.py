"""Command line: `grader check`, `grader status`, `grader labs`, `grader grade-all`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader import classroom, grade_all, gradescope, labs, paths, progress, sandbox
from grader.gate import PhaseLocked, require
from grader.phases import UnknownPhaseError, get_phase
from grader.report import render_report, render_table
from grader.runner import DEFAULT_TIMEOUT_S, CheckOptions, NotPublishedError, check_phase

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
    grade_all.add_argument("--csv", type=Path, required=True,
                           help="one row per submission, written as each finishes; rerunning with the same "
                                "CSV grades only the submissions without a row")
    grade_all.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                           help="grade N submissions at once, each in its own sandbox (on a GPU: at most one "
                                "per GPU, so that no two timed checks share one)")
    grade_all.add_argument("--reports", type=Path, metavar="DIR",
                           help="write each learner's report here (default: <csv name>-reports/ beside the CSV)")
    grade_all.add_argument("--unsandboxed", action="store_true",
                           help="grade without the bubblewrap sandbox, with your own permissions "
                                "(only for code you trust)")
    _add_check_options(grade_all)

    gs = sub.add_parser("gradescope", help="instructors: build a phase's Gradescope autograder zip")
    gs.add_argument("phase")
    gs.add_argument("--out", type=Path, help="the zip to write (default: autograder-<phase>.zip)")
    gs.add_argument("--points", type=float, default=100.0, help="the phase's points on Gradescope (default 100)")
    gs.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help=f"limit for each notebook cell and each graded test (default {DEFAULT_TIMEOUT_S:g})")

    room = sub.add_parser("classroom", add_help=False,
                          help="GitHub Classroom's workflow: `classroom grade`, `classroom points <phase>`")
    room.add_argument("rest", nargs=argparse.REMAINDER)
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

def cmd_grade_all(args: argparse.Namespace) -> int:
    phase = get_phase(args.phase)
    if not phase.published:
        print(f"{phase.name}: the lab of this phase is not published yet", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    if not args.unsandboxed and (why := sandbox.check_works()):
        print(f"grader grade-all: {why}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    try:
        grade_all.grade_all(args, phase)
    except grade_all.GradeAllError as err:
        print(f"grader grade-all: {err}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    except KeyboardInterrupt:
        sandbox.kill_running()
        return 130
    return EXIT_PASSED

def cmd_gradescope(args: argparse.Namespace) -> int:
    phase = get_phase(args.phase)
    out = args.out or Path(f"autograder-{phase.name}.zip")
    try:
        gradescope.build(phase, out, points=args.points, timeout_s=args.timeout)
    except ValueError as err:
        print(f"grader gradescope: {err}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    print(f"wrote {out}: upload it as the autograder of a Gradescope programming assignment worth "
          f"{args.points:g} points (Ubuntu base image); learners submit {phase.lab}.ipynb")
    return EXIT_PASSED


def cmd_classroom(args: argparse.Namespace) -> int:
    return classroom.main(args.rest)


COMMANDS = {"check": cmd_check, "status": cmd_status, "labs": cmd_labs, "grade-all": cmd_grade_all,
            "gradescope": cmd_gradescope, "classroom": cmd_classroom}

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["classroom"]:  # its own parser (argparse's REMAINDER would swallow no leading --help)
        return classroom.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UnknownPhaseError as err:
        print(f"grader: {err}", file=sys.stderr)
        return EXIT_CANNOT_GRADE
    except BrokenPipeError:  # `grader status | head`
        sys.stderr.close()
        return EXIT_PASSED

