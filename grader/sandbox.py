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

As root, the sandbox runs as user nobody (65534): the process limit does not apply to root.

What the grade rests on, and what a submission can reach (grader/README.md says the same in prose):

- The report. Inside, `grader check` (started with ``python -P -s``: the submission's directory is
  not on its import path, so a ``grader/`` package in a submission cannot replace the grader) makes
  itself non-dumpable first (``prctl(PR_SET_DUMPABLE, 0)``): another process of the same user can
  then neither open its file descriptors through /proc, nor read its memory, nor ptrace it. It
  receives a fresh random key on one inherited pipe and sends its JSON report, with an HMAC-SHA256
  under that key, on another; no other process of the sandbox holds either pipe. The grade is read
  from that channel only, never from the sandbox's output, and a report whose HMAC does not verify
  is refused. A submission can kill the grader (no report: not passed), not speak for it.
- The deliverable. The saved model files are re-evaluated by this process, outside the sandbox,
  after every process of the submission is gone (grader/deliverables.py): NumPy float64 on held-out
  data, the files read as untrusted input.
- The kernel checks of every phase, on the emulator and on a GPU (``tests_step.ISOLATED_PHASES``,
  ``CUDA_ISOLATED_PHASES``): the graded tests never import the learner's code; it runs in a learner process of its
  own (grader/learner_process.py; on a GPU it reaches the judge's arrays through CUDA IPC handles, during a
  request only), the performance checks are timed by the judge's clock, and the tests' results stream is signed
  under a key that process never sees. What those tests take from that process as its word (launch records, and what a helper that
  trains or replays a captured step there returns) they check against their own references.
- What still runs the learner's Python outside the learner process: the notebook step runs the learner's
  notebook (nbval, in a process of its own, before the graded tests), which decides the notebook's own check
  only. The sandbox contains what that code can do to the machine. ``GRADER_ISOLATION=0`` (removed in the
  sandbox) puts the learner's code back into the graded tests' process, where it could patch them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader import deliverables, paths

NOBODY = 65534
INSIDE = Path("/tmp")            # the sandbox's own tmpfs
SUBMISSION = INSIDE / "submission"
WORKSPACE = INSIDE / "workspace"
KEY_BYTES = 32
MAX_REPORT_BYTES = 32 << 20
PR_SET_DUMPABLE = 4


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
    """Directories the sandbox sees as empty: the submissions, the home directory, /root (real paths:
    every link that leads to one leads to the cover)."""
    hidden = [submissions.resolve(), Path.home().resolve(), Path("/root").resolve()]
    return [h for h in dict.fromkeys(hidden) if h.is_dir() and h != Path("/")]


def _needed_paths() -> list[Path]:
    """What grading reads, wherever it lives: the course, the Python in use and the data directory."""
    needed = [paths.repo_root().resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
              Path(sys.executable).resolve().parent.parent]
    if data := os.environ.get("MINITORCH_DATA_DIR"):   # MNIST, sales.tsv: read-only like the course
        needed.append(Path(data).resolve())
    return list(dict.fromkeys(needed))


@dataclass(frozen=True)
class Mount:
    option: str                 # "--tmpfs" (hidden), "--ro-bind" (visible, read-only), "--bind" (writable)
    target: Path
    source: Path | None = None  # for the binds

    @property
    def visible(self) -> bool:
        return self.option != "--tmpfs"


