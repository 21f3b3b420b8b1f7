"""Phase 8b benchmark: peak device memory of attention's forward + backward, FlashAttention against Phase 7's
materialised attention, as the sequence grows.

Runs on the reference solution files of Phases 1-8b (a temporary workspace), at B = 1, H = 8, D = 64, causal:

- ``materialised``: ``functional.causal_self_attention(qkv, H)`` (Phase 7's kernels: the scores and the
  probabilities of every head are (T, T) float32 matrices in device memory, kept for the backward) and its
  backward, from a float32 qkv (B, T, 3·H·D);
- ``flash``: ``functional.scaled_dot_product_attention(q, k, v, causal=True)`` (Phase 8b's ``flash.py``: the
  scores never leave the chip; the backward keeps O and the rows' logsumexp) and its backward, on bfloat16
  (B, H, T, D) tensors.

Peak: the Phase 5 caching pool's (the learner's ``pool.py``, the device allocator from Phase 5 on) peak bytes
in use during one forward + backward, the inputs and the output gradient already allocated (their bytes
reported apart); B·H·T² is a power of two at every T here, so the pool's power-of-two size classes round none
of the T x T buffers. A run that does not fit is recorded as out of memory. Also the seconds of one forward +
backward (CUDA events, median), reported, not compared: the dtypes differ.

Launch plans (``minitorch.plans``) are off here: recording a plan checks it by copying every array of the call
to the host and comparing, which at T = 8192 took most of the first step's 51 s (the materialised attention's
2 GiB score matrices) and at T = 16384 (8 GiB each) did not finish in 4 minutes (the second H100 run); and a plan
keeps its launcher's scratch buffers between calls, which would hide them from the peak. So every buffer a step
allocates, scratch included, counts.

A row that does not fit is recorded as out of memory, with ``needed_bytes``: what the step would need beyond
its inputs, computed (the materialised attention keeps the scores, the probabilities and their gradient, three
B·H·T² float32 matrices, at the peak of its backward).

Writes ``benchmarks/results/phase8b_memory-<gpu>.json``. Usage (GPU): ``python benchmarks/phase8b_memory.py``;
``--small``: the emulator at T = 64, 128 (a check of this script; no JSON for the book).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from common import ROOT, emulator_name, gpu_name, solution_sources, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn", "phase7_gpt", "phase8a_tensor_cores", "phase8b_flash")
B, H, D = 1, 8, 64
LENGTHS = (1024, 2048, 4096, 8192, 16384)
SMALL_LENGTHS = (64, 128)


def reset_peak(device: str) -> int:
    """Start the pool's peak afresh at what is in use now; returns that."""
    from minitorch import allocator

    pool = allocator.active_pool(device)
    if pool is None:
        raise RuntimeError("the Phase 5 caching pool is not the device allocator: is pool.py in the workspace?")
    pool.pool.peak = pool.pool.bytes_in_use
    return int(pool.pool.bytes_in_use)


def peak(device: str) -> int:
    from minitorch import allocator

    stats = allocator.stats(device)
    assert stats is not None
    return int(stats["peak"])


def materialised(device: str, t: int, rng: np.random.Generator):
    """A zero-argument forward + backward of Phase 7's attention, and the bytes of its inputs."""
    import minitorch
    from minitorch import functional

    qkv = minitorch.tensor(rng.standard_normal((B, t, 3 * H * D)).astype(np.float32), device, requires_grad=True)
    grad = minitorch.tensor(rng.standard_normal((B, t, H * D)).astype(np.float32), device)

    def step():
        y = functional.causal_self_attention(qkv, H)
        y.backward(grad)
        qkv.grad = None
    return step, qkv.nbytes + grad.nbytes


def flash(device: str, t: int, rng: np.random.Generator):
    import minitorch
    from minitorch import functional

    def bf16(shape, grad=False):
        return minitorch.tensor(rng.standard_normal(shape).astype(np.float32), device).to("bfloat16") \
            .requires_grad_(grad)

    q, k, v = (bf16((B, H, t, D), True) for _ in range(3))
    grad = bf16((B, H, t, D))

    def step():
        y = functional.scaled_dot_product_attention(q, k, v, causal=True)
        y.backward(grad)
        for x in (q, k, v):
            x.grad = None
    return step, 4 * q.nbytes


