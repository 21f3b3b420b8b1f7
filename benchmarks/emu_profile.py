"""Where the emulator's MNIST training step spends its time: a ``perf record`` profile of the timed steps only.

Runs the Phase 6 deliverable's captured training step (as ``emu_speed.py``'s ``mnist`` row, one worker) under
``perf record``, enabled (``--control`` fifo) only around the timed replays, so that loading MNIST and compiling
are not in it. Writes ``benchmarks/results/emu_profile-<device>.json``: the share of the samples in the kernels'
own code (the compiled modules), in the emulator runtime (fiber switches, barriers, block set-up), in Python and
the rest, and the hottest symbols. Needs Linux ``perf`` (``perf_event_paranoid`` <= 2); sampling uses the CPU
clock, so it also works in virtual machines without hardware counters.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(steps: int, control: str) -> None:
    import numpy as np

    sys.path.insert(0, str(HERE))
    import emu_speed
    from common import solution_sources

    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-profile-")
    os.environ["MINITORCH_PHASE"] = "phase7"

    import minitorch
    from minitorch import backend, emu, graph
    from minitorch.kernels import write_source

    minitorch.set_device("emu")
    for lab in emu_speed.LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    train_step, feed, _ = emu_speed.mnist_step()

    def run(first: int, count: int) -> None:
        b = emu_speed.MNIST_BATCH
        for i in range(first, first + count):
            feed(np.arange(i * b, (i + 1) * b))
            step.replay()
        backend.synchronize()

    with emu.workers(1):
        step = graph.capture(train_step)
        run(0, 3)
        with open(control, "w") as ctl:
            ctl.write("enable\n")
            ctl.flush()
            cpu = time.process_time()
            run(3, steps)
            cpu = time.process_time() - cpu
            ctl.write("disable\n")
            ctl.flush()
    print(f"step_cpu_seconds={cpu / steps}")


def classify(dso: str) -> str:
    if dso.startswith("mod-"):
        return "kernel code (compiled modules)"
    if dso.startswith("libminitorch_emu_rt"):
        return "emulator runtime (fibers, barriers, block set-up)"
    if dso.startswith("ld-linux"):
        return "dynamic loader (TLS look-ups: the kernels' shared memory and threadIdx)"
    if "python" in dso or dso.endswith(".cpython-311-x86_64-linux-gnu.so") or "numpy" in dso:
        return "Python and NumPy"
    return "other (libc, the OS kernel)"


def after_division(data: str, symbol: str) -> float:
    """Percent of a kernel symbol's samples on the instruction right after an integer division (``div``,
    ``idiv``): a sample lands on the instruction after the one the CPU waits for, so this is about the share of
    the symbol's time spent waiting for divisions (tens of cycles each, against a few for a multiplication)."""
    out = subprocess.run(["perf", "annotate", "-i", data, "--stdio", "-s", symbol], capture_output=True,
                         text=True).stdout
    total = after = 0.0
    previous_divides = False
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)\s*:\s+[0-9a-f]+:\s+(\S+)", line)
        if not m:
            continue
        pct = float(m.group(1))
        total += pct
        after += pct if previous_divides else 0.0
        previous_divides = m.group(2) in ("div", "idiv", "divl", "idivl", "divq", "idivq")
    return round(100 * after / total, 1) if total else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=12, help="MNIST steps profiled (default 12)")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.steps, args.child)
        return 0
    sys.path.insert(0, str(HERE))
    import common
    from common import emulator_name, write_results

    with tempfile.TemporaryDirectory() as tmp:
        fifo, data = os.path.join(tmp, "ctl"), os.path.join(tmp, "perf.data")
        os.mkfifo(fifo)
        run = subprocess.run(["perf", "record", "-F", "999", "-D", "-1", "--control", f"fifo:{fifo}", "-o", data,
                              sys.executable, __file__, "--steps", str(args.steps), "--child", fifo],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError("perf record failed:\n" + run.stdout + run.stderr)
        step_cpu = float(re.search(r"step_cpu_seconds=([\d.e-]+)", run.stdout).group(1))
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio",
                                 "-g", "none", "--percent-limit", "0"], capture_output=True, text=True).stdout
        shares: dict[str, float] = {}
        symbols = []
        for line in report.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*\S)", line)
            if not m:
                continue
            pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
            part = classify(dso)
            shares[part] = round(shares.get(part, 0.0) + pct, 2)
            symbols.append({"symbol": sym, "where": part, "percent": pct})
        kernels = [s for s in symbols if s["where"].startswith("kernel code") and s["percent"] >= 0.5]
        for s in kernels:
            s["after_division_percent"] = after_division(data, s["symbol"])
    division = sum(s["percent"] * s["after_division_percent"] / 100 for s in kernels)
    row = {"kind": "mnist_profile", "workers": 1, "steps": args.steps, "step_cpu_seconds": step_cpu,
           "load_average_before": os.getloadavg()[0],
           "shares_percent": dict(sorted(shares.items(), key=lambda kv: -kv[1])),
           "kernel_samples_after_a_division_percent": round(division, 2),
           "kernels_after_a_division": [{"symbol": s["symbol"], "percent": s["percent"],
                                         "after_division_percent": s["after_division_percent"]} for s in kernels],
           "top_symbols": [{k: v for k, v in s.items() if k != "after_division_percent"} for s in symbols[:20]]}
    print(row["shares_percent"])
    if args.out:
        common.RESULTS = Path(args.out)
    write_results("emu_profile", emulator_name(), [row], cpu_count=os.cpu_count(),
                  notes=["perf record -F 999 (CPU clock) of the timed MNIST steps only; percent of the samples",
                         "kernel code: the compiled CUDA C of the reference kernels (their arithmetic, index "
                         "divisions, the alignment checks); emulator runtime: the fiber switches, barrier and warp "
                         "bookkeeping, block set-up",
                         "kernel_samples_after_a_division_percent: percent of all samples that are kernel code on "
                         "the instruction right after an integer division (perf annotate of each kernel symbol with "
                         "0.5% or more): an estimate of the time the kernels wait for their divisions"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
