"""Kernels split at their barriers (minitorch/emu/split.py) against fibers, alternately, on this machine.

Runs, ``--runs`` times each and alternating (other programs share the machine), with ``MINITORCH_EMU_SPLIT=1``
and ``=0``: ``emu_kernel_profile.py`` (the Phase 6 MNIST step on one worker, specialised: each kernel's CPU time,
best of ``--rounds`` replays, and the step's CPU time) and ``emu_speed.py --only kernels`` (the 16x16-tiled SGEMM
of 512^3, two barriers a tile, and the launch and elementwise rows) and ``emu_speed.py --only gpt`` (the Phase 7
GPT step, lab and reduced configurations). Each run is a fresh process with the
compile cache of this machine. Writes ``benchmarks/results/emu_split_ab-<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_profile(split: bool, rounds: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "profile.json"
        env = {**os.environ, "MINITORCH_EMU_SPLIT": "1" if split else "0"}
        subprocess.run([sys.executable, str(HERE / "emu_kernel_profile.py"), "--rounds", str(rounds), "--steps",
                        str(steps), "--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
        doc = json.loads(out.read_text())
    return {"kernels": {r["kernel"]: round(r["cpu_seconds"], 5) for r in doc["kernels"]},
            "split_kernels": sorted(r["kernel"] for r in doc["kernels"] if r["split"]),
            "kernels_cpu_seconds_sum": round(doc["kernels_cpu_seconds_sum"], 5),
            "step_cpu_seconds": round(doc["step_cpu_seconds"], 5)}


def run_speed(split: bool, *args: str) -> list[dict]:
    """The rows of one emu_speed.py run (one worker) with these arguments."""
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "MINITORCH_EMU_SPLIT": "1" if split else "0"}
        subprocess.run([sys.executable, str(HERE / "emu_speed.py"), "--workers", "1", *args, "--out", d], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        return json.loads(next(Path(d).glob("emu_speed-*.json")).read_text())["results"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="replays of each launch (the best counts)")
    parser.add_argument("--steps", type=int, default=10, help="MNIST steps timed")
    parser.add_argument("--gpt-steps", type=int, default=3, help="GPT steps timed (0: no GPT rows)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from common import emulator_name, write_results

    rows = []
    for run in range(args.runs):
        for split in (True, False):
            load = os.getloadavg()[0]
            row = {"kind": "mnist_kernels_ab", "run": run, "split": split, "workers": 1, "load_average_before": load,
                   **run_profile(split, args.rounds, args.steps)}
            print({k: v for k, v in row.items() if k != "kernels"}, flush=True)
            rows.append(row)
            load = os.getloadavg()[0]
            sgemm = run_speed(split, "--only", "kernels", "--rounds", str(args.rounds))
            row = {"kind": "sgemm_ab", "run": run, "split": split, "workers": 1, "load_average_before": load,
                   "cpu_seconds": {r["kernel"]: round(r["cpu_seconds"], 5) for r in sgemm if r["kind"] == "sgemm"}}
            print(row, flush=True)
            rows.append(row)
            if args.gpt_steps:
                load = os.getloadavg()[0]
                gpt = run_speed(split, "--only", "gpt", "--gpt-steps", str(args.gpt_steps))
                row = {"kind": "gpt_ab", "run": run, "split": split, "workers": 1, "load_average_before": load,
                       "steps": args.gpt_steps,
                       "step_cpu_seconds": {r["config"]: round(r["step_cpu_seconds"], 4) for r in gpt}}
                print(row, flush=True)
                rows.append(row)
    write_results("emu_split_ab", emulator_name(), rows, cpu_count=os.cpu_count(),
                  notes=["split: MINITORCH_EMU_SPLIT=1 (kernels whose only synchronisation is __syncthreads() in "
                         "their own body run as one C++ coroutine per CUDA thread) or 0 (fibers); the runs alternate",
                         "mnist_kernels_ab: benchmarks/emu_kernel_profile.py, one worker, specialised code: kernels "
                         "are each kernel's CPU seconds a step (best of the replays), step_cpu_seconds the process's "
                         "CPU time a step",
                         "sgemm_ab: benchmarks/emu_speed.py --only kernels --workers 1: the process's CPU seconds of "
                         "one 512^3 product (the round with the best wall time)",
                         "gpt_ab: benchmarks/emu_speed.py --only gpt --workers 1: the process's CPU seconds a step of "
                         "the Phase 7 GPT (lab and reduced configurations), over --gpt-steps steps",
                         "other programs share the 2 cores (load_average_before): compare within a run"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
