"""Phase 6: the rounding error of each forward rung of the convolution against float64, Winograd's included.

Runs the reference solution's conv.py on the emulator (default) or a GPU (``--gpu``), on layers of the course's
shapes with fewer images, and compares every rung's float32 result with NumPy's float64 convolution. Two
measures per rung:

- ``max_rel``: the largest error over the largest |output|;
- ``eps_of_scale``: the largest error of an output over Σ|w·x| of its own window (the size of the products a
  float32 sum of that output rounds), in units of float32's epsilon (2^-23);
- ``bitwise_equal_to_direct``: whether the rung's float32 outputs are the direct rung's, bit for bit (the same
  products summed in the same order).

For Winograd F(2x2, 3x3) (``winograd``) and F(4x4, 3x3) (``winograd4``) also ``winograd_scale``: the median,
over the outputs, of the algorithm's own scale, |Aᵀ| (Σ_c (|G| |g| |Gᵀ|) ⊙ (|Bᵀ| |d| |B|)) |A| with its own
matrices, over Σ|w·x|: how much larger the values it rounds are.
Writes ``benchmarks/results/phase6_conv_error-<device>.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
from common import emulator_name, gpu_name, solution_sources, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn")
# name: (N, C, H, W, K), 3 x 3 filters, stride 1, padding 1: the benchmark's layers with fewer images
LAYERS = {"mnist-conv2": (4, 8, 14, 14, 16), "resnet": (1, 64, 28, 28, 64)}
RUNGS = ("direct", "tiled", "igemm", "winograd", "winograd4")
EPS32 = float(np.finfo(np.float32).eps)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)
G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64)
AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
               dtype=np.float64)
WINOGRAD = {"winograd": (2, G, BT, AT), "winograd4": (4, G4, BT4, AT4)}  # rung: (tile, G, B^T, A^T)


def conv64(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    return np.einsum("ncpqrs,kcrs->nkpq", win, w, optimize=True)


def winograd_scale(x: np.ndarray, w: np.ndarray, pad: int, rung: str = "winograd") -> np.ndarray:
    """|A^T| (sum over c of (|G||g||G^T|) * (|B^T||d||B|)) |A|, (N, K, P, Q): what Winograd rounds."""
    tile, g, bt, at = WINOGRAD[rung]
    n, c, h, wd = x.shape
    p, q = h + 2 * pad - 2, wd + 2 * pad - 2
    tp, tq = (p + tile - 1) // tile, (q + tile - 1) // tile
    xp = np.zeros((n, c, tile * tp + 2, tile * tq + 2))
    rows, cols = min(h, tile * tp + 2 - pad), min(wd, tile * tq + 2 - pad)
    xp[:, :, pad:pad + rows, pad:pad + cols] = np.abs(x[:, :, :rows, :cols])
    d = np.lib.stride_tricks.sliding_window_view(xp, (tile + 2, tile + 2), axis=(2, 3))[:, :, ::tile, ::tile]
    u = np.abs(g) @ np.abs(w) @ np.abs(g).T
    v = np.abs(bt) @ d @ np.abs(bt).T
    m = np.einsum("kcab,nctuab->nktuab", u, v, optimize=True)
    y = np.abs(at) @ m @ np.abs(at).T
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, tile * tp, tile * tq)[:, :, :p, :q]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpu", action="store_true", help="run the rungs on the GPU (default: the emulator)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    import minitorch
    from minitorch import backend
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("cuda" if args.gpu else "emu")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    cv = load_module("conv.py")
    rng = np.random.default_rng(0)
    rows = []
    for name, (n, c, h, wd, k) in LAYERS.items():
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        ref = conv64(x.astype(np.float64), w.astype(np.float64), 1)
        scale = conv64(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)), 1)
        wscale = {rung: float(np.median(winograd_scale(x.astype(np.float64), w.astype(np.float64), 1, rung) / scale))
                  for rung in WINOGRAD}
        xd, wdv, b = backend.asarray(x), backend.asarray(w), backend.zeros((k,))
        direct = None
        for rung in RUNGS:
            y = backend.empty(ref.shape)
            cv.conv2d(xd, wdv, b, y, 1, 1, rung)
            got = backend.asnumpy(y)
            direct = got if direct is None else direct
            err = np.abs(got.astype(np.float64) - ref)
            row = {"layer": name, "n": n, "c": c, "h": h, "w": wd, "k": k, "rung": rung,
                   "max_rel": float(err.max() / np.abs(ref).max()),
                   "eps_of_scale": float((err / scale).max() / EPS32),
                   "mean_eps_of_scale": float((err / scale).mean() / EPS32),
                   "bitwise_equal_to_direct": bool(np.array_equal(got, direct))}
            if rung in WINOGRAD:
                row["winograd_scale"] = wscale[rung]
            rows.append(row)
            print(f"{name:>12} {rung:>9}: largest error {row['max_rel']:.2e} of the largest output, "
                  f"{row['eps_of_scale']:.2f} eps (mean {row['mean_eps_of_scale']:.3f}) of sum |w x|"
                  + (f"; Winograd's own scale {wscale[rung]:.2f} x sum |w x|" if rung in WINOGRAD else ""),
                  flush=True)
    device = gpu_name() if args.gpu else emulator_name()
    write_results("phase6_conv_error", device, rows, eps32=EPS32)
    return 0


if __name__ == "__main__":
    sys.exit(main())