def needed_bytes(method: str, t: int) -> int:
    """The peak beyond the inputs that a step needs, computed: the materialised attention's three B·H·T² float32
    matrices (scores, probabilities, their gradient) at its backward; FlashAttention's O, dQ's fp32 buffer, the
    logsumexp and Delta, and the three gradients."""
    if method == "materialised":
        return 3 * B * H * t * t * 4
    return B * H * t * (D * 2 + D * 4 + 4 + 4 + 3 * D * 2)


def measure(device: str, method: str, t: int) -> dict:
    from minitorch import allocator, backend

    rng = np.random.default_rng(t)
    row = {"method": method, "b": B, "h": H, "t": t, "d": D, "causal": True,
           "dtype": "float32" if method == "materialised" else "bfloat16",
           "score_matrix_bytes": B * H * t * t * 4}
    try:
        step, inputs = (materialised if method == "materialised" else flash)(device, t, rng)
        step()  # compiles, and fills the pool's cache of blocks
        backend.synchronize()
        allocator.release(device)
        base = reset_peak(device)
        start = time.perf_counter()
        step()
        backend.synchronize()
        row["seconds_first"] = time.perf_counter() - start
        row.update(input_bytes=inputs, in_use_before=base, peak_bytes=peak(device),
                   extra_bytes=peak(device) - base)
        if device == "cuda":
            from common import time_gpu
            row["seconds"] = time_gpu(step, max_seconds=0.2, flush=False, hide_host_overhead=False)
    except MemoryError as e:  # cupy's OutOfMemoryError and the emulator's are MemoryErrors
        row.update(out_of_memory=True, error=str(e)[:300], needed_bytes=needed_bytes(method, t))
    allocator.release(device)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="the emulator at T = 64, 128: a check of the script")
    parser.add_argument("--lengths", help="the sequence lengths, comma-separated (default: 8192, 16384 first, "
                        "then 1024 .. 4096)")
    parser.add_argument("--out", help="the JSON file (default benchmarks/results/phase8b_memory-<gpu>.json)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ.pop("MINITORCH_PHASE", None)
    os.environ["MINITORCH_PLANS"] = "0"  # see the module's docstring
    import minitorch
    from minitorch.kernels import write_source

    device = "emu" if args.small else "cuda"
    if device == "cuda" and not minitorch.cuda_available():
        print("no usable GPU: run with --small for a check of this script on the emulator", file=sys.stderr)
        return 1
    minitorch.set_device(device)
    for lab in LABS:
        if not (ROOT / "solutions" / f"{lab}.ipynb").exists():
            print(f"solutions/{lab}.ipynb is missing", file=sys.stderr)
            return 1
        for name, source in solution_sources(f"{lab}.ipynb").items():
            write_source(name, source)
    name = gpu_name() if device == "cuda" else emulator_name()
    print(f"device: {name}", flush=True)
    rows = []
    lengths = ([int(x) for x in args.lengths.split(",")] if args.lengths else
               SMALL_LENGTHS if args.small else sorted(LENGTHS, key=lambda t: (t < 8192, t)))
    start = time.perf_counter()
    for t in lengths:
        for method in ("flash", "materialised"):
            row = measure(device, method, t)
            rows.append(row)
            shown = ("out of memory" if row.get("out_of_memory") else
                     f"peak {row['extra_bytes'] / 2**20:10.1f} MiB over {row['in_use_before'] / 2**20:8.1f} MiB "
                     f"in use" + (f", {row['seconds'] * 1e3:8.2f} ms" if "seconds" in row else ""))
            print(f"[{time.perf_counter() - start:5.1f} s] T={t:6d} {method:>12}: {shown}", flush=True)
            if not args.small:  # after every row: a run cut short keeps what it measured
                write_results("phase8b_memory", name, sorted(rows, key=lambda r: (r["t"], r["method"])),
                              path=args.out, b=B, h=H, d=D, plans=False)
    if args.small:
        print("(--small: a check of the script, no JSON written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
