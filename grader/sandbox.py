"""Grading someone else's code in a sandbox (bubblewrap): `grader grade-all` runs each submission here.

On the emulator a learner's CUDA C is host code and the launcher modules are arbitrary Python, so a
submission could read other submissions, write outside its directory, edit the course (progress,
thresholds) or fork forever. Each submission is graded by `grader check` inside `bwrap` with:

- the whole file system read-only (the course, the venv, the compiler), the instructor's home and the
  submissions directory hidden behind empty tmpfs mounts;
- a private copy of this one submission and an empty workspace under its own tmpfs /tmp;
- no network (its own network namespace), its own PID, IPC and UTS namespaces, no capabilities;
- limits set with prlimit inside: processes, address space, CPU seconds, file size; a wall-clock
  timeout kills the whole sandbox (its PID namespace dies with it).

The grader reads the sandboxed `grader check --json` report from the sandbox's standard output and
writes the CSV itself, outside. As root, the sandbox runs as user nobody (65534): the process limit
does not apply to root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader import paths

NOBODY = 65534
INSIDE = Path("/tmp")            # the sandbox's own tmpfs
SUBMISSION = INSIDE / "submission"
WORKSPACE = INSIDE / "workspace"


class SandboxUnavailableError(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here."""


@dataclass(frozen=True)
class Limits:
    processes: int = 256               # per sandbox (as nobody), or added to the user's own count
    address_space: int = 16 << 30      # bytes of virtual memory per process
    cpu_seconds: int = 3600            # per process
    file_size: int = 1 << 30           # bytes per file written
    wall_seconds: float = 1800.0       # the whole grading of one submission


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def unavailable_message() -> str:
    return ("grader grade-all runs each submission inside a bubblewrap sandbox, and `bwrap` was not found. "
            "Install it (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`), or "
            "pass --unsandboxed to run every submission with your own permissions (only for code you trust).")


def _own_process_count(uid: int) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def _hidden_dirs(submissions: Path) -> list[Path]:
    """Directories the sandbox sees as empty: the submissions, the home directory, /root."""
    hidden = [submissions.resolve(), Path.home().resolve(), Path("/root")]
    return [h for h in dict.fromkeys(hidden) if h.is_dir() and h != Path("/")]


def _readonly_rebinds(hidden: list[Path]) -> list[Path]:
    """What grading needs that a hidden directory may hold: the course and the Python in use."""
    needed = [paths.repo_root().resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
              Path(sys.executable).resolve().parent.parent]
    if data := os.environ.get("MINITORCH_DATA_DIR"):   # MNIST, sales.tsv: read-only like the course
        needed.append(Path(data).resolve())
    return [n for n in dict.fromkeys(needed) if any(n.is_relative_to(h) for h in hidden)]


def command(inner: list[str], stage: Path, submissions: Path, limits: Limits) -> list[str]:
    """The bwrap command line that runs `inner` over the staged private copy `stage`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailableError(unavailable_message())
    root = os.geteuid() == 0
    cmd = [bwrap, "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = _hidden_dirs(submissions)
    for h in hidden:
        cmd += ["--tmpfs", str(h)]
    for n in _readonly_rebinds(hidden):
        top = next(h for h in hidden if n.is_relative_to(h))
        for parent in reversed(n.relative_to(top).parents[:-1]):   # bwrap would create them 0700
            cmd += ["--perms", "0755", "--dir", str(top / parent)]
        cmd += ["--ro-bind", str(n), str(n)]
    cmd += ["--tmpfs", str(INSIDE), "--bind", str(stage / "submission"), str(SUBMISSION),
            "--bind", str(stage / "workspace"), str(WORKSPACE),
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--chdir", str(SUBMISSION)]
    if root:   # no user namespace: drop to nobody inside, where the process limit applies
        cmd += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all"]
        nproc = limits.processes
    else:
        cmd[1:1] = ["--unshare-user"]
        nproc = _own_process_count(os.getuid()) + limits.processes
    cmd += ["prlimit", f"--nproc={nproc}", f"--as={limits.address_space}", f"--cpu={limits.cpu_seconds}",
            f"--fsize={limits.file_size}", "--core=0", "--"]
    return cmd + inner


def sandbox_env(env: dict[str, str]) -> dict[str, str]:
    """The grading environment, with every writable path inside the sandbox's own /tmp."""
    env = dict(env)
    root = str(paths.repo_root().resolve())
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(HOME=str(INSIDE / "home"), TMPDIR=str(INSIDE), MINITORCH_EMU_CACHE=str(INSIDE / "emu-cache"),
               GRADER_PROGRESS=str(INSIDE / "progress.json"), GRADER_SKIP_GATES="1",
               JUPYTER_RUNTIME_DIR=str(INSIDE / "jupyter-runtime"), MPLCONFIGDIR=str(INSIDE / "mpl"),
               XDG_CACHE_HOME=str(INSIDE / "cache"))
    for name in ("MINITORCH_WORKSPACE", "GRADER_THRESHOLDS", "GRADER_ROOT"):
        env.pop(name, None)
    return env


@dataclass
class SandboxResult:
    report: dict | None      # `grader check --json` as parsed, or None
    output: str              # what the sandbox printed (for a row's failure reason)
    returncode: int | None   # None: killed after the wall-clock limit


def grade_in_sandbox(submission_dir: Path, notebook: Path, submissions: Path, grade_args: list[str],
                     limits: Limits | None = None) -> SandboxResult:
    """Copy the submission into a fresh stage, run `grader check` over it in the sandbox, parse its report."""
    with tempfile.TemporaryDirectory(prefix="grader-sandbox-") as tmp:
        stage = Path(tmp)
        shutil.copytree(submission_dir, stage / "submission", symlinks=False,
                        ignore_dangling_symlinks=True)
        (stage / "workspace").mkdir()
        if os.geteuid() == 0:
            for p in [stage, *stage.rglob("*")]:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
        inner = [sys.executable, "-m", "grader", "check", *grade_args, "--notebook",
                 str(SUBMISSION / notebook.relative_to(submission_dir)), "--workspace", str(WORKSPACE),
                 "--no-record", "--json"]
        limits = limits or Limits()
        cmd = command(inner, stage, submissions, limits)
        env = sandbox_env(os.environ.copy())
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                                  stdin=subprocess.DEVNULL, timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return SandboxResult(None, out, None)
        return SandboxResult(_last_json(proc.stdout), proc.stdout + proc.stderr, proc.returncode)


def _last_json(text: str) -> dict | None:
    """The JSON report `grader check --json` prints last (an indented object)."""
    start = text.rfind("\n{")
    start = 0 if text.startswith("{") and start < 0 else start + 1
    try:
        data = json.loads(text[start:])
    except (json.JSONDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_works() -> str | None:
    """None if a sandbox can start here, else why not."""
    if bwrap_path() is None:
        return unavailable_message()
    with tempfile.TemporaryDirectory(prefix="grader-sandbox-probe-") as tmp:
        stage = Path(tmp)
        (stage / "submission").mkdir()
        (stage / "workspace").mkdir()
        if os.geteuid() == 0:
            for p in [stage, *stage.iterdir()]:
                os.chown(p, NOBODY, NOBODY)
        proc = subprocess.run(command(["true"], stage, stage / "submission", Limits()), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=60)
    if proc.returncode != 0:
        return f"bwrap cannot create a sandbox here: {proc.stderr.strip() or proc.stdout.strip()}"
    return None
