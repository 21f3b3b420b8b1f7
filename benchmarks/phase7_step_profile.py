"""Where a captured GPT training step spends its GPU time, against PyTorch eager and captured.

The lab's full configuration (2 layers, 4 heads, d_model 64, context 64, batch 64, Tiny Shakespeare's 65
characters; AdamW, gradients clipped to 1.0), one step captured in a graph (``minitorch.graph``) and
replayed. Measured:

- ``step``: milliseconds a replay (CUDA events around REPLAYS replays), and the same for PyTorch eager and
  for PyTorch's step captured with ``torch.cuda.graph`` (AdamW with ``capturable=True``, the same model:
  ``phase7_gpt.torch_gpt``);
- ``kernel``: per kernel of the replay, from ``torch.profiler`` (CUPTI) over PROFILED replays: calls a step,
  microseconds a call, share of the GPU time;
- ``summary``: GPU-busy time a step against the replay's wall time.

The batch is random token ids: a step's work does not depend on which characters it holds.
``--notebooks DIR`` takes the reference solutions from DIR instead of solutions/ (to profile an earlier
version); ``--label`` names the run in the file name: ``phase7_step_profile[_<label>]-<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from common import ROOT, gpu_name, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from phase7_gpt import (  # noqa: E402
    CLIP,
    FULL,
    LABS,
    SEED,
    WEIGHT_DECAY,
    load_weights,
    minitorch_step,
    torch_captured,
    torch_gpt,
)

VOCAB = 65  # Tiny Shakespeare's characters
REPLAYS, PROFILED = 200, 10


def sources(notebooks: Path) -> dict[str, str]:
    """The files the %%kernel / %%module cells of the lab notebooks in `notebooks` write."""
    from grader.labs import learner_files

    files = {}
    for lab in LABS:
        files.update(learner_files(notebooks / f"{lab}.ipynb"))
    return files


def milliseconds(fn, repeats: int = REPLAYS) -> float:
    import cupy

    for _ in range(5):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / repeats


def kernel_table(fn, replays: int = PROFILED) -> tuple[list[dict], float]:
    """Per kernel: calls a step, µs a call, µs a step; and the GPU-busy µs a step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if getattr(event, "device_type", None) is None or "CUDA" not in str(event.device_type):
            continue
        if event.name.startswith(("cudaLaunch", "cudaGraph", "cudaMemcpy", "cudaStream", "cudaEvent")):
            continue
        entry = totals[event.name]
        entry[0] += 1
        entry[1] += event.device_time if hasattr(event, "device_time") else event.cuda_time
    busy = sum(t for _, t in totals.values()) / replays
    rows = [{"kind": "kernel", "name": name, "calls_per_step": calls / replays, "us_per_call": us / calls,
             "us_per_step": us / replays, "share": us / replays / busy if busy else 0.0}
            for name, (calls, us) in totals.items()]
    rows.sort(key=lambda r: -r["us_per_step"])
    return rows, busy


def torch_steps(model, xb_host: np.ndarray, yb_host: np.ndarray) -> dict:
    """PyTorch's step on the same weights and batch: eager, and captured in a CUDA graph."""
    import torch
    import torch.nn.functional as TF  # noqa: N812

    cfg = FULL["model"]
    b, t = xb_host.shape
    net = torch_gpt(cfg, VOCAB, "cuda")
    load_weights(net, model)
    xb = torch.from_numpy(xb_host.astype(np.int64)).cuda()
    yb = torch.from_numpy(yb_host.astype(np.int64)).cuda()

    def make_step(opt):
        def step():
            loss = TF.cross_entropy(net(xb).view(b * t, VOCAB), yb.view(b * t))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
            return loss
        return step

    lr = FULL["train"]["lr"]
    eager = make_step(torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=WEIGHT_DECAY))
    eager_ms = milliseconds(eager)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=WEIGHT_DECAY,
                            capturable=True)
    graph = torch_captured(make_step(opt))
    captured_ms = milliseconds(graph.replay)
    table, busy = kernel_table(graph.replay)
    return {"eager_ms": eager_ms, "captured_ms": captured_ms, "busy_us": busy, "kernels": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--notebooks", type=Path, default=ROOT / "solutions")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, help="write the JSON here instead of benchmarks/results/")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch's steps")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-profile-")
    import minitorch
    from minitorch import graph, nn, optim
    from minitorch.kernels import write_source

    if not minitorch.cuda_available():
        print("this profile needs a GPU", file=sys.stderr)
        return 1
    minitorch.set_device("cuda")
    for name, text in sources(args.notebooks).items():
        write_source(name, text)
    cfg, b = FULL["model"], FULL["train"]["batch_size"]
    rng = np.random.default_rng(SEED)
    x_host = rng.integers(0, VOCAB, (b, cfg["block_size"])).astype(np.int32)
    y_host = rng.integers(0, VOCAB, (b, cfg["block_size"])).astype(np.int32)
    model = nn.GPT(VOCAB, **cfg, seed=SEED)
    torch_result = None if args.no_torch else torch_steps(model, x_host, y_host)  # from the initial weights
    opt = optim.AdamW(model.parameters(), lr=FULL["train"]["lr"], weight_decay=WEIGHT_DECAY)
    xb, yb = minitorch.tensor(x_host, dtype="int32"), minitorch.tensor(y_host, dtype="int32")
    step = minitorch_step(model, opt, xb, yb, VOCAB)
    eager_ms = milliseconds(step, 20)
    captured = graph.capture(step)
    replay_ms = milliseconds(captured.replay)
    table, busy = kernel_table(captured.replay)
    rows = [{"kind": "step", "framework": "minitorch", "captured_ms": replay_ms, "eager_ms": eager_ms,
             "busy_us": busy, "launches": captured.launches}]
    rows += [{**r, "framework": "minitorch"} for r in table]
    print(f"minitorch: captured {replay_ms:.3f} ms a step ({captured.launches} launches, GPU busy "
          f"{busy / 1e3:.3f} ms), from Python {eager_ms:.3f} ms", flush=True)
    for r in table[:12]:
        print(f"  {r['share']:6.1%} {r['us_per_call']:8.1f} us x {r['calls_per_step']:4.1f}  {r['name'][:100]}")
    if torch_result:
        rows.append({"kind": "step", "framework": "pytorch", "captured_ms": torch_result["captured_ms"],
                     "eager_ms": torch_result["eager_ms"], "busy_us": torch_result["busy_us"]})
        rows += [{**r, "framework": "pytorch"} for r in torch_result["kernels"]]
        print(f"PyTorch: captured {torch_result['captured_ms']:.3f} ms (GPU busy "
              f"{torch_result['busy_us'] / 1e3:.3f} ms), eager {torch_result['eager_ms']:.3f} ms; minitorch "
              f"captured / PyTorch captured = {replay_ms / torch_result['captured_ms']:.2f}", flush=True)
    extra = {"configuration": {**cfg, "batch_size": b, "vocab_size": VOCAB, "replays": REPLAYS,
                               "profiled_replays": PROFILED}, "notebooks": str(args.notebooks)}
    name = "phase7_step_profile" + (f"_{args.label}" if args.label else "")
    if args.out:
        import datetime

        from common import software

        doc = {"benchmark": name, "device": gpu_name(), "date": datetime.date.today().isoformat(),
               "software": software(), **extra, "results": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    else:
        write_results(name, gpu_name(), rows, **extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
