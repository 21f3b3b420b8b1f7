"""Rung 7 (conv2d_regtile, conv2d_backward_weight_regtile) against the other rungs of Phase 6's ladder on MNIST's
two layers (batch 64, 3 x 3, padding 1: 1 -> 8 channels at 28 x 28, 8 -> 16 at 14 x 14), every pass.

Runs conv.py's own ``autotune`` (each rung checked against the direct rung, then timed: on a GPU the grader's
CUDA-event timing, elsewhere ``--cpu-timer``, the best of 3 CPU-time runs once the emulator has
compiled the launches for their integer arguments) in a temporary workspace with the
reference solutions, and writes each rung's seconds and the winner per pass and layer to
``benchmarks/results/phase6_conv_regtile-<device>.json`` (``--out`` for another directory). Rung 7 was written for
the emulator, where best() picks it below BIG_FLOPS; on a GPU this says whether it would win there too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

from common import emulator_name, gpu_name, solution_sources, write_results

LAYERS = {"mnist-conv1": (64, 1, 28, 28, 8, 3, 3, 1, 1), "mnist-conv2": (64, 8, 14, 14, 16, 3, 3, 1, 1)}


def cpu_timer(fn, repeats: int = 3) -> float:
    """The best of ``repeats`` CPU-time runs of ``fn``, after three runs and the emulator's compiles for their
    integer arguments (what a training loop's steps run: emu_speed.py's _specialize_now)."""
    from minitorch.emu.specialize import specialize_now

    for _ in range(3):
        fn()
    specialize_now()
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    parser.add_argument("--cpu-timer", action="store_true", help="time with CPU time (the emulator)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ.setdefault("MINITORCH_PHASE", "phase6")
    from minitorch import backend
    from minitorch.kernels import load_module, write_source

    for lab in ("phase1_memory", "phase5_fast", "phase6_cnn"):
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    cv = load_module("conv.py")
    rows = []
    for layer, spec in LAYERS.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            table = cv.autotune([spec], timer=cpu_timer if args.cpu_timer else None)
        print(printed.getvalue(), end="", flush=True)
        n, c, h, w, k, r, s, stride, pad = spec
        key = cv.shape_key(cv.conv_shape((n, c, h, w), (k, c, r, s), stride, pad), stride)
        for line in printed.getvalue().splitlines():
            shape_key, rest = line.split(" ", 1)
            kind, timings = rest.split(": ", 1)
            times = dict(part.rsplit(" ", 2)[:2] for part in timings.split(" -> ")[0].split("  "))
            rows.append({"layer": layer, "shape_key": shape_key, "pass": kind,
                         "seconds": {v: float(t) * 1e-6 for v, t in times.items()},
                         "winner": table[cv.device_name()][kind][key]})
    device = gpu_name() if backend.get_device() == "cuda" else emulator_name()
    import common

    if args.out:
        common.RESULTS = Path(args.out)
    write_results("phase6_conv_regtile", device, rows,
                  notes=["conv.py autotune(): each rung's time (GPU: the grader's CUDA-event median, L2 flushed; "
                         "--cpu-timer: the best of 3 CPU-time runs, specialised code), rounded to the microsecond as autotune prints"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
