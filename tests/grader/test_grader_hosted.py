"""Grading on the schools' engines: GitHub Classroom's workflow and Gradescope's autograder zip.

Both grade Phase 1 on the emulator for real, once with the reference solution (it passes) and once with
a copy kernel that doubles what it copies (it fails), in the shape each engine gives them: a clone of a
template repository for Classroom, an /autograder tree for Gradescope.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from grader import gradescope
from grader.phases import PHASES

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase1_memory.ipynb"
WORKFLOW = REPO / "classroom" / "template" / ".github" / "workflows" / "classroom.yml"
PUBLISHED = [p for p in PHASES.values() if p.published]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase1_memory.ipynb not written yet")]

# Gradescope's "Autograder Specifications" (results.json), the parts this autograder writes.
VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
RESULTS_SCHEMA = {
    "type": "object",
    "required": ["score", "tests"],
    "properties": {
        "score": {"type": "number", "minimum": 0},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "tests": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["name", "score", "max_score", "status", "output", "visibility"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "number": {"type": "string"},
                "score": {"type": "number", "minimum": 0},
                "max_score": {"type": "number", "minimum": 0},
                "status": {"enum": ["passed", "failed"]},
                "output": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "visibility": VISIBILITY,
            },
            "additionalProperties": False,
        }},
    },
}


def _notebook(dest: Path, broken: bool) -> Path:
    """The Phase 1 reference notebook, or the same with a copy kernel that writes 2 * src[i]."""
    text = SOLUTION.read_text()
    if broken:
        assert text.count("dst[i] = src[i];") == 1
        text = text.replace("dst[i] = src[i];", "dst[i] = 2.0f * src[i];")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh machine: nothing points at this checkout; `python` is this Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GRADER_ROOT", "MINITORCH_WORKSPACE", "GRADER_PROGRESS", "GRADER_SKIP_GATES")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MINITORCH_EMU_WORKERS", "1")
    return {**env, **extra}


# ---------------------------------------------------------------- Gradescope


def _autograde(zip_path: Path, root: Path, notebook_broken: bool) -> dict:
    gradescope.unpack(zip_path, root)
    _notebook(root / "submission" / "phase1_memory.ipynb", notebook_broken)
    proc = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, timeout=1200,
                          env=_clean_env(AUTOGRADER_ROOT=str(root), GRADER_PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(data, RESULTS_SCHEMA)
    return data


def test_gradescope_zip_grades_a_good_and_a_bad_submission(tmp_path):
    zip_path = tmp_path / "autograder.zip"
    gradescope.build(PHASES["phase1"], zip_path, points=40)
    import zipfile

    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        setup = zf.read("setup.sh").decode()
        assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111
    assert {"setup.sh", "run_autograder", "autograder.json", "requirements-grading.txt",
            "grader/cli.py", "minitorch/emu/__init__.py"} <= names
    assert not any(n.startswith(("solutions/", "labs/", "tests/")) for n in names), "the zip ships no solutions"
    assert "apt-get install" in setup and "g++" in setup and "requirements-grading.txt" in setup

    good = _autograde(zip_path, tmp_path / "good", notebook_broken=False)
    assert good["score"] == pytest.approx(40)
    assert sum(t["max_score"] for t in good["tests"]) == pytest.approx(40)
    assert all(t["status"] == "passed" for t in good["tests"])
    assert "phase1: PASSED" in good["output"]

    bad = _autograde(zip_path, tmp_path / "bad", notebook_broken=True)
    assert 0 <= bad["score"] < 40
    assert sum(t["max_score"] for t in bad["tests"]) == pytest.approx(40)
    assert bad["score"] == pytest.approx(sum(t["score"] for t in bad["tests"]))
    failed = [t for t in bad["tests"] if t["status"] == "failed"]
    assert failed and all(t["score"] == 0 for t in failed)
    assert any("copy" in t["name"] for t in failed), [t["name"] for t in failed]
    assert "phase1: NOT PASSED" in bad["output"]


# ---------------------------------------------------------------- GitHub Classroom


def _steps() -> list[dict]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    return job["steps"]


def test_the_workflow_reports_every_phase_to_classroom():
    steps = _steps()
    graders = [s for s in steps if str(s.get("uses", "")).startswith("classroom-resources/autograding-command-grader")]
    assert [s["id"] for s in graders] == [p.name for p in PUBLISHED]
    assert all(s["with"]["command"] == f"python -m grader classroom points {s['id']}" for s in graders)
    (reporter,) = [s for s in steps
                   if str(s.get("uses", "")).startswith("classroom-resources/autograding-grading-reporter")]
    assert reporter["with"]["runners"].split(",") == [s["id"] for s in graders]
    for s in graders:  # the reporter reads each grader's result from <ID>_RESULTS
        assert reporter["env"][f"{s['id'].upper()}_RESULTS"].replace(" ", "") == f"${{{{steps.{s['id']}.outputs.result}}}}"
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0  # the template commit is needed to tell what changed
    assert steps.index(reporter) == len(steps) - 1


def _run_steps(clone: Path, summary: Path) -> dict[str, int]:
    """The workflow's own commands, in order, in the clone: its `run:` steps (but the installation, which
    needs the network: this machine's Python has the course's requirements) and its graders' commands."""
    env = _clean_env(GITHUB_STEP_SUMMARY=str(summary))
    codes: dict[str, int] = {}
    for step in _steps():
        if "run" in step and step["name"] != "Install the course":
            proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=clone, env=env, capture_output=True,
                                  text=True, timeout=1200)
            assert proc.returncode == 0, f"{step['name']}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        elif "command-grader" in str(step.get("uses", "")):
            proc = subprocess.run(["bash", "-c", step["with"]["command"]], cwd=clone, env=env, capture_output=True,
                                  text=True, timeout=60 * step["with"]["timeout"] + 60)
            codes[step["id"]] = proc.returncode
    return codes


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def test_classroom_workflow_grades_a_failing_then_a_passing_lab_in_a_fresh_clone(tmp_path):
    install = next(s for s in _steps() if s["name"] == "Install the course")["run"]
    assert "g++" in install and "-r requirements.txt" in install and "-e ." in install
    # The instructor's template repository: the course without its solutions, and the workflow.
    template = tmp_path / "template"
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        if rel.startswith(("solutions/", "benchmarks/", "book/", ".ci/")) or not (REPO / rel).is_file():
            continue
        (template / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, template / rel)
    (template / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(WORKFLOW, template / ".github" / "workflows" / "classroom.yml")
    _git(tmp_path, "init", "-q", "-b", "main", str(template))
    _git(template, "add", "-A")
    _git(template, "commit", "-q", "-m", "template")
    learner = tmp_path / "learner"
    _git(tmp_path, "clone", "-q", str(template), str(learner))
    summary = tmp_path / "summary.md"

    _notebook(learner / "labs" / "phase1_memory.ipynb", broken=True)
    _git(learner, "commit", "-q", "-am", "phase 1, copy doubled")
    codes = _run_steps(learner, summary)
    assert codes == {p.name: 1 for p in PUBLISHED}
    text = summary.read_text()
    assert "## phase1: GPU memory: NOT PASSED" in text and "test_copy" in text
    assert "phase2 (First kernels and naive matmul): not attempted" in text

    _notebook(learner / "labs" / "phase1_memory.ipynb", broken=False)
    _git(learner, "commit", "-q", "-am", "phase 1 fixed")
    summary.unlink()
    codes = _run_steps(learner, summary)
    assert codes == {p.name: int(p.name != "phase1") for p in PUBLISHED}
    assert "## phase1: GPU memory: PASSED" in summary.read_text()

    # A push that changes no lab grades nothing again, and keeps the points (the kept result).
    (learner / "notes.md").write_text("my notes\n")
    _git(learner, "add", "notes.md")
    _git(learner, "commit", "-q", "-m", "notes")
    summary.unlink()
    codes = _run_steps(learner, summary)
    assert codes["phase1"] == 0
    assert "phase1 (GPU memory): PASSED, labs unchanged since" in summary.read_text()
