"""Grade the reference solutions of a phase on the GPU and keep the record (`make test-gpu`).

Runs `grader check <phase> --solutions --device cuda --require-perf --json`, prints the grader's
verdict, performance figures and notes (a deliverable's sampled text), and writes them to
benchmarks/results/grade-<phase>-<gpu>.json:
the calibration data behind grader/thresholds.toml. Exits non-zero when the phase does not pass.
"""

from __future__ import annotations

import json
import subprocess
import sys

from common import ROOT, gpu_name, write_results


def main(phase: str) -> int:
    cmd = [sys.executable, "-m", "grader", "check", phase, "--solutions", "--device", "cuda", "--require-perf",
           "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(proc.stdout, proc.stderr, sep="\n")
        return proc.returncode or 1
    perf = [dict(record, check=c["name"]) for c in report["checks"] for record in c.get("perf", [])]
    for c in report["checks"]:
        if c["result"] != "PASS" or c.get("perf"):  # INFO: a reported figure
            print(f"{c['result']:>12}  {c['name']}  {c.get('measured', '')}  {c.get('reason', '')[:300]}")
    for r in perf:
        if "ratio" in r:
            bar = "reported, no bar" if r.get("reported") else f"threshold {r['threshold']:.2f}"
            print(f"{r['name']:<28} {r['measured']:9.1f} {r['unit']} = {r['ratio']:.2f} x {r['reference_name']} "
                  f"({bar})")
        else:  # a figure with a bar of its own, e.g. a deliverable's loss (at most) or accuracy (at least)
            print(f"{r['name']:<28} {r['measured']:.4f} {r['unit']} ({r.get('direction', 'threshold')} "
                  f"{r['threshold']})")
    notes = {c["name"]: c["notes"] for c in report["checks"] if c.get("notes")}  # e.g. Phase 7's sampled text
    for name, said in notes.items():
        print(f"note ({name}): " + "\n".join(said))
    write_results(f"grade-{phase}", gpu_name(), perf, passed=report["passed"], seed=report["seed"],
                  checks={c["name"]: c["result"] for c in report["checks"]}, notes=notes)
    print(f"{phase}: {'PASSED' if report['passed'] else 'NOT PASSED'} on {report['device']}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "phase1"))