def plan_mounts(stage: Path, submissions: Path) -> list[Mount]:
    """The mounts over the read-only root, in the order bwrap applies them.

    What a path shows is decided by the nearest enclosing entry: the submissions, the home directory,
    /root and the sandbox's own /tmp are hidden; the course, the Python and the data directory are
    visible (read-only) wherever they live, even inside a hidden directory; the stage's two directories
    are the only writable places. A later mount covers everything mounted below its target, so the
    entries are mounted shallowest first: a deeper entry always wins over the ones that enclose it, and
    the submissions come back with nothing (a course under /tmp, under the home directory, or holding
    the submissions, included). The submissions win a tie, and nothing needed under the stage is
    mounted (the stage is this submission's own copy)."""
    hidden = _hidden_dirs(submissions)
    covers = list(dict.fromkeys([*hidden, INSIDE]))
    stage = stage.resolve()
    entries: dict[Path, Mount] = {h: Mount("--tmpfs", h) for h in covers}
    for n in _needed_paths():
        if not n.is_relative_to(stage) and n not in (submissions.resolve(), INSIDE):
            entries[n] = Mount("--ro-bind", n, n)
    for name in (SUBMISSION, WORKSPACE):
        entries[name] = Mount("--bind", name, stage / name.name)
    if submissions.resolve() in hidden:
        entries[submissions.resolve()] = Mount("--tmpfs", submissions.resolve())

    def enclosing(path: Path) -> Mount | None:
        return next((entries[a] for a in path.parents if a in entries), None)

    plan: list[Mount] = []
    for target in sorted(entries, key=lambda p: len(p.parts)):
        mount, outer = entries[target], enclosing(target)
        outer_visible = outer is None or outer.visible          # None: the root, bound read-only
        if mount.option != "--bind" and mount.visible == outer_visible:
            continue   # already shown (or hidden) as it should be
        plan.append(mount)
    return plan


def _mount_options(plan: list[Mount]) -> list[str]:
    out: list[str] = []
    for i, mount in enumerate(plan):
        if mount.option == "--tmpfs":
            out += ["--tmpfs", str(mount.target)]
            continue
        # a bind inside an empty tmpfs: its parents do not exist there (bwrap would create them 0700)
        outer = next((m for m in reversed(plan[:i]) if mount.target.is_relative_to(m.target)), None)
        if outer is not None and not outer.visible:
            for parent in reversed(mount.target.relative_to(outer.target).parents[:-1]):
                out += ["--perms", "0755", "--dir", str(outer.target / parent)]
        out += [mount.option, str(mount.source), str(mount.target)]
    return out


def command(inner: list[str], stage: Path, submissions: Path, limits: Limits) -> list[str]:
    """The bwrap command line that runs `inner` over the staged private copy `stage`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailableError(unavailable_message())
    root = os.geteuid() == 0
    cmd = [bwrap, "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cmd += _mount_options(plan_mounts(stage, submissions))
    cmd += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
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
    for name in ("MINITORCH_WORKSPACE", "GRADER_THRESHOLDS", "GRADER_ROOT", "GRADER_ISOLATION", "GRADER_TIMING_MEMORY"):
        env.pop(name, None)
    return env


# ---------------------------------------------------------------- the report channel


def protect_this_process() -> None:
    """Make this process non-dumpable: processes of the same user (the submission's) can no longer
    open its /proc/<pid>/fd, read its memory or environment, or ptrace it. Linux only."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(err)}")


def _mac(key: bytes, report: str) -> str:
    return hmac.new(key, report.encode(), hashlib.sha256).hexdigest()


class ReportChannel:
    """The sandboxed `grader check`'s end: `open` before any learner code runs, `send` at the end."""

    def __init__(self, report_fd: int, key: bytes) -> None:
        self._fd, self._key = report_fd, key

    @classmethod
    def open(cls, report_fd: int, key_fd: int) -> ReportChannel:
        protect_this_process()
        key = b""
        while len(key) < KEY_BYTES and (chunk := os.read(key_fd, KEY_BYTES - len(key))):
            key += chunk
        os.close(key_fd)
        if len(key) != KEY_BYTES:
            raise RuntimeError("grader check: the sandbox's report key did not arrive")
        os.set_inheritable(report_fd, False)  # never passed on to the notebook or the tests
        return cls(report_fd, key)

    def send(self, report: str) -> None:
        envelope = json.dumps({"report": report, "mac": _mac(self._key, report)}).encode()
        view = memoryview(envelope)
        while view:
            view = view[os.write(self._fd, view):]
        os.close(self._fd)


