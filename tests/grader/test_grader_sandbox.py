"""`grader grade-all` grades other people's code in a bubblewrap sandbox.

A malicious submission tries, from its notebook and from a CUDA C "kernel" (host code on the
emulator), to read another submission, write outside its directory, edit the progress and
thresholds files, reach the network, fork forever and allocate without bound. Its attack cell raises
if any attempt succeeds, so the submission passing proves from inside that every attempt failed; the
test then checks from outside that nothing changed. An honest submission graded alongside passes.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import sandbox

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase1_memory.ipynb"
THRESHOLDS = REPO / "grader" / "thresholds.toml"

pytestmark = pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase1_memory.ipynb not written yet")
needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")

ATTACK = r'''
import os, socket, subprocess, sys, time
import numpy as np
from minitorch import emu

def must_fail(what, attempt):
    try:
        attempt()
    except (OSError, MemoryError) as err:
        print(f"{what}: blocked ({type(err).__name__})")
        return
    raise AssertionError(f"SANDBOX BREACH: {what} succeeded")

def read(path):
    with open(path) as f:
        f.read()

def write(path, text="pwned"):
    with open(path, "a") as f:
        f.write(text)

must_fail("read another submission", lambda: read(OTHER_NOTEBOOK))
must_fail("write outside the submission", lambda: write(OUTSIDE_FILE))
must_fail("write into the course", lambda: write(COURSE_FILE))
must_fail("edit the thresholds", lambda: write(THRESHOLDS_FILE, "\n[phase1]\nfill = 0.0\n"))
must_fail("edit the progress file", lambda: write(PROGRESS_FILE, "{}"))
must_fail("reach the network", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=5))
must_fail("allocate 64 GiB", lambda: bytearray(64 << 30))

BOMB = """
import os, signal, sys, time
n = 0
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
os.killpg(0, signal.SIGKILL)
"""
bomb = subprocess.run([sys.executable, "-c", BOMB], capture_output=True, text=True, timeout=120,
                      start_new_session=True)
forks = int(bomb.stdout.split()[0])
assert forks < 5000, f"SANDBOX BREACH: forked {forks} processes"
print(f"fork forever: stopped after {forks} processes")

EVIL = r"""
#include <cstdio>
#include <cstdlib>
extern "C" __global__ void evil(int* out) {
  out[0] = system("touch SYSTEM_FILE");
  FILE* f = fopen("FOPEN_FILE", "w");
  out[1] = f != NULL;
  if (f) { fputs("pwned", f); fclose(f); }
  FILE* g = fopen("OTHER_NOTEBOOK", "r");
  out[2] = g != NULL;
  if (g) fclose(g);
}
"""
for name in ("SYSTEM_FILE", "FOPEN_FILE", "OTHER_NOTEBOOK"):
    EVIL = EVIL.replace(name, globals()[name])
out = emu.zeros(3, np.int32)
emu.RawModule(code=EVIL).get_function("evil")((1,), (1,), (out,))
flags = emu.asnumpy(out)
assert flags[1] == 0 and flags[2] == 0, f"SANDBOX BREACH: the kernel's fopen succeeded {flags}"
print("kernel system()/fopen: blocked", flags)
'''


def _malicious_notebook(values: dict[str, object]) -> nbformat.NotebookNode:
    nb = nbformat.read(SOLUTION, as_version=4)
    header = "".join(f"{k} = {v!r}\n" for k, v in values.items())
    nb.cells.insert(1, nbformat.v4.new_code_cell(header + ATTACK))
    return nb


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_bwrap
def test_malicious_submission_is_contained_and_honest_one_passes(tmp_path):
    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)
    (subs / "mallory").mkdir()
    shutil.copy(SOLUTION, subs / "alice" / "phase1_memory.ipynb")
    outside = tmp_path / "outside"
    outside.mkdir()
    progress = tmp_path / "progress.json"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.1)
    values = {
        "OTHER_NOTEBOOK": str(subs / "alice" / "phase1_memory.ipynb"),
        "OUTSIDE_FILE": str(outside / "notebook.txt"),
        "COURSE_FILE": str(REPO / "pwned.txt"),
        "THRESHOLDS_FILE": str(THRESHOLDS),
        "PROGRESS_FILE": str(progress),
        "PORT": listener.getsockname()[1],
        "SYSTEM_FILE": str(outside / "system.txt"),
        "FOPEN_FILE": str(outside / "fopen.txt"),
    }
    nbformat.write(_malicious_notebook(values), subs / "mallory" / "phase1_memory.ipynb")
    alice_before, thresholds_before = _sha(subs / "alice" / "phase1_memory.ipynb"), _sha(THRESHOLDS)
    out = tmp_path / "grades.csv"
    env = {**os.environ, "GRADER_PROGRESS": str(progress),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        proc = subprocess.run([sys.executable, "-m", "grader", "grade-all", str(subs), "--phase", "phase1",
                               "--csv", str(out), "--device", "emu", "--timeout", "120"],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=400)
        with pytest.raises(TimeoutError):   # nobody connected from inside
            listener.accept()
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert rows["alice"]["passed"] == "True", rows["alice"]
    # The attack cell raises on any success: mallory passing means every attempt failed inside.
    assert rows["mallory"]["passed"] == "True", rows["mallory"]
    # And from outside: nothing was written, nothing changed.
    assert list(outside.iterdir()) == []
    assert not (REPO / "pwned.txt").exists()
    assert not progress.exists()
    assert _sha(THRESHOLDS) == thresholds_before
    assert _sha(subs / "alice" / "phase1_memory.ipynb") == alice_before


@needs_bwrap
def test_breach_is_detected_without_the_sandbox(tmp_path):
    """The attack cell is not a test that cannot fail: unsandboxed, mallory's first attempt succeeds."""
    subs = tmp_path / "submissions"
    (subs / "mallory").mkdir(parents=True)
    (subs / "alice").mkdir()
    (subs / "alice" / "notes.txt").write_text("alice's work")
    values = {"OTHER_NOTEBOOK": str(subs / "alice" / "notes.txt")}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "".join(f"{k} = {v!r}\n" for k, v in values.items()) + ATTACK.split("must_fail(\"write outside")[0])])
    code = nb.cells[0].source
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0 and "SANDBOX BREACH: read another submission succeeded" in proc.stderr


