"""GitHub Classroom: grading a learner's repository on every push (classroom/template/.github/workflows/).

The learner's repository is made from the instructor's template repository (the course without
solutions/), so its first commit holds the untouched labs. On every push the workflow runs:

1. `grader classroom grade`: each published phase whose lab differs from the template's (the first
   commit) is graded with `grader check <phase> --device emu`, unless the result kept from an earlier
   run (actions/cache, .grader/classroom/) graded the same labs. Its workspace holds the files the
   learner's own earlier labs write, so Phase 3b builds on the learner's Phase 3a. The reports go to
   the job summary ($GITHUB_STEP_SUMMARY), a table per phase.
2. `grader classroom points <phase>`, once per phase, each a step of Classroom's
   `autograding-command-grader` worth that phase's points: it exits 0 only when that phase's kept result
   passed and graded the labs as they are now. Classroom's `autograding-grading-reporter` adds them up.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from grader import hosted, labs, paths, progress
from grader.phases import PHASES, Phase, get_phase
from grader.report import render_report

RESULTS_DIR = Path(".grader") / "classroom"
NOT_ATTEMPTED, GRADED, REUSED = "not attempted", "graded", "kept"


def published() -> list[Phase]:
    return [p for p in PHASES.values() if p.published]


def lab_path(root: Path, phase: Phase) -> Path:
    return root / "labs" / f"{phase.lab}.ipynb"


def inputs_sha256(root: Path, phase: Phase) -> str:
    """What grading the phase reads from the learner: the code of its lab and of every earlier lab."""
    digest = hashlib.sha256(phase.name.encode())
    for p in published():
        digest.update((progress.notebook_code_sha256(lab_path(root, p)) or "missing").encode())
        if p.name == phase.name:
            break
    return digest.hexdigest()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def template_commit(root: Path) -> str | None:
    """The repository's first commit: the template as Classroom copied it (None outside a git checkout)."""
    try:
        first = _git(root, "rev-list", "--max-parents=0", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    roots = first.stdout.split()
    return roots[-1] if first.returncode == 0 and roots else None


def changed_from_template(root: Path, phase: Phase, template: str | None) -> bool:
    """Whether the learner edited the phase's lab (its code cells) since the template."""
    if template is None:
        return True  # no history to compare with: grade it
    shown = _git(root, "show", f"{template}:labs/{phase.lab}.ipynb")
    if shown.returncode != 0:
        return True  # the template had no such lab
    try:
        cells = json.loads(shown.stdout).get("cells", [])
    except ValueError:
        return True
    digest = hashlib.sha256()
    for cell in cells:
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            digest.update(("".join(source) if isinstance(source, list) else source).encode())
            digest.update(b"\0")
    return progress.notebook_code_sha256(lab_path(root, phase)) != digest.hexdigest()


def earlier_files(root: Path, phase: Phase) -> dict[str, str]:
    """The files the learner's own earlier labs write (their %%kernel / %%module cells)."""
    files: dict[str, str] = {}
    for p in published():
        if p.name == phase.name:
            break
        if lab_path(root, p).is_file():
            files.update(labs.learner_files(lab_path(root, p)))
    return files


def result_path(results: Path, phase: Phase) -> Path:
    return results / f"{phase.name}.json"


def load_result(results: Path, phase: Phase) -> dict | None:
    try:
        data = json.loads(result_path(results, phase).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def grade(root: Path, results: Path, summary: Path | None, device: str = "emu",
          timeout_s: float | None = None) -> dict[str, str]:
    """Grade every phase whose lab changed; returns what happened to each phase."""
    results.mkdir(parents=True, exist_ok=True)
    template = template_commit(root)
    what: dict[str, str] = {}
    sections = ["# MiniTorch CUDA: grader report", ""]
    for phase in published():
        key = inputs_sha256(root, phase)
        kept = load_result(results, phase)
        if not changed_from_template(root, phase, template):
            what[phase.name] = NOT_ATTEMPTED
            result_path(results, phase).unlink(missing_ok=True)
            sections.append(f"- {phase.name} ({phase.title}): not attempted (the lab is the template's)")
            continue
        if kept is not None and kept.get("inputs_sha256") == key:
            what[phase.name] = REUSED
            verdict = "PASSED" if kept.get("passed") else "NOT PASSED"
            sections.append(f"- {phase.name} ({phase.title}): {verdict}, labs unchanged since "
                            f"{kept.get('graded_at', '?')} (result kept)")
            continue
        print(f"grading {phase.name} ({phase.title}) on {device} ...", flush=True)
        graded = hosted.grade_notebook(phase, lab_path(root, phase), earlier_files(root, phase), device=device,
                                       timeout_s=timeout_s)
        text = render_report(graded.report)
        if graded.deliverable is not None:
            text += f"\ndeliverable (re-evaluated by the grader): {graded.deliverable}"
        print(text, flush=True)
        record = {"phase": phase.name, "passed": graded.passed, "inputs_sha256": key,
                  "graded_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "device": graded.report.device, "course_version": progress.course_version(root),
                  "report": json.loads(graded.report.to_json())}
        result_path(results, phase).write_text(json.dumps(record, indent=2) + "\n")
        what[phase.name] = GRADED
        sections += ["", f"## {phase.name}: {phase.title}: {'PASSED' if graded.passed else 'NOT PASSED'}", "",
                     "```text", text, "```", ""]
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write("\n".join(sections) + "\n")
    return what


def points(root: Path, results: Path, phase: Phase) -> tuple[bool, str]:
    """Whether the phase earns its points now, and why."""
    kept = load_result(results, phase)
    if kept is None:
        return False, f"{phase.name}: not graded (the lab is the template's, or the grading step did not run)"
    if kept.get("inputs_sha256") != inputs_sha256(root, phase):
        return False, f"{phase.name}: the kept result graded other labs than these; run the grading step"
    if not kept.get("passed"):
        return False, f"{phase.name}: NOT PASSED (the job summary shows the grader's report)"
    return True, f"{phase.name}: PASSED ({kept.get('device')}, {kept.get('graded_at')})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grader classroom")
    sub = parser.add_subparsers(dest="action", required=True)
    g = sub.add_parser("grade", help="grade the phases whose lab changed; reports to the job summary")
    g.add_argument("--summary", type=Path, default=os.environ.get("GITHUB_STEP_SUMMARY") or None,
                   help="append the reports here (default: $GITHUB_STEP_SUMMARY)")
    g.add_argument("--device", default="emu", choices=["emu", "cuda"])
    g.add_argument("--timeout", type=float, help="limit for each notebook cell and each graded test")
    p = sub.add_parser("points", help="exit 0 when this phase's kept result passed on the labs as they are")
    p.add_argument("phase")
    for q in (g, p):
        q.add_argument("--results", type=Path, default=RESULTS_DIR, help=f"kept results (default {RESULTS_DIR})")
    args = parser.parse_args(argv)
    root = paths.repo_root()
    if args.action == "grade":
        grade(root, args.results, args.summary, args.device, args.timeout)
        return 0
    ok, why = points(root, args.results, get_phase(args.phase))
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
