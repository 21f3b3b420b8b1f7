"""The Phase 7 deliverable trained in full on the CUDA C emulator: what a learner without a GPU can earn.

Trains the lab's full recipe (the configuration a GPU trains and the grader's bar ``phase7.shakespeare_val_loss``
judges: 2 layers, 4 heads, d_model 64, context 64, batch 64, 1,000 captured steps, head tied, dropout, AdamW over
one flat buffer) on the emulator with the reference solution files of Phases 1-7, from each seed of ``--seeds``,
exactly as ``benchmarks/phase7_gpt.py --flat-steps`` trains it on a GPU (its ``recipe_rows``). Each row gives the
validation loss on the grader's 256 windows, the wall-clock and CPU seconds of the whole run (the model built, the
step captured, 1,000 steps and the evaluation; the emulator's first compiles included unless the disk cache had
them), the worker count and the machine's load average before the run. Writes
``benchmarks/results/phase7_gpt_emu_recipe-<emulator>.json``.

    python benchmarks/phase7_emu_recipe.py --seeds 0 --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

from common import emulator_name, solution_sources, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="0", help="seeds to train from, comma-separated (default 0)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="emulator worker threads (default: one a core)")
    parser.add_argument("--steps", type=int, help="fewer steps than the recipe's (a check of the script: no JSON)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase7"
    from phase7_gpt import CLIP, FULL, LABS, RECIPE_DROPOUT, RECIPE_TIE, WEIGHT_DECAY, recipe_rows, schedule_of

    import minitorch
    from minitorch import emu
    from minitorch.kernels import write_source

    minitorch.set_device("emu")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    setup = FULL if args.steps is None else {**FULL, "train": {**FULL["train"], "steps": args.steps}}
    rows = []
    with emu.workers(args.workers):
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            load = os.getloadavg()[0]
            for row in recipe_rows(setup, [seed]):
                rows.append({**row, "kind": "recipe_emu", "workers": args.workers, "steps": setup["train"]["steps"],
                             "load_average_before": load})
                print(rows[-1], flush=True)
    if args.steps is not None:
        return 0
    write_results("phase7_gpt_emu_recipe", emulator_name(), rows, cpu_count=os.cpu_count(),
                  config={**FULL["model"], **FULL["train"]}, weight_decay=WEIGHT_DECAY, clip=CLIP,
                  recipe={"tie_weights": RECIPE_TIE, "dropout": RECIPE_DROPOUT},
                  schedule=dataclasses.asdict(schedule_of(FULL["train"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
