"""Phase 8a: attention's batched products on the tensor cores, one launch for the whole batch.

For the products of the GPT's attention under bf16 autocast (B·H matrices of T x T and T x D: Q Kᵀ, P V and the
four backward products), times the lab's ``hgemm.py`` on stacks of matrices (one launch, grid z = the batch) with
each rung (GPU time), against a loop of one launch per matrix (what ``ops.bmm`` did before batching; the host's
enqueueing included, as in an eager step) and against PyTorch's
``torch.bmm`` in bf16 (cuBLAS's batched GEMM) on the same operands. ``ops.linalg.hgemm_variant`` picks its rung on
a GPU from these rows: rung 1 (``wmma``) for outputs of at most 2048 values, rung 5 for the others.

On a GPU: ``python benchmarks/phase8a_bmm.py`` writes ``benchmarks/results/phase8a_bmm-<gpu>.json`` (under a minute).
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import partial

import numpy as np
import phase7_gpt as gpt
from common import gpu_name, solution_sources, time_gpu, write_results

LABS = gpt.LABS + ("phase8a_tensor_cores",)
# (name, batch, M, K, N, transpose_a, transpose_b): the seed GPT's attention (B 64, H 4, T 64, D 16) and a wider one
SHAPES = [("QK^T (B64 H4 T64 D16)", 256, 64, 16, 64, False, True),
          ("PV (B64 H4 T64 D16)", 256, 64, 64, 16, False, False),
          ("dK = dS^T Q (B64 H4 T64 D16)", 256, 64, 64, 16, True, False),
          ("QK^T (B16 H12 T128 D64)", 192, 128, 64, 128, False, True),
          ("PV (B16 H12 T128 D64)", 192, 128, 128, 64, False, False)]
RUNGS = ("wmma", "wmma_shared", "pipeline")  # rungs 3-4 are slower than 5 everywhere (phase8a_hgemm-*.json)


def one_launch_per_matrix(hg, a16, b16, out, ta: bool, tb: bool) -> None:
    for i in range(out.shape[0]):
        hg.hgemm(a16[i], b16[i], out[i], "bfloat16", "best", transpose_a=ta, transpose_b=tb)


def main() -> int:
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch import kernels
    from minitorch.kernels import write_source

    if not minitorch.cuda_available():
        print("needs a GPU", file=sys.stderr)
        return 1
    minitorch.set_device("cuda")
    for lab in LABS:
        for name, source in solution_sources(f"{lab}.ipynb").items():
            write_source(name, source)
    import cupy
    import torch

    hg = kernels.load_module("hgemm.py")
    rng = np.random.default_rng(0)
    rows = []
    for name, batch, m, k, n, ta, tb in SHAPES:
        a = cupy.asarray(rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(np.float32))
        b = cupy.asarray(rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(np.float32))
        ta16, tb16 = torch.as_tensor(a, device="cuda").bfloat16(), torch.as_tensor(b, device="cuda").bfloat16()
        a16, b16 = (cupy.asarray(t.view(torch.int16)).view(np.uint16) for t in (ta16, tb16))
        out = cupy.empty((batch, m, n), np.float32)
        opa = ta16.transpose(1, 2) if ta else ta16
        opb = tb16.transpose(1, 2) if tb else tb16
        reference = (opa.float() @ opb.float()).cpu().numpy()
        row = {"name": name, "batch": batch, "m": m, "k": k, "n": n, "transpose_a": ta, "transpose_b": tb}
        for rung in RUNGS:
            batched = partial(hg.hgemm, a16, b16, out, "bfloat16", rung, transpose_a=ta, transpose_b=tb)
            batched()
            row[f"{rung}_max_abs_error"] = float(np.abs(cupy.asnumpy(out) - reference).max())
            row[f"{rung}_batched_seconds"] = time_gpu(batched, flush=False)
        looped = partial(one_launch_per_matrix, hg, a16, b16, out, ta, tb)
        row["best_one_launch_per_matrix_seconds"] = time_gpu(looped, flush=False, hide_host_overhead=False)
        row["torch_bmm_bfloat16_seconds"] = time_gpu(partial(torch.bmm, opa, opb), flush=False)
        print(row, flush=True)
        rows.append(row)
    write_results("phase8a_bmm", gpu_name(), rows, rungs=list(RUNGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
