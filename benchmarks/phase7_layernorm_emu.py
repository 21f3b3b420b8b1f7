"""Phase 7's LayerNorm on the emulator: the warp kernels against the thread-a-row kernels, at the GPT step's shape.

The lab's GPT (2 layers, d_model 64, context 64, batch 64) normalises 4,096 rows of 64 floats five times a step
(two LayerNorms a block, one at the end), forward and backward. Each variant of layernorm.py (``"warp"``: a warp a
row, shuffles and, in the backward, shared memory and barriers: fibers on the emulator; ``"thread"``: a thread a
row, then a thread a column for the parameter gradients' partial sums: plain loops) is captured as a graph of its
launches and timed as emu_speed.py times the GPT step: the CPU time of this thread (1 worker), the best of
``--rounds``, after the emulator has compiled the launches for their integer arguments (specialize_now). Each row
also gives the time by kernel (emu_speed.kernel_profile). With ``--gpt-steps N`` the whole step of the lab's GPT
(emu_speed.py's ``gpt`` row, 1 worker) is timed too, once with each variant as what "best" runs (layernorm.py's
default_variant replaced; launch plans cleared): the step's CPU time and its LayerNorm kernels'. Writes
``benchmarks/results/phase7_layernorm_emu-<device>.json`` (``--out`` for another directory) with the machine's load
average before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import emu_cpu_seconds, emulator_name, solution_sources, write_results

ROWS, COLS = 64 * 64, 64  # batch x context, d_model
LAUNCHES_PER_STEP = 5  # a forward and a backward each: 2 blocks x 2 LayerNorms + the final one


def captured(lm, variant: str, pass_: str):
    """A graph of the launcher's launches for one pass of one variant, on fixed random inputs."""
    from minitorch import backend, graph

    rng = np.random.default_rng(0)
    x = backend.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    w = backend.asarray(rng.uniform(0.5, 2, COLS).astype(np.float32))
    b = backend.asarray(rng.standard_normal(COLS).astype(np.float32))
    g = backend.asarray(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    out, mean, rstd = backend.empty((ROWS, COLS)), backend.empty(ROWS), backend.empty(ROWS)
    lm.layernorm_forward(x, w, b, out, mean, rstd, 1e-5, variant=variant)
    if pass_ == "forward":
        return graph.capture(lambda: lm.layernorm_forward(x, w, b, out, mean, rstd, 1e-5, variant=variant))
    dx, dw, db = backend.empty((ROWS, COLS)), backend.empty(COLS), backend.empty(COLS)
    return graph.capture(lambda: lm.layernorm_backward(g, x, w, mean, rstd, dx, dw, db, variant=variant))


def gpt_steps(lm, steps: int) -> list[dict]:
    """emu_speed.py's GPT row (the lab's full configuration, 1 worker) with each variant as "best", in the order
    warp, thread, thread, warp (a machine that other programs share drifts: each variant runs early and late)."""
    from emu_speed import GPT_FULL, gpt_row

    from minitorch import plans

    found = []
    default = lm.default_variant
    try:
        for order, variant in enumerate(("warp", "thread", "thread", "warp")):
            lm.default_variant = lambda variant=variant: variant
            plans.clear()  # plans recorded with the other variant's launches
            load = os.getloadavg()[0]
            row = gpt_row(1, steps, "lab (full)", GPT_FULL)
            layernorm = [k for k in row["kernels"] if k["kernel"].startswith("layernorm_")]
            found.append({"variant": variant, "kind": "gpt step", "order": order, **{k: row[k] for k in (
                "step_seconds", "step_cpu_seconds", "steps_timed", "launches_per_step")}, "load_average_before": load,
                "kernels_cpu_seconds": sum(k["cpu_seconds"] for k in row["kernels"]),
                "layernorm_cpu_seconds": sum(k["cpu_seconds"] for k in layernorm), "layernorm_kernels": layernorm})
            print(f"{variant:6s} GPT step {row['step_cpu_seconds']:.3f} s CPU (its launches one by one: "
                  f"{found[-1]['kernels_cpu_seconds']:.3f} s), LayerNorm's kernels "
                  f"{found[-1]['layernorm_cpu_seconds']:.3f} s", flush=True)
    finally:
        lm.default_variant = default
        plans.clear()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, the best kept (default 3)")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    parser.add_argument("--gpt-steps", type=int, default=0, help="also time N steps of the lab's GPT with each "
                                                                 "variant (default 0: not)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase7"
    from emu_speed import LABS, kernel_profile

    import minitorch
    from minitorch import emu
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("emu")
    for lab in LABS:  # every lab's files: the GPT step runs on all of them
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    lm = load_module("layernorm.py")
    load_before = os.getloadavg()
    rows = []
    with emu.workers(1):
        graphs = {(v, p): captured(lm, v, p) for v in ("warp", "thread") for p in ("forward", "backward")}
        for (variant, pass_), g in graphs.items():
            seconds = emu_cpu_seconds(g.replay, args.rounds)
            rows.append({"variant": variant, "pass": pass_, "rows": ROWS, "cols": COLS, "workers": 1,
                         "cpu_seconds": seconds, "launches_per_gpt_step": LAUNCHES_PER_STEP,
                         "gpt_step_cpu_seconds": seconds * LAUNCHES_PER_STEP,
                         "kernels": kernel_profile(g._launches, rounds=args.rounds)})
            print(f"{variant:6s} {pass_:8s} {seconds * 1e3:8.2f} ms CPU a launch "
                  f"({seconds * LAUNCHES_PER_STEP:.3f} s a GPT step)", flush=True)
        if args.gpt_steps:
            rows += gpt_steps(lm, args.gpt_steps)
    for pass_ in ("forward", "backward"):
        warp, thread = (next(r for r in rows if r["variant"] == v and r.get("pass") == pass_)
                        for v in ("warp", "thread"))
        thread["speedup_over_warp"] = warp["cpu_seconds"] / thread["cpu_seconds"]
    import common

    if args.out:
        common.RESULTS = Path(args.out)
    write_results("phase7_layernorm_emu", emulator_name(), rows, cpu_count=os.cpu_count(),
                  load_average_before=list(load_before), load_average_after=list(os.getloadavg()),
                  notes=["cpu_seconds: CPU time of the one worker thread for one call of the launcher (its graph "
                         "replayed), the best of the rounds, specialised code; gpt_step_cpu_seconds: times the "
                         "launches of that pass in one step of the lab's GPT",
                         "warp: layernorm_forward / layernorm_backward + layernorm_param_grads (fibers); thread: "
                         "layernorm_forward_thread / layernorm_backward_thread + layernorm_param_partials + "
                         "layernorm_param_grads"])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
