"""Gradescope autograder: `grader gradescope <phase>` builds the zip an instructor uploads.

Gradescope runs each submission in its own container (Ubuntu): it unpacks the zip into
/autograder/source, runs `setup.sh` once when it builds the image, then `/autograder/run_autograder`
for every submission, whose files are in /autograder/submission; the grade is read from
/autograder/results/results.json (Gradescope's "Autograder Specifications": a top-level score and
output, and a list of tests, each with score, max_score, status, name, output and visibility).

The zip holds its own copy of the course (the grader, the framework, its requirements), the reference
files of the earlier phases (a phase is graded on its own, as `grade-all` grades it) and no solution
of the phase itself. `run_autograder` grades the submission's `<lab>.ipynb` on the emulator
(`--device emu`: Gradescope has no GPU), gives each deciding check an equal share of the points, and
re-evaluates the phase's deliverable from the files it saved.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from grader import hosted, paths, progress
from grader.phases import Phase, get_phase
from grader.report import render_report
from grader.runner import DEFAULT_TIMEOUT_S, write_solution_files

CONFIG = "autograder.json"
EARLIER = "earlier-phases"     # the reference files of the earlier phases, inside source/
COURSE_DIRS = ("grader", "minitorch", "data")
COURSE_FILES = ("pyproject.toml", "requirements.txt", "README.md")
# requirements.txt pins the book and the editor too; the container needs only the grading stack.
NOT_FOR_GRADING = ("jupyter-book", "sphinx", "myst-", "sphinx-", "jupyter-cache", "ruff", "jupyterlab", "jupytext")
VISIBILITY = "visible"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The emulator compiles the learners' CUDA C with the host C++ compiler.
apt-get install -y -qq g++ python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
/autograder/venv/bin/python -m pip install --quiet -r /autograder/source/requirements-grading.txt
/autograder/venv/bin/python -m pip install --quiet --no-deps -e /autograder/source
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes /autograder/results/results.json.
# AUTOGRADER_ROOT and GRADER_PYTHON exist for testing the zip outside Gradescope.
set -uo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
cd "$root/source"
exec "${GRADER_PYTHON:-/autograder/venv/bin/python}" -m grader.gradescope run --root "$root"
"""


