"""Running a grading step in its own process group, and reading what its plugin streamed out."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from grader import paths

OUTPUT_TAIL_CHARS = 4000
LAUNCH_TRACE = "launch-trace.txt"  # in the run directory; minitorch writes each launch there


def run_isolated(cmd: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run in a new process group; on timeout kill the whole group (Jupyter kernels included).

    Returns (exit code, or None when killed for the timeout; combined output).
    """
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, _ = proc.communicate()
        rc = None
    kill_group(proc.pid)  # leftover children (a kernel nbval failed to stop)
    return rc, out or ""


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        pass


RESULTS_KEY_ENV = "GRADER_RESULTS_KEY"  # hex key under which the graded tests sign each event (grader.pytest_plugin)


def event_mac(key: bytes, event: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in event.items() if k != "mac"}, sort_keys=True, default=str)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def read_events(path: Path, key: bytes | None = None) -> list[dict[str, Any]]:
    """The events of a results file; with `key`, only those whose MAC verifies under it (a line written by
    anyone but the graded tests' own process is dropped)."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if not isinstance(event, dict):
            continue
        if key is not None:
            mac = event.get("mac")
            if not (isinstance(mac, str) and hmac.compare_digest(mac, event_mac(key, event))):
                continue
            del event["mac"]
        events.append(event)
    return events


def tail(text: str, chars: int = OUTPUT_TAIL_CHARS) -> str:
    return text if len(text) <= chars else "...\n" + text[-chars:]


def exit_description(rc: int | None) -> str:
    if rc is None:
        return "killed after the step timeout"
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def pytest_command(results: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-c", str(paths.PYTEST_INI), "-p", "grader.pytest_plugin",
            f"--grader-results={results}", "-q", "-rN", "--color=no", "-p", "no:cacheprovider"]


def has_pytest_timeout() -> bool:
    try:
        import pytest_timeout  # noqa: F401
    except ImportError:
        return False
    return True


def last_launch(work: Path) -> str | None:
    """The last kernel minitorch launched (MINITORCH_LAUNCH_TRACE), e.g. 'memory.cu:fill grid=(3,) block=(64,)'."""
    try:
        text = (work / LAUNCH_TRACE).read_text().strip()
    except (FileNotFoundError, OSError):
        return None
    return text or None
