"""Phase 6: how the split of the convolution's weight and bias gradients sets their speed, against cuDNN.

conv.py cuts the weight gradient's long reduction over the N·P·Q positions into chunks (about SPLIT_BLOCKS blocks
in all, each reducing at least MIN_CHUNK positions) and the bias gradient's into pieces of at least BIAS_MIN
values. This script times the reference launchers on the benchmark's three layers (64 images; 3 x 3, padding 1)
for a grid of those constants, the weight gradient on its two split rungs (``igemm``, ``tiled``), and writes
``benchmarks/results/phase6_conv_sweep-<gpu>.json``: rows of ``shape``, ``pass`` (``weight``, ``bias``),
``variant``, the constants, ``seconds`` and ``ratio`` (cuDNN's time / ours, TF32 off). GPU only.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn")
SHAPES = {"mnist-conv2": (64, 8, 14, 14, 16), "mnist-conv1": (64, 1, 28, 28, 8), "resnet": (64, 64, 56, 56, 64)}
BIAS_MINS = (2048, 8192, 32768, 1 << 20)
SPLITS = (1024, 2048, 4096)
CHUNKS = (64, 128, 256)


def _shape_rows(cv: Any, name: str, shape: tuple) -> list[dict]:
    import torch

    from minitorch import backend

    n, c, h, w, k = shape
    defaults = cv.SPLIT_BLOCKS, cv.MIN_CHUNK, cv.BIAS_MIN
    rng = np.random.default_rng(0)
    x, wt, dy = (backend.asarray(rng.standard_normal(s).astype(np.float32))
                 for s in ((n, c, h, w), (k, c, 3, 3), (n, k, h, w)))
    xt, wtt, dyt = (torch.as_tensor(a, device="cuda") for a in (x, wt, dy))
    dw, db = backend.empty(wt.shape), backend.empty((k,))
    ref_w = time_gpu(lambda: torch.nn.grad.conv2d_weight(xt, wtt.shape, dyt, padding=1))
    ref_b = time_gpu(lambda: dyt.sum(dim=(0, 2, 3)))
    rows = []
    for bias_min in BIAS_MINS:
        cv.BIAS_MIN = bias_min
        t = time_gpu(lambda: cv.conv2d_bias_grad(dy, db), max_seconds=0.1)
        rows.append({"shape": name, "pass": "bias", "bias_min": bias_min, "seconds": t, "ratio": ref_b / t})
    cv.BIAS_MIN = defaults[2]
    for split in SPLITS:
        for chunk in CHUNKS:
            cv.SPLIT_BLOCKS, cv.MIN_CHUNK = split, chunk
            for v in ("igemm", "tiled"):
                t = time_gpu(lambda v=v: cv.conv2d_backward_weight(x, dy, dw, 1, 1, v), max_seconds=0.1)
                rows.append({"shape": name, "pass": "weight", "variant": v, "split_blocks": split,
                             "min_chunk": chunk, "seconds": t, "ratio": ref_w / t})
    cv.SPLIT_BLOCKS, cv.MIN_CHUNK = defaults[:2]
    for r in rows:
        print(r, flush=True)
    return rows


def main() -> int:
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    import torch

    import minitorch
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("cuda")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    cv = load_module("conv.py")
    rows = [row for name, shape in SHAPES.items() for row in _shape_rows(cv, name, shape)]
    write_results("phase6_conv_sweep", gpu_name(), rows, torch=torch.__version__, tf32=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