def open_envelope(data: bytes, key: bytes) -> dict | None:
    """The report sent through the channel, or None unless it is exactly one envelope whose HMAC
    verifies under `key`."""
    try:
        envelope = json.loads(data.decode())
        report, mac = envelope["report"], envelope["mac"]
        if not (isinstance(report, str) and isinstance(mac, str) and set(envelope) == {"report", "mac"}):
            return None
        if not hmac.compare_digest(mac, _mac(key, report)):
            return None
        parsed = json.loads(report)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _read_all(fd: int, limit: int, into: list[bytes]) -> None:
    total = 0
    while total <= limit and (chunk := os.read(fd, 1 << 16)):
        into.append(chunk)
        total += len(chunk)


# The sandboxes running now (grade-all grades several at once): an interrupted grade-all kills them, since
# they run in their own session and Ctrl-C does not reach them.
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()


def kill_running() -> int:
    """Kill every sandbox started by this process that is still running; returns how many."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        proc.kill()  # bwrap dies, and each sandbox's PID namespace with it
    return len(procs)


@dataclass
class SandboxResult:
    report: dict | None      # `grader check --json` as sent through the report channel, or None
    output: str              # what the sandbox printed (for a row's failure reason)
    returncode: int | None   # None: killed after the wall-clock limit
    rejected: bool = False   # something arrived on the report channel but did not verify
    deliverable: deliverables.Verdict | None = None  # re-evaluated outside, after the sandbox ended


def grade_in_sandbox(submission_dir: Path, notebook: Path, submissions: Path, grade_args: list[str],
                     limits: Limits | None = None,
                     prepare: Callable[[Path], None] | None = None,
                     extra_env: dict[str, str] | None = None) -> SandboxResult:
    """Copy the submission into a fresh stage, run `grader check` over it in the sandbox, read its
    authenticated report, then re-evaluate the phase's deliverable from the files it saved.
    `prepare(workspace)` fills the workspace first (the earlier phases' files); `extra_env` is added to
    the sandbox's environment (grade-all's GPU slot: CUDA_VISIBLE_DEVICES)."""
    with tempfile.TemporaryDirectory(prefix="grader-sandbox-") as tmp:
        stage = Path(tmp)
        shutil.copytree(submission_dir, stage / "submission", symlinks=False,
                        ignore_dangling_symlinks=True)
        (stage / "workspace").mkdir()
        if prepare is not None:
            prepare(stage / "workspace")
        if os.geteuid() == 0:
            for p in [stage, *stage.rglob("*")]:
                os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
        key = secrets.token_bytes(KEY_BYTES)
        key_r, key_w = os.pipe()
        report_r, report_w = os.pipe()
        os.write(key_w, key)
        os.close(key_w)
        # -P: the submission's directory (the working directory) is not put on sys.path, so its files
        # cannot stand in for the grader's modules; -s: no user site-packages.
        inner = [sys.executable, "-P", "-s", "-m", "grader", "check", *grade_args, "--notebook",
                 str(SUBMISSION / notebook.relative_to(submission_dir)), "--workspace", str(WORKSPACE),
                 "--no-record", "--json", "--report-fd", str(report_w), "--report-key-fd", str(key_r)]
        limits = limits or Limits()
        cmd = command(inner, stage, submissions, limits)
        env = sandbox_env({**os.environ, **(extra_env or {})})
        received: list[bytes] = []
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", stdin=subprocess.DEVNULL, pass_fds=(report_w, key_r))
        finally:
            os.close(report_w)  # only the sandboxed grader holds the write end now
            os.close(key_r)
        reader = threading.Thread(target=_read_all, args=(report_r, MAX_REPORT_BYTES, received), daemon=True)
        reader.start()
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        try:
            output, _ = proc.communicate(timeout=limits.wall_seconds)
            returncode: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()  # bwrap dies, and the sandbox's PID namespace with it
            output, _ = proc.communicate()
            returncode = None
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
        reader.join(timeout=60)
        os.close(report_r)
        data = b"".join(received)
        report = open_envelope(data, key) if data and len(data) <= MAX_REPORT_BYTES else None
        phase = grade_args[0]
        # The sandbox's processes are all gone: what the workspace holds now is final.
        verdict = deliverables.verify(phase, stage / "workspace") if phase in deliverables.OUTSIDE else None
        return SandboxResult(report, output or "", returncode, rejected=bool(data) and report is None,
                             deliverable=verdict)


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
