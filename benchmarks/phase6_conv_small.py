"""Phase 6: the small layers' input gradient and bias gradient, their launch parameters swept against cuDNN.

MNIST's second convolution (64 images, 8 -> 16 channels, 14 x 14, 3 x 3, padding 1) is a few tens of
microseconds of work: its time goes to launches, to a grid that fills the GPU or not, and to how often each
thread waits for memory, not to arithmetic. This benchmark measures, in one process and against PyTorch's
(cuDNN's, TF32 off) time for the same pass, the choices the launchers of ``conv.py`` make for such a layer:

- ``pass = "backward_input"``: the direct gather (``conv2d_backward_input``, one thread an element), and the
  tiled kernel ``conv2d_backward_input_tiled`` for ``ict`` (conv.cu's ``ICT``: input channels a block),
  ``istage`` (``ISTAGE``: rows of dy a thread loads before it stores them; the source is compiled once per
  pair), ``kgroup`` (channels of dy staged a step) and ``unroll_rs`` (an experiment: its r and s loops
  unrolled by 3);
- ``pass = "forward"``: rung 3, ``conv2d_tiled``, for ``ktile`` (conv.cu's ``KTILE``: output channels a
  block) and ``cgroup`` (``CGROUP``: input channels staged a step), against ``torch.nn.functional.conv2d``;
- ``pass = "backward_bias"``: ``conv2d_bias_grad`` with ``splits`` blocks a channel of ``threads`` threads
  (``chunk`` values each), plus ``splitk_reduce`` where ``splits > 1``; against ``dy.sum(dim=(0, 2, 3))``.

Rows: ``shape``, ``n, c, h, w, k``, ``pass``, ``variant`` (``cudnn``, ``direct``, ``tiled``, ``split``),
the parameters, ``seconds`` (the grader's CUDA-event timing, L2 flushed, host overhead hidden) and ``ratio``
(PyTorch's time / ours). Every configuration is checked against PyTorch before it is timed. Writes
``benchmarks/results/phase6_conv_small-<gpu>.json``. ``--quick`` measures MNIST's second layer only, and rung 3
with conv.cu's own KTILE and CGROUP. ``--small`` runs every line on the emulator with a
batch of 2 (PyTorch on the CPU, the host clock) and writes to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import RESULTS, emulator_name, gpu_name, solution_sources, write_results
from phase6_conv import LABS, Timer

SHAPES = {"mnist-conv1": (64, 1, 28, 28, 8), "mnist-conv2": (64, 8, 14, 14, 16), "resnet": (64, 64, 56, 56, 64)}
SMALL_SHAPES = {"mnist-conv1": (2, 1, 28, 28, 8), "mnist-conv2": (2, 8, 14, 14, 16)}
ICTS = (2, 4)
ISTAGES = (4, 8, 16)
# an experiment, not conv.cu's code: the tiled input gradient's r and s loops unrolled by 3 (a 3 x 3 filter's
# nine products without a loop test, their shared-memory loads issued together)
UNROLL_SITES = ("            for (int r = 0; r < R; ++r) {\n                const float* row = dy_tile",
                "                for (int s = 0; s < S; ++s) {\n                    float v = row[-s];")


def unrolled(source: str) -> str:
    for site in UNROLL_SITES:
        assert source.count(site) == 1, f"conv.cu has no single {site!r}"
        source = source.replace(site, "#pragma unroll 3\n" + site)
    return source
BIAS_CONFIGS = [(1, 1024), (1, 512), (1, 256), (2, 512), (4, 256), (8, 256), (16, 256), (32, 256)]


def _ints(*values: int) -> tuple:
    return tuple(np.int32(v) for v in values)


def _check(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.abs(expected).max()) or 1.0
    error = float(np.abs(got.astype(np.float64) - expected).max()) / scale
    if not error <= 1e-4:
        raise AssertionError(f"{name}: relative error {error:.2e} against PyTorch")


def _reference(torch, gpu: bool, expected_fn, theirs_fn, timer: Timer) -> tuple:
    """(expected float64 result, PyTorch's seconds or None): PyTorch's where it is installed, else NumPy's."""
    if torch is None:
        return expected_fn(), None
    return theirs_fn().double().cpu().numpy(), timer(theirs_fn)


def _ref_input(dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dx of a 3 x 3 convolution at stride 1, padding 1, in float64."""
    n, k, h, wd = dy.shape
    dyp = np.pad(dy.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    rot = w[:, :, ::-1, ::-1].astype(np.float64)
    win = np.lib.stride_tricks.sliding_window_view(dyp, (3, 3), axis=(2, 3))
    return np.einsum("nkhwrs,kcrs->nchw", win, rot, optimize=True)


def _row(base: dict, t_ref: float | None, seconds: float, **params) -> dict:
    return {**base, **params, "seconds": seconds, "ratio": t_ref / seconds if t_ref else None}


def input_rows(name: str, shape: tuple, timer: Timer, gpu: bool, conv_source: str, torch) -> list[dict]:
    from minitorch import backend
    from minitorch.kernels import load_kernel, write_source

    n, c, h, w, k = shape
    rng = np.random.default_rng(0)
    w_h, dy_h = rng.standard_normal((k, c, 3, 3), np.float32), rng.standard_normal((n, k, h, w), np.float32)
    wc, dy = backend.asarray(w_h), backend.asarray(dy_h)
    dx = backend.empty((n, c, h, w))
    if torch is not None:
        wt, dyt = (torch.as_tensor(a, device="cuda" if gpu else "cpu") for a in (w_h, dy_h))
    expected, t_ref = _reference(torch, gpu, lambda: _ref_input(dy_h, w_h),
                                 lambda: torch.nn.grad.conv2d_input((n, c, h, w), wt, dyt, padding=1), timer)
    base = {"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": "backward_input"}
    rows = [] if t_ref is None else [_row(base, t_ref, t_ref, variant="cudnn")]
    sizes = _ints(n, c, h, w, k, 3, 3, 1, 1, h, w)
    direct = load_kernel("conv.cu", "conv2d_backward_input")
    blocks = max(1, min((dx.size + 255) // 256, 16384))
    run = lambda: direct((blocks,), (256,), (dy, wc, dx, *sizes))  # noqa: E731
    run()
    _check(f"{name} direct", backend.asnumpy(dx), expected)
    seconds = timer(run)
    rows.append(_row(base, t_ref, seconds, variant="direct"))
    print(f"{name} input: cuDNN {(t_ref or 0) * 1e6:.1f} us, direct {seconds * 1e6:.1f} us", flush=True)
    configs = [(i, s, False) for i in ICTS for s in ISTAGES] + [(i, 8, True) for i in ICTS]
    for ict, istage, unroll in configs:
        source, count = re.subn(r"#define ICT \d+", f"#define ICT {ict}", conv_source)
        source, count2 = re.subn(r"#define ISTAGE \d+", f"#define ISTAGE {istage}", source)
        assert count == count2 == 1, "conv.cu defines ICT and ISTAGE once"
        write_source("conv.cu", unrolled(source) if unroll else source)
        tiled = load_kernel("conv.cu", "conv2d_backward_input_tiled")
        tiles = ((h + 15) // 16) * ((w + 15) // 16)
        for kgroup in sorted({k, max(1, k // 2)}, reverse=True):
            smem = 4 * kgroup * (18 * 18 + 9 * ict)
            if smem > 48 * 1024:
                continue
            dx = backend.asarray(np.full((n, c, h, w), np.nan, np.float32))  # poisoned: every value written?

            def run(kgroup=kgroup, smem=smem, ict=ict, dx=dx, tiled=tiled, tiles=tiles):
                tiled((tiles, (c + ict - 1) // ict, n), (16, 16), (dy, wc, dx, *sizes, np.int32(kgroup)),
                      shared_mem=smem)
            run()
            _check(f"{name} tiled ict {ict} kgroup {kgroup}", backend.asnumpy(dx), expected)
            seconds = timer(run)
            rows.append(_row(base, t_ref, seconds, variant="tiled", ict=ict, istage=istage, kgroup=kgroup,
                             unroll_rs=unroll))
            print(f"{name} input: tiled ict {ict} istage {istage} kgroup {kgroup}{' unroll 3' if unroll else ''}: "
                  f"{seconds * 1e6:.1f} us", flush=True)
    write_source("conv.cu", conv_source)
    return rows


def _ref_forward(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y of a 3 x 3 convolution at stride 1, padding 1, in float64 (no bias)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return np.einsum("nchwrs,kcrs->nkhw", win, w.astype(np.float64), optimize=True)


def forward_rows(name: str, shape: tuple, timer: Timer, gpu: bool, conv_source: str, torch,
                 quick: bool = False) -> list[dict]:
    """Rung 3 (conv2d_tiled) for KTILE output channels a block and CGROUP input channels a step (quick: conv.cu's
    own), and rung 5 (Winograd F(2x2, 3x3)) through conv.py."""
    from minitorch import backend
    from minitorch.kernels import load_kernel, write_source

    n, c, h, w, k = shape
    rng = np.random.default_rng(2)
    x_h, w_h = rng.standard_normal((n, c, h, w), np.float32), rng.standard_normal((k, c, 3, 3), np.float32)
    x, wc, b = backend.asarray(x_h), backend.asarray(w_h), backend.zeros((k,))
    if torch is not None:
        xt, wt = (torch.as_tensor(a, device="cuda" if gpu else "cpu") for a in (x_h, w_h))
    expected, t_ref = _reference(torch, gpu, lambda: _ref_forward(x_h, w_h),
                                 lambda: torch.nn.functional.conv2d(xt, wt, padding=1), timer)
    base = {"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": "forward"}
    rows = [] if t_ref is None else [_row(base, t_ref, t_ref, variant="cudnn")]
    sizes = _ints(n, c, h, w, k, 3, 3, 1, 1, h, w)
    tiles = ((h + 15) // 16) * ((w + 15) // 16)
    for ktile in (2, 4, 8):
        for cgroup in (4, 8):
            own = re.search(rf"#define KTILE {ktile}\n#define CGROUP {cgroup}\n", conv_source) is not None
            if quick and not own:
                continue
            source = re.sub(r"#define KTILE \d+", f"#define KTILE {ktile}", conv_source)
            write_source("conv.cu", re.sub(r"#define CGROUP \d+", f"#define CGROUP {cgroup}", source))
            tiled = load_kernel("conv.cu", "conv2d_tiled")
            y = backend.asarray(np.full((n, k, h, w), np.nan, np.float32))

            def run(ktile=ktile, cgroup=cgroup, tiled=tiled, y=y):
                tiled((tiles, (k + ktile - 1) // ktile, n), (16, 16), (x, wc, b, y, *sizes),
                      shared_mem=4 * cgroup * (18 * 18 + ktile * 9))
            run()
            _check(f"{name} forward tiled ktile {ktile} cgroup {cgroup}", backend.asnumpy(y), expected)
            seconds = timer(run)
            rows.append(_row(base, t_ref, seconds, variant="tiled", ktile=ktile, cgroup=cgroup))
            print(f"{name} forward: tiled ktile {ktile} cgroup {cgroup}: {seconds * 1e6:.1f} us", flush=True)
    write_source("conv.cu", conv_source)
    from minitorch.kernels import load_module

    cv = load_module("conv.py")
    y = backend.asarray(np.full((n, k, h, w), np.nan, np.float32))
    cv.conv2d(x, wc, b, y, 1, 1, "winograd")
    _check(f"{name} forward winograd", backend.asnumpy(y), expected)
    seconds = timer(lambda: cv.conv2d(x, wc, b, y, 1, 1, "winograd"))
    rows.append(_row(base, t_ref, seconds, variant="winograd"))
    print(f"{name} forward: winograd {seconds * 1e6:.1f} us", flush=True)
    return rows


def bias_rows(name: str, shape: tuple, timer: Timer, gpu: bool, torch) -> list[dict]:
    from minitorch import backend
    from minitorch.kernels import load_kernel

    n, c, h, w, k = shape
    dy_h = np.random.default_rng(1).standard_normal((n, k, h, w), np.float32)
    dy = backend.asarray(dy_h)
    if torch is not None:
        dyt = torch.as_tensor(dy_h, device="cuda" if gpu else "cpu")
    expected, t_ref = _reference(torch, gpu, lambda: dy_h.astype(np.float64).sum(axis=(0, 2, 3)),
                                 lambda: dyt.sum(dim=(0, 2, 3)), timer)
    base = {"kind": "conv", "shape": name, "n": n, "c": c, "h": h, "w": w, "k": k, "pass": "backward_bias"}
    rows = [] if t_ref is None else [_row(base, t_ref, t_ref, variant="cudnn")]
    kernel, reduce = load_kernel("conv.cu", "conv2d_bias_grad"), load_kernel("conv.cu", "splitk_reduce")
    total = n * h * w
    for splits, threads in BIAS_CONFIGS:
        db = backend.asarray(np.full(k, np.nan, np.float32))
        chunk = max(4, ((total + splits - 1) // splits + 3) // 4 * 4)
        splits = max(1, (total + chunk - 1) // chunk)
        partial = db if splits == 1 else backend.empty((splits, k))

        def run(splits=splits, threads=threads, chunk=chunk, partial=partial, db=db):
            kernel((k, splits), (threads,), (dy, partial, *_ints(n, k, h * w, chunk)))
            if splits > 1:
                reduce((1,), (256,), (partial, db, np.int32(splits), np.int64(k)))
        run()
        _check(f"{name} bias {splits} x {threads}", backend.asnumpy(db), expected)
        seconds = timer(run)
        rows.append(_row(base, t_ref, seconds, variant="split", splits=splits, threads=threads, chunk=chunk))
        print(f"{name} bias: cuDNN {(t_ref or 0) * 1e6:.1f} us; {splits} x {threads} threads (chunk {chunk}): "
              f"{seconds * 1e6:.1f} us", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="the emulator, batch 2, PyTorch on the CPU")
    parser.add_argument("--quick", action="store_true", help="MNIST's second layer only; rung 3 as conv.cu has it")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results; a temporary one "
                                      "with --small)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    try:
        import torch
    except ImportError:  # --small without PyTorch: NumPy's float64 results, no cuDNN rows
        if not args.small:
            raise
        torch = None

    import minitorch
    from minitorch.kernels import write_source

    gpu = not args.small
    minitorch.set_device("cuda" if gpu else "emu")
    sources = {}
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
            sources[name] = text
    if torch is not None:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    device = gpu_name() if gpu else emulator_name()
    print(f"device: {device}; PyTorch {torch.__version__ if torch else 'none'}")
    timer = Timer(gpu)
    rows: list[dict] = []
    for name, shape in (SHAPES if gpu else SMALL_SHAPES).items():
        if args.quick and name != "mnist-conv2":
            continue
        if name != "resnet":
            rows += input_rows(name, shape, timer, gpu, sources["conv.cu"], torch)
            rows += forward_rows(name, shape, timer, gpu, sources["conv.cu"], torch, args.quick)
        rows += bias_rows(name, shape, timer, gpu, torch)
    import common

    common.RESULTS = Path(args.out) if args.out else (RESULTS if gpu else Path(tempfile.mkdtemp(prefix="p6s-")))
    write_results("phase6_conv_small", device, rows, torch=torch.__version__ if torch else None, tf32=False,
                  cudnn_benchmark=True,
                  mode="small" if args.small else "full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
