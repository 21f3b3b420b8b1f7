"""Per-kernel CPU time of the emulator's MNIST training step, for comparing two versions of the emulator.

Builds the Phase 6 deliverable's captured step as ``emu_speed.py``'s ``mnist`` row does (one worker, the
specialised code), then prints ``emu_speed.kernel_profile`` of its launches (each launch replayed, the best of
``--rounds``, this thread's CPU time, summed by kernel) and the process's CPU time of ``--steps`` more steps.
Run it alternately with the changed and the unchanged emulator (other programs share the machine): this is how
``emu_speed_experiments-*.json`` series 8 to 11 were measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="replays of each launch (the best counts)")
    parser.add_argument("--steps", type=int, default=10, help="steps timed after the per-kernel profile")
    parser.add_argument("--json", help="also write the rows and the step's CPU time to this file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("MINITORCH_WORKSPACE", tempfile.mkdtemp(prefix="minitorch-kernel-profile-"))
    os.environ["MINITORCH_PHASE"] = "phase7"
    import emu_speed
    from common import solution_sources

    import minitorch
    from minitorch import backend, emu, graph
    from minitorch.kernels import write_source

    minitorch.set_device("emu")
    for lab in emu_speed.LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    train_step, feed, _ = emu_speed.mnist_step()
    b = emu_speed.MNIST_BATCH

    def run(first: int, count: int) -> None:
        for i in range(first, first + count):
            feed(np.arange(i * b, (i + 1) * b))
            step.replay()
        backend.synchronize()

    with emu.workers(1):
        step = graph.capture(train_step)
        run(0, 3)
        emu_speed._specialize_now()
        run(3, 3)
        emu_speed._specialize_now()
        total = 0.0
        rows = emu_speed.kernel_profile(step._launches, rounds=args.rounds)
        for row in rows:
            total += row["cpu_seconds"]
            print(f"{row['kernel'][:48]:48s} {row['launches']:2d} {row['cpu_seconds'] * 1e3:8.2f} ms "
                  f"fibers={row['fibers']} split={row['split']}")
        print(f"total {total * 1e3:.1f} ms")
        cpu = time.process_time()
        run(6, args.steps)
        step_cpu = (time.process_time() - cpu) / args.steps
        print(f"step cpu {step_cpu * 1e3:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"kernels": rows, "kernels_cpu_seconds_sum": total,
                                               "step_cpu_seconds": step_cpu, "steps": args.steps,
                                               "rounds": args.rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
