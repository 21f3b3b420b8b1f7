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
import tempfile
from dataclasses import dataclass
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


def _mounts(cmd: list[str]) -> list[tuple[str, str | None, str]]:
    """(option, source, target) of every mount in a bwrap command line, in order."""
    out, i = [], 0
    while i < len(cmd):
        if cmd[i] in ("--tmpfs", "--dir"):
            out.append((cmd[i], None, cmd[i + 1]))
            i += 2
        elif cmd[i] in ("--ro-bind", "--bind"):
            out.append((cmd[i], cmd[i + 1], cmd[i + 2]))
            i += 3
        else:
            i += 1
    return out


def _seen_inside(cmd: list[str], path: Path) -> Path | None:
    """What `path` shows inside the sandbox, by bwrap's rule (a mount covers everything mounted below its
    target before it): the host file it shows, or None if an empty tmpfs hides it."""
    path = Path(os.path.realpath(path))   # the links live in visible places: they resolve the same inside
    shown: Path | None = path
    for option, source, target in _mounts(cmd):
        if option == "--dir" or not path.is_relative_to(target):
            continue
        shown = None if option == "--tmpfs" else Path(source) / path.relative_to(target)
    return shown


@dataclass
class Course:
    """A small copy of the course (what the sandbox must show) holding a submissions directory (what it
    must hide), reached through `path` (maybe a symbolic link)."""
    path: Path
    submissions: Path
    other: Path        # another learner's notebook
    thresholds: Path   # a file of the course
    home: Path | None  # the home directory to pretend, when the course lives in it


def _place_course(where: str, root: Path) -> Course:
    """Course copies where an instructor may keep one: under /tmp, in a home directory whose name has a
    space, and reached through a symbolic link; the submissions inside the course in each."""
    home = None
    if where == "tmp":
        path = root / "v3" / "main"
    elif where == "home with a space":
        home = root / "instructor home"
        path = home / "course clone"
    else:  # "symlink": the course, and the submissions with it, named through a link to its real place
        (root / "real").mkdir()
        (root / "link").symlink_to(root / "real", target_is_directory=True)
        path = root / "link" / "main"
    (path / "grader").mkdir(parents=True)
    (path / "minitorch").mkdir()
    shutil.copy(THRESHOLDS, path / "grader" / "thresholds.toml")
    submissions = path / "submissions"
    (submissions / "other").mkdir(parents=True)
    (submissions / "other" / "other.ipynb").write_text("secret")
    for d in [root, *root.rglob("*")]:   # the sandbox runs as nobody when the tests run as root
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)
    return Course(path, submissions, submissions / "other" / "other.ipynb", path / "grader" / "thresholds.toml",
                  home)


PLACES = {"tmp": "/tmp", "home with a space": "/var/tmp", "symlink": "/var/tmp"}


@pytest.fixture(params=list(PLACES))
def course(request, monkeypatch):
    """A copy of the course in each place, whatever directory this checkout was cloned into."""
    root = Path(tempfile.mkdtemp(prefix="grader-sandbox-course-", dir=PLACES[request.param]))
    try:
        placed = _place_course(request.param, root)
        monkeypatch.setenv("GRADER_ROOT", str(placed.path))
        if placed.home is not None:
            monkeypatch.setenv("HOME", str(placed.home))
        yield placed
    finally:
        shutil.rmtree(root)


def test_submissions_inside_the_course_stay_hidden(course, monkeypatch):
    """An instructor who keeps the submissions in the course's clone, wherever the clone is: the course comes
    back read-only, the submissions under it must not (the last mount covering them is an empty tmpfs)."""
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    cmd = sandbox.command(["true"], Path("/nonexistent-stage"), course.submissions, sandbox.Limits())
    assert _seen_inside(cmd, course.other) is None, _mounts(cmd)
    assert _seen_inside(cmd, course.submissions / "other") is None, _mounts(cmd)
    assert _seen_inside(cmd, course.thresholds) == course.thresholds.resolve(), _mounts(cmd)
    assert _seen_inside(cmd, Path(sys.executable)) is not None, _mounts(cmd)
    # the stage's two directories are the sandbox's own, whatever the course's place
    assert _seen_inside(cmd, sandbox.SUBMISSION / "x") == Path("/nonexistent-stage/submission/x")


def test_the_issue_mount_list_no_longer_reexposes_submissions(monkeypatch):
    """The reported mount list: the course under /tmp, /tmp's own tmpfs mounted after the submissions were
    covered, then the course bound again with them in it. The plan, whatever the order of its inputs, ends
    with the submissions hidden."""
    monkeypatch.setattr(sandbox, "_needed_paths", lambda: [Path("/tmp/v3/main")])
    monkeypatch.setattr(sandbox, "_hidden_dirs", lambda _: [Path("/tmp/v3/main/submissions"), Path("/root")])
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    cmd = sandbox.command(["true"], Path("/nonexistent-stage"), Path("/tmp/v3/main/submissions"), sandbox.Limits())
    assert _seen_inside(cmd, Path("/tmp/v3/main/submissions/other.ipynb")) is None, _mounts(cmd)
    assert _seen_inside(cmd, Path("/tmp/v3/main/grader/thresholds.toml")) is not None, _mounts(cmd)
    assert _seen_inside(cmd, Path("/tmp/elsewhere")) is None, _mounts(cmd)


def _look_inside(course: Course) -> list[str]:
    probe = ("import os, sys\n"
             "for p in sys.argv[1:]: print(os.path.exists(p), end=' ')\n"
             "try:\n    open(sys.argv[-1] + '.pwned', 'w')\nexcept OSError:\n    print('read-only')\n")
    return [sys.executable, "-c", probe, str(course.other), str(course.other.resolve()),
            str(course.submissions / "other"), str(course.thresholds)]


@needs_bwrap
def test_a_submission_cannot_read_one_kept_inside_the_course(course, tmp_path):
    """The same, run: from inside the sandbox the course is there (read-only) and the other submission is not,
    by its path or its real path, with the course under /tmp, in a home directory, or behind a link."""
    stage = tmp_path / "stage"
    for sub in ("submission", "workspace"):
        (stage / sub).mkdir(parents=True)
    cmd = sandbox.command(_look_inside(course), stage, course.submissions, sandbox.Limits())
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=sandbox.sandbox_env(os.environ))
    assert out.stdout.split() == ["False", "False", "False", "True", "read-only"], (out.stdout, out.stderr)
    assert not (course.path / "grader" / "thresholds.toml.pwned").exists()


@needs_bwrap
def test_a_submission_cannot_read_one_kept_inside_this_checkout(tmp_path, monkeypatch):
    """And in this checkout itself, wherever CI cloned it: the clone in the (hidden) home directory, the
    submissions inside the clone."""
    monkeypatch.setenv("HOME", str(REPO.parent))
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