def test_grade_all_refuses_without_bwrap(tmp_path, monkeypatch):
    from grader import cli

    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    code = cli.main(["grade-all", str(subs), "--phase", "phase1", "--csv", str(tmp_path / "g.csv")])
    assert code == cli.EXIT_CANNOT_GRADE and not (tmp_path / "g.csv").exists()


def _mounts(cmd: list[str]) -> list[tuple[str, str]]:
    """(option, target) of every mount in a bwrap command line, in order."""
    out, i = [], 0
    while i < len(cmd):
        if cmd[i] in ("--tmpfs", "--dir"):
            out.append((cmd[i], cmd[i + 1]))
            i += 2
        elif cmd[i] in ("--ro-bind", "--bind"):
            out.append((cmd[i], cmd[i + 2]))
            i += 3
        else:
            i += 1
    return out


def test_submissions_inside_the_course_stay_hidden(monkeypatch):
    """An instructor who keeps the submissions in the course's clone: the course comes back read-only, the
    submissions under it must not (the last mount that covers them is an empty tmpfs)."""
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    submissions = REPO / "submissions"
    monkeypatch.setattr(sandbox, "_hidden_dirs", lambda _: [submissions, REPO.parent])
    cmd = sandbox.command(["true"], Path("/nonexistent-stage"), submissions, sandbox.Limits())
    covering = [(option, target) for option, target in _mounts(cmd)
                if submissions.is_relative_to(Path(target)) and option != "--dir"]
    assert ("--ro-bind", str(REPO.resolve())) in covering, covering  # the course is visible
    assert covering[-1] == ("--tmpfs", str(submissions)), covering  # and its submissions are not


@needs_bwrap
def test_a_submission_cannot_read_one_kept_inside_the_course(tmp_path, monkeypatch):
    """The same, run: the course's clone in the (hidden) home directory, the submissions inside the clone; from
    inside the sandbox the course is there and the other submission is not."""
    monkeypatch.setenv("HOME", str(REPO.parent))  # the course's clone in the home directory
    submissions = Path(REPO / f".sandbox-test-{os.getpid()}")
    submissions.mkdir()
    try:
        (submissions / "other.ipynb").write_text("secret")
        stage = tmp_path / "stage"
        for sub in ("submission", "workspace"):
            (stage / sub).mkdir(parents=True)
        inner = [sys.executable, "-c", f"import os; print(os.path.exists({str(submissions / 'other.ipynb')!r}), "
                                       f"os.path.exists({str(REPO / 'grader' / 'thresholds.toml')!r}))"]
        cmd = sandbox.command(inner, stage, submissions, sandbox.Limits())
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=sandbox.sandbox_env(os.environ))
        assert out.stdout.split() == ["False", "True"], (out.stdout, out.stderr)
    finally:
        shutil.rmtree(submissions)
