"""Phase 8a: which rung hgemm.py's variant="best" should run, measured through the lab's launcher on a GPU.

For each shape (bf16 operands, float32 output, as autocast's products): the seconds of variant "pipeline" (rung 5),
"wgmma" (rung 6, sm_90 only) and "best" (what ``best_variant`` picks), timed by the grader's CUDA-event timing, and
the rung "best" launched (counted). The data behind ``WGMMA_BEST_MIN_K`` in the lab's hgemm.py. Writes
``benchmarks/results/phase8a_best-<gpu>.json``; ``--out DIR`` writes there instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

# (name, M, K, N, transpose_a, transpose_b): the course's GPT at d_model 64 and 768 (B·T = 4096), the MNIST CNN
# under autocast (batch 64), and squares
SHAPES = [("gpt64_qkv_fwd", 4096, 64, 192, False, False), ("gpt64_fc_fwd", 4096, 64, 256, False, False),
          ("gpt64_proj_fwd", 4096, 256, 64, False, False), ("gpt64_fc_dx", 4096, 256, 64, False, True),
          ("k128", 4096, 128, 256, False, False), ("k256", 4096, 256, 256, False, False),
          ("gpt768_fc_fwd", 4096, 768, 3072, False, False), ("gpt768_fc_dw", 768, 4096, 3072, True, False),
          ("cnn_conv1_fwd", 8, 9, 50176, False, False), ("cnn_fc1_fwd", 64, 784, 64, False, False),
          ("square_1024", 1024, 1024, 1024, False, False), ("square_4096", 4096, 4096, 4096, False, False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, help="write the JSON into this directory")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import cupy

    import minitorch
    from minitorch import kernels
    from minitorch.kernels import write_source

    if not minitorch.cuda_available():
        print("no usable GPU", file=sys.stderr)
        return 1
    minitorch.set_device("cuda")
    for name, source in solution_sources("phase8a_tensor_cores.ipynb").items():
        write_source(name, source)
    hg = kernels.load_module("hgemm.py")
    sm90 = hg.has_sm90()
    rows = []
    for name, m, k, n, ta, tb in SHAPES:
        rs = cupy.random.RandomState(1)
        a = (rs.uniform(-1, 1, (k, m) if ta else (m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        b = (rs.uniform(-1, 1, (n, k) if tb else (k, n), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        out = cupy.empty((m, n), np.float32)
        row = {"shape": name, "m": m, "k": k, "n": n, "ta": ta, "tb": tb}
        for variant in ("wmma", "pipeline", "wgmma", "best") if sm90 else ("wmma", "pipeline", "best"):
            run = partial(hg.hgemm, a, b, out, "bfloat16", variant, transpose_a=ta, transpose_b=tb)
            row[f"{variant}_seconds"] = time_gpu(run, max_seconds=0.1, flush=False)
        kernels.reset_launch_counts()
        hg.hgemm(a, b, out, "bfloat16", "best", transpose_a=ta, transpose_b=tb)
        row["best_ran"] = ("wgmma" if kernels.launch_count(hg.WGMMA_FILE, hg.kernel_name("wgmma", "bf16", "float", ta,
                                                                                         tb)) else "pipeline")
        if sm90:
            row["wgmma_over_pipeline"] = row["wgmma_seconds"] / row["pipeline_seconds"]
        rows.append(row)
        print({key: (f"{v:.3g}" if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    if args.out:
        import common

        common.RESULTS = args.out
    write_results("phase8a_best", gpu_name(), rows, sm90=sm90, min_k=hg.WGMMA_BEST_MIN_K,
                  launcher="solutions/phase8a_tensor_cores.ipynb hgemm.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
