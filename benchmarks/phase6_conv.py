"""Phase 6 benchmark: every rung of the convolution ladder, forward and backward, against cuDNN; max pooling
against PyTorch; softmax and cross-entropy against the copy bandwidth.

Runs the reference solution's conv.py / maxpool.py / softmax.py (with the Phase 5 GEMM) and, in the same
process, PyTorch (``torch.nn.functional.conv2d``, ``torch.nn.grad.conv2d_input`` / ``conv2d_weight``: cuDNN,
with TF32 off so that both sides compute in float32, and ``cudnn.benchmark`` on so that cuDNN picks its fastest
algorithm). Every result is checked against PyTorch's before it is timed. Writes
``benchmarks/results/phase6_conv-<gpu>.json``, rows by ``kind``:

- ``conv``: ``shape`` (``mnist-conv1``, ``mnist-conv2``: the deliverable's layers at its batch of 64;
  ``resnet``: 64 images, 64 -> 64 channels, 56 x 56), ``pass`` (``forward``, ``backward_input``,
  ``backward_weight``, ``backward_bias``), ``variant`` (a rung: forward ``direct``, ``im2col``, ``tiled``,
  ``igemm``, ``winograd``, ``winograd4``; input ``direct``, ``im2col``, ``tiled``, ``igemm``, ``winograd``, ``winograd4``;
  weight ``direct``, ``im2col``, ``tiled``, ``igemm``; ``best`` (untuned: ``default_variant``), ``best_tuned`` (after conv.py's ``autotune()`` on the layer;
  ``tuned`` names the rung it chose), or ``cudnn``), ``seconds``,
  ``gflops`` (2·N·K·P·Q·C·R·S per pass; the bias: N·K·P·Q additions) and ``ratio`` (cuDNN's time / ours);
- ``maxpool``: forward and backward of 2 x 2 pooling against ``torch.nn.functional.max_pool2d``;
- ``softmax``: softmax, cross-entropy forward + backward, bytes read + written per second against
  ``cupy.copyto`` (bytes read + written).

``--small`` runs the same code on the emulator with small shapes and PyTorch on the CPU (timed with the host
clock), to exercise every line without a GPU; it writes to ``--out`` (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS, emulator_name, gpu_name, solution_sources, time_gpu, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn")
# name: (N, C, H, W, K), 3 x 3 filters, padding 1, stride 1
SHAPES = {"mnist-conv1": (64, 1, 28, 28, 8), "mnist-conv2": (64, 8, 14, 14, 16), "resnet": (64, 64, 56, 56, 64)}
SMALL_SHAPES = {"mnist-conv1": (2, 1, 28, 28, 8), "mnist-conv2": (2, 8, 14, 14, 16), "resnet": (1, 8, 14, 14, 8)}
SOFTMAX_SHAPES = [(1 << 16, 10), (1 << 16, 128), (1 << 14, 1024), (4096, 8192)]
SMALL_SOFTMAX_SHAPES = [(64, 10), (16, 1500)]
RUNGS = {"forward": ("direct", "im2col", "tiled", "igemm", "winograd", "winograd4", "best"),
         "backward_input": ("direct", "im2col", "tiled", "igemm", "winograd", "winograd4", "best"),
         "backward_weight": ("direct", "im2col", "tiled", "igemm", "best")}


class Timer:
    """GPU: the grader's CUDA-event timing (L2 flushed, host overhead hidden). Small mode: the host clock."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu

    def __call__(self, fn: Callable[[], Any], max_seconds: float = 0.3) -> float:
        if self.gpu:
            return time_gpu(fn, max_seconds=max_seconds)
        fn()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def conv_rows(shapes: dict, timer: Timer, gpu: bool) -> list[dict]:
    from minitorch.kernels import load_module

    cv = load_module("conv.py")
    return [row for name, shape in shapes.items() for row in _conv_shape(cv, name, shape, timer, gpu)]


