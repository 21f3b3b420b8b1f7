"""Progress file, `grader status`, `grader.require` and staleness."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import grader
from grader import progress
from grader.cli import main
from grader.phases import PHASES, get_phase


@pytest.fixture
def env(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    progress_file = tmp_path / ".grader" / "progress.json"
    monkeypatch.setenv("GRADER_PROGRESS", str(progress_file))
    monkeypatch.delenv("GRADER_SKIP_GATES", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "memory.cu").write_text("// kernels\n")
    (workspace / "memory.py").write_text("# launchers\n")
    return progress_file, workspace


def _pass_phase1(workspace: Path, passed: bool = True, notebook: Path | None = None) -> None:
    phase = get_phase("phase1")
    rec = progress.make_record(phase, passed=passed, device="emu", workspace=workspace, notebook=notebook,
                               perf=[{"name": "fill bandwidth", "ratio": 0.9}], seed=42)
    progress.record(phase, rec)


def test_registry_order_and_names():
    assert list(PHASES) == ["phase1", "phase2", "phase3a", "phase3b", "phase4", "phase5", "phase6", "phase7",
                            "phase8a", "phase8b"]
    assert get_phase("phase8a").requires == "phase7" and get_phase("phase8b").requires == "phase8a"
    assert get_phase("8a").name == "phase8a" and get_phase("phase8a").published
    assert get_phase("phase3b").requires == "phase3a" and get_phase("phase4").requires == "phase3b"
    assert get_phase("1").name == "phase1" and get_phase("3a").name == "phase3a"
    assert [p.name for p in PHASES.values() if p.published][:7] == ["phase1", "phase2", "phase3a", "phase3b",
                                                                     "phase4", "phase5", "phase6"]
    assert get_phase("phase5").test_files == ("test_phase5.py", "test_phase5_training.py")
    assert get_phase("phase1").test_files == ("test_phase1.py",)
    assert get_phase("phase8b").test_files == ("test_phase8b.py", "test_phase8b_capstone.py")
    assert get_phase("phase6").test_files[0] == "test_phase6_softmax.py"


def test_fresh_status_phase2_locked_until_phase1_passes(env, capsys):
    _, workspace = env
    assert progress.phase_state("phase1") == "unlocked"
    assert progress.phase_state("phase2") == "locked"
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    phase2_line = next(line for line in out.splitlines() if "phase2" in line)
    assert "LOCKED" in phase2_line and "pass phase1 first" in phase2_line
    _pass_phase1(workspace)
    assert progress.phase_state("phase1") == "passed"
    assert progress.phase_state("phase2") == "unlocked"
    assert progress.phase_state("phase3a") == "locked"
    main(["status"])
    out = capsys.readouterr().out
    assert "PASSED" in next(line for line in out.splitlines() if "phase1" in line)
    assert "UNLOCKED" in next(line for line in out.splitlines() if "phase2" in line)


def test_record_contents(env):
    progress_file, workspace = env
    _pass_phase1(workspace)
    rec = json.loads(progress_file.read_text())["phases"]["phase1"]["last_pass"]
    assert rec["passed"] and rec["device"] == "emu" and rec["seed"] == 42 and rec["perf"][0]["ratio"] == 0.9
    assert set(rec["files"]) == {"memory.cu", "memory.py"}
    assert all(len(h) == 64 for h in rec["files"].values())
    assert rec["when"].endswith("+00:00")


def test_require_raises_with_the_command_to_run(env):
    _, workspace = env
    grader.require("phase1")  # nothing before phase 1
    with pytest.raises(grader.PhaseLocked, match=r"Phase 2 .* is locked: Phase 1 \(GPU memory\) has not passed yet.*`grader check phase1`"):
        grader.require("phase2")
    _pass_phase1(workspace)
    grader.require("phase2")
    with pytest.raises(grader.PhaseLocked, match="grader check phase2"):
        grader.require("phase3a")


def test_changed_file_makes_the_pass_stale(env, capsys):
    _, workspace = env
    _pass_phase1(workspace)
    (workspace / "memory.cu").write_text("// kernels, changed\n")
    assert progress.phase_state("phase1") == "stale"
    assert progress.phase_state("phase2") == "locked"
    with pytest.raises(grader.PhaseLocked, match=r"passed, but memory.cu changed since.*`grader check phase1` again"):
        grader.require("phase2")
    main(["status"])
    line = next(line for line in capsys.readouterr().out.splitlines() if "phase1" in line)
    assert "STALE" in line and "memory.cu" in line
    (workspace / "memory.cu").write_text("// kernels\n")  # back to what was graded
    assert progress.phase_state("phase1") == "passed"


def test_deleted_file_is_stale(env):
    _, workspace = env
    _pass_phase1(workspace)
    (workspace / "memory.py").unlink()
    assert progress.phase_state("phase1") == "stale"


def test_notebook_outputs_do_not_make_a_pass_stale_but_code_does(env, tmp_path):
    _, workspace = env
    nb_path = tmp_path / "lab.ipynb"
    nb = {"cells": [{"cell_type": "code", "source": "x = 1", "outputs": [], "execution_count": None, "metadata": {}}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    nb_path.write_text(json.dumps(nb))
    _pass_phase1(workspace, notebook=nb_path)
    nb["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1"}]
    nb["cells"][0]["execution_count"] = 5
    nb_path.write_text(json.dumps(nb))
    assert progress.phase_state("phase1") == "passed"
    nb["cells"][0]["source"] = "x = 2"
    nb_path.write_text(json.dumps(nb))
    assert progress.phase_state("phase1") == "stale"


def test_a_failed_attempt_keeps_the_earlier_pass(env):
    progress_file, workspace = env
    _pass_phase1(workspace)
    _pass_phase1(workspace, passed=False)
    entry = json.loads(progress_file.read_text())["phases"]["phase1"]
    assert entry["last_attempt"]["passed"] is False and entry["last_pass"]["passed"] is True
    assert progress.phase_state("phase1") == "passed"


def test_skip_gates_escape_hatch(env, monkeypatch):
    monkeypatch.setenv("GRADER_SKIP_GATES", "1")
    with pytest.warns(UserWarning, match="GRADER_SKIP_GATES"):
        grader.require("phase5")


def test_unpublished_phase_says_so(env, capsys, monkeypatch):
    # every phase of the course is published: pretend the last one is not
    monkeypatch.setitem(PHASES, "phase8b", dataclasses.replace(PHASES["phase8b"], lab=None, tests=None))
    assert main(["check", "phase8b"]) == 2
    assert "not published yet" in capsys.readouterr().err
    assert main(["check", "phase9"]) == 2
    assert "unknown phase" in capsys.readouterr().err


def test_cpu_device_cannot_pass_a_cuda_c_phase(env, capsys):
    assert main(["check", "phase1", "--device", "cpu", "--no-record"]) == 1
    out = capsys.readouterr().out
    assert "need --device cuda" in out and "NOT PASSED" in out


def test_corrupt_progress_file_is_explained(env):
    progress_file, _ = env
    progress_file.parent.mkdir(parents=True)
    progress_file.write_text("{not json")
    with pytest.raises(RuntimeError, match="not valid JSON"):
        progress.load()


def test_cuda_without_a_gpu_fails_once_up_front(env, capsys):
    from minitorch.backend import cuda_available

    if cuda_available():
        pytest.skip("a GPU is usable here")
    assert main(["check", "phase1", "--device", "cuda", "--no-record"]) == 1
    out = capsys.readouterr().out
    assert "--device cuda:" in out and "grader check phase1 --device emu" in out


def test_deliverables_unlock_with_their_phase(env, capsys):
    """A deliverable opens with its phase: XOR (3b) after phase3a, sales (4) after phase3b,
    the MNIST CNN (6) after phase5, the Shakespeare GPT (7) after phase6."""
    progress_file, workspace = env
    with pytest.raises(grader.PhaseLocked, match=r"MNIST CNN deliverable is locked.*`grader check phase1`"):
        grader.require("mnist")
    _pass_phase1(workspace)
    with pytest.raises(grader.PhaseLocked, match=r"sales.tsv regression deliverable is locked.*`grader check phase2`"):
        grader.require("sales")
    # Fake passes of every phase up to phase5 (no learner files): mnist opens, shakespeare stays shut.
    data = {"phases": {f"phase{n}": {"last_pass": {"when": "2026-11-21T00:00:00+00:00", "device": "emu",
                                                   "workspace": str(progress_file.parent), "files": {},
                                                   "passed": True}}
                       for n in ("1", "2", "3a", "3b", "4", "5")}}
    progress_file.parent.mkdir(parents=True, exist_ok=True)
    progress_file.write_text(json.dumps(data))
    grader.require("xor")
    grader.require("sales")
    grader.require("mnist")
    with pytest.raises(grader.PhaseLocked, match=r"Tiny Shakespeare GPT deliverable is locked.*phase6"):
        grader.require("shakespeare")
    states = {d["deliverable"]: d["state"] for d in progress.deliverable_rows()}
    assert states == {"xor": "unlocked", "sales": "unlocked", "mnist": "unlocked", "shakespeare": "locked"}
    main(["status", "--json"])
    assert json.loads(capsys.readouterr().out)["deliverables"][3]["state"] == "locked"


def test_check_refuses_a_locked_phase_and_records_nothing(env, capsys):
    """`grader check phase4` with nothing passed (the Colab form, --no-notebook) names what to pass first."""
    progress_file, workspace = env
    assert main(["check", "phase4", "--no-notebook", "--workspace", str(workspace)]) == 2
    err = capsys.readouterr().err
    assert "Phase 4" in err and "is locked" in err and "`grader check phase1`" in err and "GRADER_SKIP_GATES" in err
    assert not progress_file.exists()
    assert progress.phase_state("phase4") == "locked" and progress.phase_state("phase5") == "locked"
    assert main(["check", "phase4", "--json", "--no-notebook"]) == 2
    assert "is locked" in json.loads(capsys.readouterr().out)["error"]


def test_every_earlier_phase_must_pass_not_only_the_one_before(env, capsys):
    """A pass of phase 4 recorded while phases 2-3b never passed unlocks nothing after it."""
    progress_file, workspace = env
    _pass_phase1(workspace)
    rec = {"when": "2026-11-21T00:00:00+00:00", "device": "emu", "workspace": str(workspace), "files": {},
           "passed": True}
    data = json.loads(progress_file.read_text())
    data["phases"]["phase4"] = {"last_pass": rec}
    progress_file.write_text(json.dumps(data))
    assert progress.phase_state("phase5") == "locked"
    with pytest.raises(grader.PhaseLocked, match=r"Phase 2 \(.*has not passed yet.*`grader check phase2`"):
        grader.require("phase5")
    with pytest.raises(grader.PhaseLocked, match="grader check phase2"):
        grader.require("sales")
    main(["status"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("phase5") or " phase5 " in line)
    assert "pass phase2 first" in line


# ---------------------------------------------------------------- one vocabulary; which course and device graded


def test_course_version_is_the_checkouts_commit_else_the_package_version(tmp_path):
    import subprocess

    copy = tmp_path / "copy"   # a course copied without its git history
    copy.mkdir()
    (copy / "pyproject.toml").write_text('[project]\nname = "minitorch-cuda"\nversion = "9.8.7"\n')
    assert progress.course_version(copy) == "minitorch-cuda 9.8.7"
    git = ["git", "-C", str(copy), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "pyproject.toml"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "course"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert progress.course_version(copy) == f"git {head}"
    inner = copy / "nested"    # a copy inside another repository is not that repository's commit
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nversion = "1.2.3"\n')
    assert progress.course_version(inner) == "minitorch-cuda 1.2.3"


def test_a_record_says_which_course_and_which_device_graded_it(env, capsys):
    progress_file, workspace = env
    phase = get_phase("phase1")
    progress.record(phase, progress.make_record(phase, passed=True, device="cuda: NVIDIA H100 80GB HBM3",
                                                workspace=workspace, notebook=None, seed=7))
    rec = json.loads(progress_file.read_text())["phases"]["phase1"]["last_pass"]
    assert rec["course_version"] == progress.course_version() and rec["course_version"].startswith(("git ",
                                                                                                    "minitorch-cuda "))
    assert main(["status", "--json"]) == 0
    [row] = [r for r in json.loads(capsys.readouterr().out)["phases"] if r["phase"] == "phase1"]
    assert row["device"] == "cuda: NVIDIA H100 80GB HBM3" and row["course_version"] == rec["course_version"]
    assert row["passed"] is True and row["graded_at"] == rec["when"] and row["seed"] == 7


def test_status_json_and_grade_all_csv_use_the_same_names(env, tmp_path, capsys):
    import csv

    _, workspace = env
    _pass_phase1(workspace)
    main(["status", "--json"])
    rows = json.loads(capsys.readouterr().out)["phases"]
    assert all(set(progress.GRADE_FIELDS) <= set(r) for r in rows), rows[0]
    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)   # no notebook: a row all the same, quickly
    out = tmp_path / "grades.csv"
    assert main(["grade-all", str(subs), "--phase", "phase1", "--csv", str(out), "--unsandboxed"]) == 0
    with out.open() as fh:
        reader = csv.DictReader(fh)
        [alice] = list(reader)
    header = reader.fieldnames
    shared = [name for name in header if name in rows[0]]
    assert shared == list(progress.GRADE_FIELDS), header   # every shared fact, under one name, in one order
    assert alice["phase"] == "phase1" and alice["passed"] == "False"
    assert alice["course_version"] == progress.course_version() and alice["graded_at"].endswith("+00:00")
