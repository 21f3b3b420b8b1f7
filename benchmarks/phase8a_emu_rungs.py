"""Phase 8a on the emulator: the CPU time of a product on rung 1 ("wmma") and on rung 5 ("pipeline") of the lab's
hgemm.py, at the shapes autocast gives them in the course's models (the MNIST CNN at batch 64, Lab 7's reduced
GPT) and at squares. The data behind ``ops.linalg.hgemm_variant``'s emulator rule. CPU seconds of one call
(``time.process_time``, after a first call that compiles), one emulator worker. Writes
``benchmarks/results/phase8a_emu_rungs-<emulator>.json``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
from common import emulator_name, solution_sources, write_results

# (name, batch (0: one matrix), M, K, N, transpose_a, transpose_b)
SHAPES = [("cnn_conv1_fwd", 0, 8, 9, 50176, False, False), ("cnn_conv2_fwd", 0, 16, 72, 12544, False, False),
          ("cnn_conv2_dx", 0, 72, 16, 12544, True, False), ("cnn_conv1_dw_per_image", 64, 8, 784, 9, False, True),
          ("cnn_conv2_dw_per_image", 64, 16, 196, 72, False, True), ("cnn_fc1_fwd", 0, 64, 784, 64, False, False),
          ("cnn_fc1_dw", 0, 784, 64, 64, True, False), ("gpt_reduced_fc_fwd", 0, 64, 32, 128, False, False),
          ("gpt_reduced_head_fwd", 0, 64, 32, 65, False, False), ("square_128_k1024", 0, 128, 1024, 128, False, False),
          ("square_256_k512", 0, 256, 512, 256, False, False), ("k_major_64x256_k2048", 0, 64, 2048, 256, True, False)]


def main() -> int:
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ.setdefault("MINITORCH_EMU_WORKERS", "1")
    import minitorch
    from minitorch import backend, kernels
    from minitorch.kernels import write_source

    minitorch.set_device("emu")
    for name, source in solution_sources("phase8a_tensor_cores.ipynb").items():
        write_source(name, source)
    hg = kernels.load_module("hgemm.py")
    rows = []
    for name, batch, m, k, n, ta, tb in SHAPES:
        lead = (batch,) if batch else ()
        a = backend.asarray(np.full(lead + ((k, m) if ta else (m, k)), 0x3F80, np.uint16))  # bf16 ones
        b = backend.asarray(np.full(lead + ((n, k) if tb else (k, n)), 0x3F80, np.uint16))
        out = backend.asarray(np.zeros(lead + (m, n), np.float32))
        row = {"shape": name, "batch": batch, "m": m, "k": k, "n": n, "ta": ta, "tb": tb}
        for variant in ("wmma", "pipeline"):
            hg.hgemm(a, b, out, "bfloat16", variant, transpose_a=ta, transpose_b=tb)
            start = time.process_time()
            hg.hgemm(a, b, out, "bfloat16", variant, transpose_a=ta, transpose_b=tb)
            row[f"{variant}_cpu_seconds"] = time.process_time() - start
            assert np.all(backend.asnumpy(out) == k), (name, variant)
        row["wmma_over_pipeline"] = row["wmma_cpu_seconds"] / row["pipeline_cpu_seconds"]
        rows.append(row)
        print({key: (f"{v:.3g}" if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    write_results("phase8a_emu_rungs", emulator_name(), rows, workers=os.environ["MINITORCH_EMU_WORKERS"],
                  timing="time.process_time of one call after a first (compiling) call",
                  launcher="solutions/phase8a_tensor_cores.ipynb hgemm.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
