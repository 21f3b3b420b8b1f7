"""`grader grade-all --jobs N` on the emulator: a class of identical submissions (the reference solution
of a phase), graded with 1 job and with 2, each submission in its own sandbox.

    python benchmarks/grade_all_jobs.py --phase phase3b --submissions 50 --jobs 1 2

writes benchmarks/results/grade_all_jobs-<machine>.json: the machine, its cores, the load average before
and after each run (other work on the machine slows grading), the wall time of each run and each
submission's own grading time, and how many passed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_slug(cores: int) -> str:
    name = re.sub(r"\(.*?\)|@.*|processor|\d+-core", "", cpu_name(), flags=re.I)
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w][:3]
    return "-".join([*words, f"{cores}-cores"])


def run(phase: str, n: int, jobs: int, timeout: float) -> dict:
    sys.path.insert(0, str(REPO))
    from grader.phases import get_phase

    lab = get_phase(phase).lab
    with tempfile.TemporaryDirectory(prefix="grade-all-bench-") as tmp:
        subs = Path(tmp) / "submissions"
        for i in range(n):
            (subs / f"learner{i:03d}").mkdir(parents=True)
            shutil.copy(REPO / "solutions" / f"{lab}.ipynb", subs / f"learner{i:03d}" / f"{lab}.ipynb")
        out = Path(tmp) / "grades.csv"
        load_before = os.getloadavg()
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "grader", "grade-all", str(subs), "--phase", phase,
                               "--csv", str(out), "--device", "emu", "--timeout", str(timeout), "--jobs", str(jobs)],
                              cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"grade-all failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        rows = list(csv.DictReader(out.open()))
    return {"jobs": jobs, "submissions": n, "wall_seconds": round(wall, 1),
            "seconds_per_submission": round(wall / n, 1),
            "grading_seconds": [float(r["grading_seconds"]) for r in rows],
            "passed": sum(r["passed"] == "True" for r in rows),
            "failed_checks": sorted({r["failed_checks"] for r in rows if r["failed_checks"]}),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", default="phase3b")
    parser.add_argument("--submissions", type=int, default=50)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--note", default="", help="why the run differs from the plan (fewer submissions...)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    runs = [run(args.phase, args.submissions, j, args.timeout) for j in args.jobs]
    base = runs[0]["wall_seconds"]
    for r in runs:
        r["speedup_vs_first"] = round(base / r["wall_seconds"], 2)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"benchmark": "grade_all_jobs", "phase": args.phase, "device": "emu", "machine": cpu_name(),
              "cores": cores, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "commit": commit,
              "timeout_s": args.timeout, "note": args.note, "runs": runs}
    out = REPO / "benchmarks" / "results" / f"grade_all_jobs-{machine_slug(cores)}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(out)
    print(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
