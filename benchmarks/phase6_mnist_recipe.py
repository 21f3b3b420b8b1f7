"""Phase 6: the MNIST recipe's calibration, on the reference solutions themselves: test accuracy after each epoch
of the course's CNN (batches of 64, 10 epochs, inputs standardised, the lab's captured step) for each recipe of
``phase6_mnist.RECIPES`` over several seeds (the seed draws the initial weights, the sample order and the moves):

- ``constant``: plain Adam at 1e-3;
- ``cosine``: Adam at 2e-3 decayed along a cosine, epoch by epoch;
- ``cosine_shift``: the same, every training image moved by up to a pixel each epoch (the lab's recipe).

The course asks its reference to reach 99.0% reliably; the figure of the chapter shows which recipe does.
Writes ``benchmarks/results/phase6_mnist_recipe-<gpu>.json`` (rows: recipe, seed, epoch, lr, test_accuracy,
train_loss). On an H100 a run takes 4-9 s. ``--small`` runs a few steps of each recipe on the emulator, to run
every line without a GPU (results in a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import phase6_mnist as mnist
from common import emulator_name, gpu_name, solution_sources, write_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--small", action="store_true", help="a few steps of each recipe on the emulator")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    import minitorch
    from minitorch.kernels import write_source

    minitorch.set_device("emu" if args.small else "cuda")
    for lab in mnist.LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    config = mnist.SMALL if args.small else mnist.FULL
    rows = []
    for recipe in mnist.RECIPES:
        for seed in (int(s) for s in args.seeds.split(",")):
            history, summary, _ = mnist.train_minitorch(mnist.load(config, seed), config, recipe, seed)
            rows += [{"recipe": recipe, "seed": seed, "epoch": h["epoch"], "lr": h["lr"],
                      "train_loss": h["train_loss"], "test_accuracy": h["test_accuracy"]} for h in history]
            print(f"{recipe} seed {seed}: {summary['test_accuracy']:.2%} after {config['epochs']} epochs",
                  flush=True)
    if args.small:
        import common

        common.RESULTS = Path(tempfile.mkdtemp(prefix="phase6-recipe-"))
    write_results("phase6_mnist_recipe", emulator_name() if args.small else gpu_name(), rows,
                  config=config, batch_size=mnist.BATCH, peak_rate=mnist.LEARNING_RATE,
                  constant_rate=mnist.CONSTANT_RATE, max_shift=mnist.MAX_SHIFT,
                  recipes={k: {"rate": v[0], "max_shift": v[1]} for k, v in mnist.RECIPES.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
