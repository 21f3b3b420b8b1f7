"""Phase 3b deliverable benchmark: the XOR network trained on the reference solutions, for the chapter's figures.

Trains the lab's network (``Linear(2, 4) -> Sigmoid -> Linear(4, 1)``, mean squared error, SGD with momentum,
5000 full-batch epochs, the settings of solutions/phase3b_backward.ipynb) on the solution files of Phases 1-3b,
and writes ``benchmarks/results/phase3_xor-<device>.json`` with rows of these kinds:

- ``curve``: the loss after every ``CURVE_EVERY``-th epoch (``framework``: minitorch, and pytorch when installed);
- ``boundary``: the trained network's output on a grid over [-0.5, 1.5]^2 (the decision boundary);
- ``truth_table``: its output on the four XOR points;
- ``time``: seconds for the 5000 epochs, minitorch and (when installed) the same network in PyTorch from the
  same initial weights, on the GPU when minitorch runs on one; ``ratio`` = minitorch / PyTorch.

Usage: ``python benchmarks/phase3_xor.py [--device cuda|emu]`` (default: cuda when a GPU is usable, else emu).
On the emulator the timing says nothing about a GPU; the curve and the boundary are the same computation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import emulator_name, gpu_name, solution_sources, write_results

EPOCHS, LR, MOMENTUM, SEED = 5000, 0.01, 0.9, 0  # the lab's deliverable settings
CURVE_EVERY = 5
GRID = np.linspace(-0.5, 1.5, 41)
LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward")
X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
Y = np.array([[0], [1], [1], [0]], np.float32)


def make_model(seed: int):
    from minitorch import nn

    class XORNet(nn.Module):
        def __init__(self) -> None:
            self.hidden = nn.Linear(2, 4, seed=seed)
            self.out = nn.Linear(4, 1, seed=seed + 1)

        def forward(self, x):
            return self.out(self.hidden(x).sigmoid())

    return XORNet()


def train_minitorch(epochs: int, use_graph: bool = False) -> dict:
    """Eager: every op launched from Python. Graph: the step captured once (minitorch.graph) and
    replayed; each epoch's loss is copied (device to device) into a buffer of all the losses."""
    import minitorch
    from minitorch import functional, graph, optim

    model = make_model(SEED)
    initial = model.state_dict()
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = minitorch.tensor(X), minitorch.tensor(Y)

    def step():
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = []
    minitorch.backend.synchronize()
    start = time.perf_counter()
    if use_graph:
        captured = graph.capture(step)
        for _ in range(epochs):
            captured.replay()
            losses.append(captured.output.clone())
        loss = captured.output
    else:
        for _ in range(epochs):
            loss = step()
            losses.append(loss.detach())
    final = loss.item()  # waits for the device
    seconds = time.perf_counter() - start
    losses = [t.item() for t in losses]
    points = np.array([(a, b) for b in GRID for a in GRID], np.float32)
    with minitorch.no_grad():
        surface = model(minitorch.tensor(points)).numpy().reshape(len(GRID), len(GRID))
        table = model(x).numpy().ravel()
    return dict(initial=initial, losses=losses, seconds=seconds, final=final, surface=surface, table=table)


def train_pytorch(initial: dict, epochs: int, device: str) -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    tx, ty = torch.tensor(X, device=device), torch.tensor(Y, device=device)
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Sigmoid(), torch.nn.Linear(4, 1)).to(device)
    with torch.no_grad():  # minitorch stores Linear weights as (in, out), PyTorch as (out, in)
        for layer, name in ((model[0], "hidden"), (model[2], "out")):
            layer.weight.copy_(torch.tensor(initial[f"{name}.weight"].T))
            layer.bias.copy_(torch.tensor(initial[f"{name}.bias"]))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []

    def run(n: int) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(tx), ty)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        losses[-1].item()  # waits for the GPU
        return time.perf_counter() - start

    seconds = run(epochs)
    curve = [t.item() for t in losses]
    return dict(losses=curve, seconds=seconds, final=curve[-1], torch=torch.__version__)


def warm_up() -> None:
    """Compile every kernel once, so that the timed run measures training, not NVRTC."""
    import minitorch
    from minitorch import functional, optim

    model = make_model(SEED + 100)
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for _ in range(3):
        opt.zero_grad()
        functional.mse_loss(model(minitorch.tensor(X)), minitorch.tensor(Y)).backward()
        opt.step()
    minitorch.backend.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "emu"])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args()
    workspace = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_WORKSPACE"] = workspace
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            Path(workspace, name).write_text(text)
    import minitorch

    if args.device:
        minitorch.set_device(args.device)
    device = minitorch.get_device()
    label = gpu_name() if device == "cuda" else emulator_name()
    warm_up()
    mine = train_minitorch(args.epochs)
    captured = train_minitorch(args.epochs, use_graph=True)
    np.testing.assert_allclose(captured["losses"], mine["losses"], rtol=1e-5, atol=1e-7)  # the same training
    theirs = train_pytorch(mine["initial"], args.epochs, "cuda" if device == "cuda" else "cpu")
    print(f"minitorch on {label}: {args.epochs} epochs in {mine['seconds']:.2f} s, final loss {mine['final']:.3g}")
    rows: list[dict] = []
    epochs = list(range(1, args.epochs + 1, CURVE_EVERY)) + ([args.epochs] if args.epochs % CURVE_EVERY != 1 else [])
    rows.append({"kind": "curve", "framework": "minitorch", "epoch": epochs,
                 "loss": [mine["losses"][e - 1] for e in epochs]})
    rows.append({"kind": "boundary", "framework": "minitorch", "grid": GRID.tolist(),
                 "output": mine["surface"].astype(float).round(6).tolist()})
    rows.append({"kind": "truth_table", "framework": "minitorch", "inputs": X.astype(int).tolist(),
                 "target": Y.ravel().tolist(), "output": mine["table"].astype(float).tolist()})
    rows.append({"kind": "time", "framework": "minitorch", "device": label, "epochs": args.epochs,
                 "seconds": mine["seconds"], "final_loss": mine["final"]})
    rows.append({"kind": "time", "framework": "minitorch_graph", "device": label, "epochs": args.epochs,
                 "seconds": captured["seconds"], "final_loss": captured["final"]})
    print(f"minitorch with the step captured into a graph: {captured['seconds']:.2f} s")
    extra = {"epochs": args.epochs, "learning_rate": LR, "momentum": MOMENTUM, "seed": SEED,
             "minitorch_device": device}
    if theirs is not None:
        where = label if device == "cuda" else f"PyTorch {theirs['torch']} on the CPU"
        print(f"PyTorch ({where}): {theirs['seconds']:.2f} s, final loss {theirs['final']:.3g}; "
              f"minitorch / PyTorch = {mine['seconds'] / theirs['seconds']:.2f}")
        rows.append({"kind": "curve", "framework": "pytorch", "epoch": epochs,
                     "loss": [theirs["losses"][e - 1] for e in epochs]})
        rows.append({"kind": "time", "framework": "pytorch", "device": where, "epochs": args.epochs,
                     "seconds": theirs["seconds"], "final_loss": theirs["final"],
                     "ratio": mine["seconds"] / theirs["seconds"],
                     "ratio_graph": captured["seconds"] / theirs["seconds"]})
        print(f"minitorch graph / PyTorch = {captured['seconds'] / theirs['seconds']:.2f}")
        extra["torch"] = theirs["torch"]
    write_results("phase3_xor", label, rows, **extra)


if __name__ == "__main__":
    sys.exit(main())
