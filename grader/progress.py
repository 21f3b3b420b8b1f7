"""The learner's progress file and the locked / unlocked / passed / stale logic.

File format (JSON, git-ignored, ``.grader/progress.json``)::

    {"version": 1, "phases": {"phase1": {"last_attempt": RECORD, "last_pass": RECORD}}}

RECORD = {"passed", "when" (UTC ISO), "device", "course_version", "perf": [...], "workspace",
"files": {path: sha256}, "notebook", "notebook_sha256", "seed"}. ``device`` is the backend's own
description ("cuda: NVIDIA H100 80GB HBM3", "emu: CUDA C emulator on the CPU"): a GPU pass and an
emulator pass read differently. ``course_version`` is the course that graded (see ``course_version``). ``last_pass`` is kept when a later attempt fails, so a
flaky run never takes a pass away; changing a graded file does (the phase becomes stale).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from grader import paths
from grader.phases import PHASES, Phase, get_phase

VERSION = 1
LOCKED, UNLOCKED, PASSED, STALE = "locked", "unlocked", "passed", "stale"
# One name for each fact about a grade, wherever it is shown: the rows of `grader status --json` and the
# columns of `grader grade-all`'s CSV both carry these, under these names.
GRADE_FIELDS = ("phase", "passed", "graded_at", "device", "course_version", "seed")


def course_version(root: Path | None = None) -> str:
    """Which course graded: "git <commit>" (HEAD of the course's checkout) when the course is a git
    checkout, else "minitorch-cuda <version>" (pyproject.toml's, the installed package's)."""
    root = Path(root or paths.repo_root())
    if (root / ".git").exists():  # a checkout (a worktree's .git is a file), not a copy inside another repo
        try:
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=10, stdin=subprocess.DEVNULL)
            commit = head.stdout.strip()
            if head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
                return f"git {commit}"
        except (OSError, subprocess.SubprocessError):  # no git, or it cannot read the checkout
            pass
    return f"minitorch-cuda {_package_version(root)}"


def _package_version(root: Path) -> str:
    try:
        with open(root / "pyproject.toml", "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    from importlib import metadata

    try:
        return metadata.version("minitorch-cuda")
    except metadata.PackageNotFoundError:
        return "unknown"


def file_sha256(path: Path) -> str | None:
    """sha256 of a file's bytes, None when it does not exist."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def notebook_code_sha256(path: Path) -> str | None:
    """sha256 of a notebook's code cell sources only.

    Outputs, execution counts and metadata change every time Jupyter saves the notebook;
    hashing them would make a pass stale just by re-running the lab.
    """
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    digest = hashlib.sha256()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            digest.update(("".join(source) if isinstance(source, list) else source).encode())
            digest.update(b"\0")
    return digest.hexdigest()


def load(path: Path | None = None) -> dict[str, Any]:
    path = path or paths.progress_file()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": VERSION, "phases": {}}
    except json.JSONDecodeError as err:
        raise RuntimeError(f"progress file {path} is not valid JSON ({err}); fix or delete it") from err
    data.setdefault("phases", {})
    return data


def save(data: dict[str, Any], path: Path | None = None) -> None:
    """Atomic write (a crash mid-write must not lose the learner's progress)."""
    path = Path(path or paths.progress_file())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def make_record(
    phase: Phase,
    *,
    passed: bool,
    device: str,
    workspace: Path,
    notebook: Path | None,
    perf: list[dict[str, Any]] | None = None,
    seed: int | None = None,
    when: _dt.datetime | None = None,
    course: str | None = None,
) -> dict[str, Any]:
    workspace = Path(workspace).resolve()
    when = when or _dt.datetime.now(_dt.UTC)
    return {
        "passed": passed,
        "when": when.isoformat(timespec="seconds"),
        "device": device,
        "course_version": course or course_version(),
        "perf": perf or [],
        "seed": seed,
        "workspace": str(workspace),
        "files": {name: file_sha256(workspace / name) for name in phase.learner_files},
        "notebook": str(Path(notebook).resolve()) if notebook else None,
        "notebook_sha256": notebook_code_sha256(notebook) if notebook else None,
    }


def record(phase: Phase, rec: dict[str, Any], path: Path | None = None) -> None:
    data = load(path)
    entry = data["phases"].setdefault(phase.name, {})
    entry["last_attempt"] = rec
    if rec["passed"]:
        entry["last_pass"] = rec
    save(data, path)


def changed_since_pass(rec: dict[str, Any]) -> list[str]:
    """Graded files whose content differs from what was graded (missing files count as changed)."""
    workspace = Path(rec["workspace"])
    changed = [name for name, digest in rec.get("files", {}).items()
               if file_sha256(workspace / name) != digest]
    if rec.get("notebook") and rec.get("notebook_sha256"):
        if notebook_code_sha256(Path(rec["notebook"])) != rec["notebook_sha256"]:
            changed.append(rec["notebook"])
    return changed


def phase_state(name: str, data: dict[str, Any] | None = None) -> str:
    phase = get_phase(name)
    data = load() if data is None else data
    last_pass = data["phases"].get(phase.name, {}).get("last_pass")
    if last_pass:
        return STALE if changed_since_pass(last_pass) else PASSED
    if first_unpassed_before(phase.name, data) is None:
        return UNLOCKED
    return LOCKED


def first_unpassed_before(name: str, data: dict[str, Any] | None = None) -> str | None:
    """The first phase before ``name`` that has not passed (or went stale), or None when all have:
    a phase unlocks only when every phase before it has passed, not only the one just before it."""
    data = load() if data is None else data
    for earlier in PHASES:
        if earlier == get_phase(name).name:
            return None
        if phase_state(earlier, data) != PASSED:
            return earlier
    return None


def deliverable_rows(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per deliverable: unlocked once the phase that unlocks it has passed (and is not stale)."""
    from grader.phases import DELIVERABLES

    data = load() if data is None else data
    return [{"deliverable": d.name, "title": d.title, "unlocked_by": d.unlocked_by,
             "state": UNLOCKED if phase_state(d.unlocked_by, data) == PASSED
             and first_unpassed_before(d.unlocked_by, data) is None else LOCKED}
            for d in DELIVERABLES.values()]


def status_rows(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per phase, for `grader status`."""
    data = load() if data is None else data
    rows = []
    for phase in PHASES.values():
        entry = data["phases"].get(phase.name, {})
        last_pass = entry.get("last_pass")
        state = phase_state(phase.name, data)
        notes = []
        if state == STALE:
            notes.append("changed since the pass: " + ", ".join(Path(p).name for p in changed_since_pass(last_pass)))
        elif state == LOCKED:
            notes.append(f"pass {first_unpassed_before(phase.name, data)} first")
        if not phase.published:
            notes.append("lab not published yet")
        note = "; ".join(notes)
        rows.append({
            "phase": phase.name,
            "title": phase.title,
            "state": state,
            "passed": state == PASSED,
            # the pass shown (kept through later failed attempts), under the names grade-all's CSV uses
            "graded_at": last_pass["when"] if last_pass else None,
            "device": last_pass["device"] if last_pass else None,
            "course_version": last_pass.get("course_version") if last_pass else None,
            "seed": last_pass.get("seed") if last_pass else None,
            "note": note,
        })
    return rows