def _conv_shape(cv: Any, name: str, shape: tuple, timer: Timer, gpu: bool) -> list[dict]:
    import torch

    from minitorch import backend

    n, c, h, w, k = shape
    dev = "cuda" if gpu else "cpu"
    rows: list[dict] = []
    gen = torch.Generator(device=dev).manual_seed(0)
    xt, wt = torch.randn(n, c, h, w, device=dev, generator=gen), torch.randn(k, c, 3, 3, device=dev, generator=gen)
    bt, dyt = torch.randn(k, device=dev, generator=gen), torch.randn(n, k, h, w, device=dev, generator=gen)
    x, wc, b, dy = (to_device(t, gpu) for t in (xt, wt, bt, dyt))
    y, dx, dw, db = (backend.empty(s) for s in ((n, k, h, w), (n, c, h, w), (k, c, 3, 3), (k,)))
    flop = 2.0 * n * k * h * w * c * 9
    grad = torch.nn.grad
    reference = {
        "forward": (lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1), y),
        "backward_input": (lambda: grad.conv2d_input(xt.shape, wt, dyt, padding=1), dx),
        "backward_weight": (lambda: grad.conv2d_weight(xt, wt.shape, dyt, padding=1), dw),
        "backward_bias": (lambda: dyt.sum(dim=(0, 2, 3)), db),
    }
    ours = {
        "forward": lambda v: cv.conv2d(x, wc, b, y, 1, 1, v),
        "backward_input": lambda v: cv.conv2d_backward_input(dy, wc, dx, 1, 1, v),
        "backward_weight": lambda v: cv.conv2d_backward_weight(x, dy, dw, 1, 1, v),
        "backward_bias": lambda v: cv.conv2d_bias_grad(dy, db),
    }
    for pass_, (theirs, out) in reference.items():
        work = n * k * h * w if pass_ == "backward_bias" else flop
        expected = theirs().double().cpu().numpy()
        t_ref = timer(theirs)
        rows.append({"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": pass_,
                     "variant": "cudnn", "seconds": t_ref, "gflops": work / t_ref / 1e9, "ratio": 1.0})
        for variant in RUNGS.get(pass_, ("best",)):
            ours[pass_](variant)
            got = backend.asnumpy(out).astype(np.float64)
            scale = float(np.abs(expected).max()) or 1.0
            error = float(np.abs(got - expected).max()) / scale
            if not error <= 1e-4:
                raise AssertionError(f"{name} {pass_} {variant}: relative error {error:.2e} against PyTorch")
            seconds = timer(lambda v=variant, p=pass_: ours[p](v), max_seconds=0.5)
            rows.append({"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": pass_,
                         "variant": variant, "seconds": seconds, "gflops": work / seconds / 1e9,
                         "ratio": t_ref / seconds})
        line = "  ".join(f"{r['variant']} {r['ratio']:.2f}" for r in rows if r["shape"] == name
                         and r["pass"] == pass_ and r["variant"] != "cudnn")
        print(f"{name:>12} {pass_:>15}: cuDNN {t_ref * 1e6:9.1f} us; x cuDNN: {line}", flush=True)
    # conv.py's autotune() on this layer, then `best` again: it runs the rung autotune() found fastest
    cv.autotune([(n, c, h, w, k, 3, 3, 1, 1)], verbose=False, timer=None if gpu else timer)
    shape = cv.conv_shape((n, c, h, w), (k, c, 3, 3), 1, 1)
    for pass_, kind in (("forward", "forward"), ("backward_input", "input"), ("backward_weight", "weight")):
        theirs, out = reference[pass_]
        expected = theirs().double().cpu().numpy()
        ours[pass_]("best")
        error = float(np.abs(backend.asnumpy(out).astype(np.float64) - expected).max())
        if not error <= 1e-4 * (float(np.abs(expected).max()) or 1.0):
            raise AssertionError(f"{name} {pass_} best after autotune: error {error:.2e} against PyTorch")
        seconds = timer(lambda p=pass_: ours[p]("best"), max_seconds=0.5)
        t_ref = next(r["seconds"] for r in rows if r["pass"] == pass_ and r["variant"] == "cudnn")
        rows.append({"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": pass_,
                     "variant": "best_tuned", "tuned": cv.best(kind, shape, 1), "seconds": seconds,
                     "gflops": flop / seconds / 1e9, "ratio": t_ref / seconds})
        print(f"{name:>12} {pass_:>15}: best after autotune() ({rows[-1]['tuned']}) {rows[-1]['ratio']:.2f} x cuDNN",
              flush=True)
    return rows


def maxpool_rows(shapes: dict, timer: Timer, gpu: bool) -> list[dict]:
    from minitorch.kernels import load_module

    mp = load_module("maxpool.py")
    return [row for name, shape in shapes.items() for row in _maxpool_shape(mp, name, shape, timer, gpu)]


def _maxpool_shape(mp: Any, name: str, shape: tuple, timer: Timer, gpu: bool) -> list[dict]:
    import torch

    from minitorch import backend

    n, _, h, w, k = shape
    dev = "cuda" if gpu else "cpu"
    rows: list[dict] = []
    xt = torch.randn(n, k, h, w, device=dev, generator=torch.Generator(device=dev).manual_seed(1))
    xt.requires_grad_(True)
    yt, index = torch.nn.functional.max_pool2d(xt, 2, return_indices=True)
    dyt = torch.ones_like(yt)
    x, dy = to_device(xt.detach(), gpu), to_device(dyt, gpu)
    y, at, dx = backend.empty(yt.shape), backend.empty(yt.shape, np.int32), backend.empty(xt.shape)
    mp.max_pool2d(x, y, at, 2)
    mp.max_pool2d_backward(dy, at, dx, 2)
    assert np.array_equal(backend.asnumpy(y), yt.detach().cpu().numpy()), name
    assert np.array_equal(backend.asnumpy(at), index.cpu().numpy()), name  # the same first-maximum rule
    nbytes = {"forward": 4 * (xt.numel() + 2 * yt.numel()), "backward": 4 * (xt.numel() + 2 * yt.numel())}
    cases = {"forward": (lambda: mp.max_pool2d(x, y, at, 2),
                         lambda: torch.nn.functional.max_pool2d(xt.detach(), 2, return_indices=True)),
             "backward": (lambda: mp.max_pool2d_backward(dy, at, dx, 2),
                          lambda: torch.ops.aten.max_pool2d_with_indices_backward(dyt, xt.detach(), [2, 2],
                                                                                  [2, 2], [0, 0], [1, 1], False,
                                                                                  index))}
    for pass_, (ours, theirs) in cases.items():
        t_ref, t_ours = timer(theirs), timer(ours)
        rows.append({"kind": "maxpool", "shape": name, "n": n, "c": k, "h": h, "w": w, "pass": pass_,
                     "bytes": nbytes[pass_], "seconds": t_ours, "reference_seconds": t_ref,
                     "gbps": nbytes[pass_] / t_ours / 1e9, "ratio": t_ref / t_ours})
        print(f"maxpool {name:>12} {pass_:>8}: {t_ours * 1e6:8.1f} us, {t_ref / t_ours:.2f} x PyTorch", flush=True)
    return rows


