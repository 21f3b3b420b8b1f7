"""Phase 5: which of rung 9's tile configurations (and split-K counts) is fastest for each kind of product.

The data behind ``DEFAULT_TILES``, ``SPLIT_BLOCKS_PER_SM`` and ``SPLIT_MIN_DEPTH`` in the reference
``gemm.py``: what ``variant="best"`` runs before ``autotune()`` has run on a GPU. Every configuration of
``gemm.candidates("double_buffered")`` is timed (CUDA events, median, L2 flushed: the grader's timing) on

- square products 512³ … 4096³ (the ladder's sizes);
- the products of a training step of Phase 7's GPT (batch 64 × context 64 = 4096 rows, d_model 64): the
  forward X·W, dX = dY·Wᵀ (B transposed) and dW = Xᵀ·dY (A transposed, K = 4096: also with split-K);

and cuBLAS (``cupy.matmul``, transposed operands as views) on the same product. Each result is checked
against cuBLAS. Also the rule's own choice (``variant="best"`` without a tuning file) on each product.
Writes ``benchmarks/results/phase5_gemm_defaults-<device>.json``. GPU only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import partial

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

SQUARES = (512, 1024, 2048, 4096)
# (M, N, K, transpose_a, transpose_b) of the GPT's products: d_model 64, 3 x 64 for Q | K | V, 4 x 64 inside
# the MLP, 65 characters; 4096 rows
ROWS, C = 4096, 64
GPT = sorted({(ROWS, n, k, False, False) for k, n in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, 65))}
             | {(ROWS, k, n, False, True) for k, n in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, 65))}
             | {(k, n, ROWS, True, False) for k, n in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, 65))})
SPLITS = (1, 2, 4, 8, 16, 32, 64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a check of the script)")
    parser.add_argument("--chosen-only", action="store_true",
                        help="time only the configurations of DEFAULT_TILES and rung 9's DEFAULT_CONFIG (every "
                             "split): the rule's choices against the old default, without the full search")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-gemm-defaults-")
    import minitorch
    from minitorch import kernels

    if not minitorch.cuda_available():
        print("this benchmark needs a GPU", file=sys.stderr)
        return 1
    minitorch.set_device("cuda")
    import cupy

    for name, text in solution_sources("phase5_fast.ipynb").items():
        kernels.write_source(name, text)
    gm = kernels.load_module("gemm.py")
    configs = gm.candidates("double_buffered")
    if args.chosen_only:
        chosen_configs = {tuple(c) for _, c in gm.DEFAULT_TILES} | {tuple(gm.DEFAULT_CONFIG["double_buffered"])}
        configs = [c for c in configs if tuple(c) in chosen_configs]
    problems = [(s, s, s, False, False) for s in (SQUARES[:2] if args.quick else SQUARES)] + GPT
    # every instantiation compiled in one go
    names = tuple(gm.kernel_name("double_buffered", c, ta, tb) for c in configs
                  for ta, tb in {(p[3], p[4]) for p in problems})
    gm.load(names[0], names)
    rng = np.random.default_rng(0)
    rows = []
    for m, n, k, ta, tb in problems:
        a = cupy.asarray(rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32))
        b = cupy.asarray(rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32))
        out = cupy.empty((m, n), np.float32)
        expected = cupy.matmul(a.T if ta else a, b.T if tb else b)
        scale = float(cupy.abs(expected).max())
        flops = 2.0 * m * n * k
        op_a, op_b = (a.T if ta else a), (b.T if tb else b)
        cublas = time_gpu(partial(cupy.matmul, op_a, op_b, out=out), max_seconds=0.1)
        shape = {"M": m, "N": n, "K": k, "transpose_a": ta, "transpose_b": tb, "cublas_seconds": cublas}
        trials = [(c, s) for c in configs for s in (SPLITS if ta and not tb else (1,))]
        for config, splits in trials:
            call = partial(gm.gemm, a, b, out, "double_buffered", transpose_a=ta, transpose_b=tb, config=config,
                           splits=splits)
            out.fill(np.nan)
            call()
            error = float(cupy.abs(out - expected).max()) / scale
            if not error <= 1e-4:
                raise AssertionError(f"{config}, {splits} splits, {shape}: error {error:.3g}")
            seconds = time_gpu(call, max_seconds=0.1)
            rows.append({**shape, "kind": "trial", "config": list(config), "splits": splits, "seconds": seconds,
                         "gflops": flops / seconds / 1e9, "ratio": cublas / seconds})
        gm._best.clear()
        chosen = gm.best(m, n, ta or tb)
        splits = gm.split_k(m, n, k, chosen[1], ta, tb) if chosen[0] == "double_buffered" else 1
        best = time_gpu(partial(gm.gemm, a, b, out, "best", transpose_a=ta, transpose_b=tb), max_seconds=0.1)
        mine = [r for r in rows if r["kind"] == "trial" and (r["M"], r["N"], r["K"], r["transpose_a"],
                                                             r["transpose_b"]) == (m, n, k, ta, tb)]
        fastest = min(mine, key=lambda r: r["seconds"])
        rows.append({**shape, "kind": "best", "config": list(chosen[1]), "splits": splits, "seconds": best,
                     "ratio": cublas / best, "fastest_config": fastest["config"],
                     "fastest_splits": fastest["splits"], "fastest_ratio": fastest["ratio"]})
        print(f"{m} x {n} x {k}{' Aᵀ' if ta else ''}{' Bᵀ' if tb else ''}: cuBLAS {cublas * 1e6:.1f} us; fastest "
              f"{fastest['config']} x{fastest['splits']} {fastest['seconds'] * 1e6:.1f} us "
              f"({fastest['ratio']:.2f}x cuBLAS); best() {list(chosen[1])} x{splits} {best * 1e6:.1f} us "
              f"({cublas / best:.2f}x)", flush=True)
    write_results("phase5_gemm_defaults", gpu_name(), rows, candidates=[list(c) for c in configs],
                  splits=list(SPLITS), search="chosen configurations only" if args.chosen_only else "full")
    return 0


if __name__ == "__main__":
    sys.exit(main())