def _course_files(root: Path) -> list[Path]:
    """The course files the container needs, relative to the course root: git's tracked files when the
    course is a checkout (nothing generated, nothing of the learner's), else the directories walked."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *COURSE_DIRS, *COURSE_FILES],
                                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=True)
        files = [Path(p) for p in listed.stdout.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = []
    if not files:
        files = [p.relative_to(root) for d in COURSE_DIRS for p in (root / d).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        files += [Path(f) for f in COURSE_FILES if (root / f).is_file()]
    csrc = Path("minitorch") / "csrc"
    return sorted(f for f in files if (root / f).is_file()
                  and (not f.is_relative_to(csrc) or f.name == "README.md"))


def grading_requirements(requirements: str) -> str:
    kept = [line for line in requirements.splitlines()
            if not line.strip().lower().startswith(NOT_FOR_GRADING)]
    return "\n".join(kept) + "\n"


def build(phase: Phase, out: Path, *, points: float = 100.0, timeout_s: float = DEFAULT_TIMEOUT_S,
          root: Path | None = None) -> Path:
    """Write the autograder zip for `phase` to `out`."""
    if not phase.published:
        raise ValueError(f"{phase.name}: the lab of this phase is not published yet; nothing to grade")
    if points <= 0:
        raise ValueError(f"--points must be positive, got {points}")
    root = Path(root or paths.repo_root()).resolve()
    config = {"phase": phase.name, "lab": phase.lab, "points": points, "timeout_s": timeout_s, "device": "emu",
              "course_version": progress.course_version(root)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grader-gradescope-") as tmp, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        earlier = Path(tmp) / EARLIER
        write_solution_files(earlier, phase, include_own=False)
        for rel in _course_files(root):
            zf.write(root / rel, rel.as_posix())
        for f in sorted(earlier.iterdir()):
            zf.write(f, f"{EARLIER}/{f.name}")
        zf.writestr("requirements-grading.txt", grading_requirements((root / "requirements.txt").read_text()))
        zf.writestr(CONFIG, json.dumps(config, indent=2) + "\n")
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16  # executable when unpacked
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, text)
    return out


# ---------------------------------------------------------------- inside the container


def find_notebook(submission: Path, lab: str) -> Path | None:
    """`<lab>.ipynb` wherever the learner put it (uploaded alone, or with the repository's labs/)."""
    direct = [submission / f"{lab}.ipynb", submission / "labs" / f"{lab}.ipynb"]
    found = [p for p in direct if p.is_file()] or sorted(submission.rglob(f"{lab}.ipynb"))
    return found[0] if found else None


def results(graded: hosted.Graded | None, points: float, output: str, execution_time: float) -> dict:
    """results.json in Gradescope's format; `graded` None: the submission could not be graded."""
    tests = []
    if graded is not None:
        for i, c in enumerate(hosted.scored_checks(graded, points), 1):
            tests.append({"name": c.name, "number": str(i), "score": round(c.score, 6),
                          "max_score": round(c.max_score, 6), "status": "passed" if c.passed else "failed",
                          "output": c.output, "tags": [c.step], "visibility": VISIBILITY})
    else:
        tests.append({"name": "grading", "number": "1", "score": 0.0, "max_score": points, "status": "failed",
                      "output": output, "tags": ["setup"], "visibility": VISIBILITY})
    score = round(sum(t["score"] for t in tests), 6)
    return {"score": score, "execution_time": int(round(execution_time)), "output": output,
            "output_format": "text", "visibility": VISIBILITY, "stdout_visibility": "hidden", "tests": tests}


def run(root: Path) -> dict:
    """Grade /autograder/submission (under `root`) and write results/results.json."""
    started = time.monotonic()
    source = root / "source"
    config = json.loads((source / CONFIG).read_text())
    phase, points = get_phase(config["phase"]), float(config["points"])
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    notebook = find_notebook(root / "submission", config["lab"])
    graded, output = None, ""
    if notebook is None:
        output = (f"{phase.name}: NOT GRADED: no {config['lab']}.ipynb in the submission. Upload the lab "
                  f"notebook itself ({config['lab']}.ipynb), or the repository with labs/{config['lab']}.ipynb.")
    else:
        shipped = source / EARLIER
        earlier = ({f.name: f.read_text(encoding="utf-8") for f in sorted(shipped.iterdir())}
                   if shipped.is_dir() else {})
        try:
            graded = hosted.grade_notebook(phase, notebook, earlier, device=config.get("device", "emu"),
                                           timeout_s=float(config.get("timeout_s", DEFAULT_TIMEOUT_S)))
            output = render_report(graded.report)
            if graded.deliverable is not None:
                output += f"\ndeliverable (re-evaluated by the grader): {graded.deliverable}"
        except Exception:  # noqa: BLE001 - Gradescope must get a results.json whatever happened
            output = f"{phase.name}: the grader failed (not the submission's fault):\n{traceback.format_exc()}"
    output += f"\n\ngraded by {config.get('course_version', 'unknown')} on the CUDA C emulator"
    data = results(graded, points, output, time.monotonic() - started)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out)
    print(output)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.gradescope")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="inside the container: grade the submission, write results.json")
    r.add_argument("--root", type=Path, default=Path("/autograder"))
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.root)
    return 0


def unpack(zip_path: Path, root: Path) -> None:
    """Lay the zip out under `root` as Gradescope does under /autograder: source/ holds the zip's files,
    run_autograder sits beside it, submission/ and results/ are empty (to try an autograder locally)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if mode & 0o111:
                os.chmod(root / "source" / info.filename, mode & 0o777)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir(exist_ok=True)
    (root / "results").mkdir(exist_ok=True)


if __name__ == "__main__":
    sys.exit(main())
