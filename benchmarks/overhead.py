"""Framework overhead: what a launch, an op and a training step cost beyond the kernels themselves.

Per op (1,024 floats, the learner's ``add`` from Phase 2; host time per call, the device drained at
the end, so each figure is what Python spends to get one tiny kernel going):

- ``raw_cupy``: ``cupy.RawKernel`` of the same source, called directly (the floor);
- ``kernel_call``: :class:`minitorch.kernels.Kernel` (checks, launch count, trace hook);
- ``load_and_call``: ``load_kernel(...)`` then the call, as every launcher does;
- ``ops_add``: ``minitorch.ops.add`` (checks, output allocation, the learner's launcher replayed from
  its plan, see ``minitorch.plans``);
- ``tensor_add``: ``a + b`` on tensors (autograd's Function as well);
- ``ops_add_unplanned``, ``tensor_add_unplanned``: the same with ``MINITORCH_PLANS=0`` (the learner's
  launcher runs its Python on every call, as before plans);
- ``torch_add``: PyTorch eager ``x + y`` on the same GPU (when PyTorch is installed).

Per step (the XOR network of Phase 3b: ``Linear(2, 4) -> Sigmoid -> Linear(4, 1)``, MSE, SGD with
momentum): minitorch eager, minitorch with the step captured into a graph (``minitorch.graph``),
PyTorch eager; the graph's replay time is the step's device time, so eager minus graph is launch
overhead. Writes ``benchmarks/results/overhead-<device>.json``.

Usage: ``python benchmarks/overhead.py [--device cuda|emu] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import emulator_name, gpu_name, solution_sources, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward")
N = 1024
X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
Y = np.array([[0], [1], [1], [0]], np.float32)


def per_call(fn: Callable[[], object], sync: Callable[[], None], repeat: int) -> float:
    """Median over 5 rounds of the seconds per call of ``repeat`` calls, the device drained after each round."""
    for _ in range(max(repeat // 10, 3)):
        fn()
    sync()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        rounds.append((time.perf_counter() - start) / repeat)
    return float(np.median(rounds))


def op_rows(device: str, repeat: int) -> list[dict]:
    import minitorch
    from minitorch import backend, kernels, ops

    be = backend.get_backend(device)
    a = minitorch.tensor(np.ones(N, np.float32))
    b = minitorch.tensor(np.ones(N, np.float32))
    out = be.empty((N,))
    args = (a.data, b.data, out, np.int64(N))
    grid, block = ((N + 255) // 256,), (256,)
    kernel = kernels.load_kernel("elementwise.cu", "add")
    sync = be.synchronize
    rows = []
    if device == "cuda":
        import cupy

        raw = cupy.RawModule(code=kernels.read_source("elementwise.cu")).get_function("add")
        rows.append(("raw_cupy", per_call(lambda: raw(grid, block, args), sync, repeat)))
    else:
        rows.append(("raw_emu", per_call(lambda: kernel._raw(grid, block, args), sync, repeat)))
    rows.append(("kernel_call", per_call(lambda: kernel(grid, block, args), sync, repeat)))
    rows.append(("load_and_call", per_call(
        lambda: kernels.load_kernel("elementwise.cu", "add")(grid, block, args), sync, repeat)))
    rows.append(("ops_add", per_call(lambda: ops.add(a, b), sync, repeat)))
    rows.append(("tensor_add", per_call(lambda: a + b, sync, repeat)))
    os.environ["MINITORCH_PLANS"] = "0"
    try:
        rows.append(("ops_add_unplanned", per_call(lambda: ops.add(a, b), sync, repeat)))
        rows.append(("tensor_add_unplanned", per_call(lambda: a + b, sync, repeat)))
    finally:
        del os.environ["MINITORCH_PLANS"]
    torch_row = torch_add(device, repeat)
    if torch_row is not None:
        rows.append(torch_row)
    return [{"kind": "op", "what": what, "microseconds": seconds * 1e6} for what, seconds in rows]


def torch_add(device: str, repeat: int) -> tuple[str, float] | None:
    try:
        import torch
    except ImportError:
        return None
    where = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    x = torch.ones(N, device=where)
    y = torch.ones(N, device=where)
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)
    return ("torch_add" if where == "cuda" else "torch_add_cpu", per_call(lambda: x + y, sync, repeat))


def xor_model(seed: int):
    import minitorch
    from minitorch import functional, nn, optim

    hidden, out = nn.Linear(2, 4, seed=seed), nn.Linear(4, 1, seed=seed + 1)
    opt = optim.SGD([*hidden.parameters(), *out.parameters()], lr=0.01, momentum=0.9)
    x, y = minitorch.tensor(X), minitorch.tensor(Y)

    def step():
        opt.zero_grad()
        loss = functional.mse_loss(out(hidden(x).sigmoid()), y)
        loss.backward()
        opt.step()
        return loss

    return hidden, out, step


def step_rows(device: str, repeat: int) -> list[dict]:
    from minitorch import backend, kernels

    try:
        from minitorch import graph
    except ImportError:
        graph = None
    sync = backend.get_backend(device).synchronize
    hidden, out, step = xor_model(0)
    kernels.reset_launch_counts()
    step()
    launches = sum(kernels.launch_counts().values())
    eager = per_call(step, sync, repeat)
    rows = [{"kind": "step", "what": "minitorch_eager", "microseconds": eager * 1e6, "launches": launches}]
    if graph is not None:  # (absent before graphs existed: the "before" measurement)
        _, _, step2 = xor_model(0)
        captured = graph.capture(step2)
        replay = per_call(captured.replay, sync, repeat)
        rows.append({"kind": "step", "what": "minitorch_graph", "microseconds": replay * 1e6,
                     "launches": captured.launches})
    theirs = torch_step(device, hidden, out, repeat)
    if theirs is not None:
        rows.append({"kind": "step", "what": "torch_eager", "microseconds": theirs * 1e6})
    return rows


def torch_step(device: str, hidden, out, repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    where = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Sigmoid(), torch.nn.Linear(4, 1)).to(where)
    with torch.no_grad():  # minitorch stores Linear weights as (in, out), PyTorch as (out, in)
        for layer, mine in ((net[0], hidden), (net[2], out)):
            layer.weight.copy_(torch.tensor(mine.weight.numpy().T))
            layer.bias.copy_(torch.tensor(mine.bias.numpy()))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    tx, ty = torch.tensor(X, device=where), torch.tensor(Y, device=where)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(tx), ty)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)
    return per_call(step, sync, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "emu"])
    parser.add_argument("--repeat", type=int, default=None, help="calls per timing round")
    parser.add_argument("--label", default="", help="appended to the results' name (e.g. 'before')")
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
    repeat = args.repeat or (2000 if device == "cuda" else 100)
    label = gpu_name() if device == "cuda" else emulator_name()
    rows = op_rows(device, repeat) + step_rows(device, max(repeat // 10, 20))
    ops = {r["what"]: r["microseconds"] for r in rows if r["kind"] == "op"}
    steps = {r["what"]: r["microseconds"] for r in rows if r["kind"] == "step"}
    floor = ops.get("raw_cupy") or ops.get("raw_emu")
    print(f"{label}: microseconds per call")
    for what, us in ops.items():
        print(f"  {what:14s} {us:9.1f}   x{us / floor:5.2f} of the raw launch"
              + (f", x{us / ops['torch_add']:5.2f} of torch x + y" if "torch_add" in ops else ""))
    for what, us in steps.items():
        ratio = f"   x{us / steps['torch_eager']:5.2f} of PyTorch eager" if "torch_eager" in steps else ""
        print(f"  step {what:16s} {us:9.1f}{ratio}")
    name = "overhead" + (f"_{args.label}" if args.label else "")
    write_results(name, label, rows, repeat=repeat, n=N, minitorch_device=device)


if __name__ == "__main__":
    sys.exit(main())