def softmax_rows(shapes: list, timer: Timer, gpu: bool) -> list[dict]:
    from minitorch.kernels import load_module

    sm = load_module("softmax.py")
    rng = np.random.default_rng(2)
    return [row for r, c in shapes for row in _softmax_shape(sm, rng, r, c, timer, gpu)]


def _softmax_shape(sm: Any, rng: np.random.Generator, r: int, c: int, timer: Timer, gpu: bool) -> list[dict]:
    from minitorch import backend

    rows: list[dict] = []
    x_h = (rng.standard_normal((r, c)) * 3).astype(np.float32)
    t_h = rng.integers(0, c, r).astype(np.int32)
    x, t = backend.asarray(x_h), backend.asarray(t_h)
    y, g, loss = backend.empty((r, c)), backend.empty((r, c)), backend.empty((1,))
    sm.softmax(x, y)
    e = np.exp(x_h - x_h.max(axis=1, keepdims=True))
    assert np.allclose(backend.asnumpy(y), e / e.sum(axis=1, keepdims=True), atol=1e-6)
    if gpu:
        import cupy

        dst = cupy.empty_like(x)
        t_copy = timer(lambda: cupy.copyto(dst, x))
    else:
        dst = np.empty_like(x_h)
        t_copy = timer(lambda: np.copyto(dst, x_h))
    copy_gbps = 8 * x_h.size / t_copy / 1e9
    cases = {"softmax": (lambda: sm.softmax(x, y), 8 * x_h.size),
             "cross_entropy": (lambda: (sm.cross_entropy(x, t, loss), sm.cross_entropy_backward(x, t, g)),
                               12 * x_h.size)}  # forward reads x; backward reads x, writes the gradient
    for op, (fn, nbytes) in cases.items():
        seconds = timer(fn)
        layout = "warp" if c <= 1024 else "block"
        rows.append({"kind": "softmax", "op": op, "rows": r, "cols": c, "layout": layout, "bytes": nbytes,
                     "seconds": seconds, "gbps": nbytes / seconds / 1e9, "copy_gbps": copy_gbps,
                     "ratio": nbytes / seconds / 1e9 / copy_gbps})
        print(f"{op:>13} {r} x {c} ({layout} per row): {nbytes / seconds / 1e9:8.1f} GB/s = "
              f"{rows[-1]['ratio']:.2f} x copy", flush=True)
    return rows


def to_device(t: Any, gpu: bool) -> Any:
    """A torch tensor's values as a device array of the active backend (zero-copy on a GPU)."""
    from minitorch import backend

    if gpu:
        import cupy

        return cupy.asarray(t.detach().contiguous())
    return backend.asarray(np.ascontiguousarray(t.detach().numpy(), dtype=np.float32))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="the emulator, small shapes, PyTorch on the CPU")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results, or a temporary one "
                                      "with --small)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    import torch

    import minitorch
    from minitorch.kernels import write_source

    gpu = not args.small
    minitorch.set_device("cuda" if gpu else "emu")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    device = gpu_name() if gpu else emulator_name()
    print(f"device: {device}; PyTorch {torch.__version__} on {'cuda' if gpu else 'cpu'}")
    timer = Timer(gpu)
    shapes = SHAPES if gpu else SMALL_SHAPES
    rows = conv_rows(shapes, timer, gpu) + maxpool_rows(shapes, timer, gpu)
    rows += softmax_rows(SOFTMAX_SHAPES if gpu else SMALL_SOFTMAX_SHAPES, timer, gpu)
    out = Path(args.out) if args.out else (RESULTS if gpu else Path(tempfile.mkdtemp(prefix="phase6-bench-")))
    import common

    common.RESULTS = out
    write_results("phase6_conv", device, rows, torch=torch.__version__, tf32=False, cudnn_benchmark=True,
                  mode="small" if args.small else "full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
