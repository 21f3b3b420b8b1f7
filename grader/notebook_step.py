"""Step 1 of `grader check`: execute the lab notebook with nbval, on a copy.

The learner's `%%kernel` / `%%module` cells write their files into the workspace; each code cell is
one check. nbval runs lax (only cells marked NBVAL_CHECK_OUTPUT compare outputs), with a cell
timeout and grader/sanitize.cfg.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from grader import paths
from grader.options import CheckOptions
from grader.report import CRASH, FAIL, PASS, TIMEOUT, CheckResult
from grader.subprocesses import exit_description, last_launch, pytest_command, read_events, run_isolated, tail


def _cell_headings(notebook: Path) -> list[str]:
    """Heading (last markdown title above) of each code cell, in nbval's numbering."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    heading, out = "", []
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        if cell.get("cell_type") == "markdown":
            for line in src.splitlines():
                if m := re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*$", line):
                    heading = m.group(1)  # the last one is closest to the code below
        elif cell.get("cell_type") == "code":
            out.append(heading)
    return out


def _notebook_hint(reason: str) -> str:
    if "NotImplementedError" in reason or "MINITORCH_TODO" in reason:
        return "this cell still has a TODO: write the missing code, then run the cell in the lab"
    if "CompileError" in reason:
        return "fix the compile error at the file:line shown"
    if "PhaseLocked" in reason:
        return "pass the previous phase first (command in the message)"
    if "Timeout" in reason:
        return "the cell never finished: a kernel loop that never ends?"
    return "run this cell in the lab and read its error"


def run_notebook_step(notebook: Path, env: dict[str, str], work: Path, opts: CheckOptions) -> list[CheckResult]:
    run_dir = work / "notebook"
    run_dir.mkdir()
    copy = run_dir / notebook.name  # nbval runs on a copy: the learner's notebook is never touched
    shutil.copy2(notebook, copy)
    results_file = work / "notebook-results.jsonl"
    cell_timeout = max(1, int(opts.timeout_s))
    cmd = pytest_command(results_file) + [
        "--rootdir", str(run_dir), "--nbval-lax", "--nbval-current-env",
        f"--nbval-cell-timeout={cell_timeout}", "--nbval-sanitize-with", str(paths.SANITIZE_CFG), str(copy)]
    headings = _cell_headings(notebook)
    step_timeout = opts.step_timeout_s or (60 + cell_timeout * max(4, len(headings)))
    rc, output = run_isolated(cmd, env=env, cwd=run_dir, timeout_s=step_timeout)
    events = read_events(results_file)

    def cell_name(nodeid: str) -> str:
        m = re.search(r"Cell (\d+)", nodeid)
        n = int(m.group(1)) if m else -1
        title = headings[n] if 0 <= n < len(headings) else ""
        return f"lab cell {n}" + (f" ({title})" if title else "")

    checks: list[CheckResult] = []
    finished = set()
    passed_cells = skipped_cells = 0
    for ev in events:
        if ev["event"] != "result":
            continue
        finished.add(ev["nodeid"])
        reason = ev.get("reason", "")
        if ev["outcome"] == "passed":
            passed_cells += 1
            continue
        if ev["outcome"] == "skipped":  # nbval skips the cells after a kernel it had to stop
            skipped_cells += 1
            continue
        result = TIMEOUT if "Timeout of" in reason else CRASH if "Kernel dead" in reason else FAIL
        checks.append(CheckResult(cell_name(ev["nodeid"]), result, "notebook", reason,
                                  hint=_notebook_hint(reason), nodeid=ev["nodeid"]))
    started = [ev["nodeid"] for ev in events if ev["event"] == "start"]
    unfinished = [n for n in started if n not in finished]
    if unfinished:
        result = TIMEOUT if rc is None else CRASH
        running = last_launch(work)
        running = f" (last kernel launched: {running})" if running else ""
        checks.append(CheckResult(
            cell_name(unfinished[-1]), result, "notebook",
            f"the notebook run was {exit_description(rc)} while this cell ran{running}\n{tail(output, 1500)}",
            hint=_notebook_hint("Timeout" if rc is None else ""), nodeid=unfinished[-1]))
    if not started:
        checks.append(CheckResult("lab notebook", CRASH, "notebook",
                                  f"the notebook could not be run ({exit_description(rc)}):\n{tail(output)}",
                                  hint="is the notebook valid JSON? is nbval installed?"))
    elif passed_cells:
        # The summary row is informational: PASS only when no cell failed (the failures are rows of their own).
        total = passed_cells + skipped_cells + len(checks)
        summary = f"lab notebook: {passed_cells} of {total} cells passed"
        if skipped_cells:
            summary += f" ({skipped_cells} not run after a failure)"
        checks.insert(0, CheckResult(summary, FAIL if checks else PASS, "notebook"))
    return checks
