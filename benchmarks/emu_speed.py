"""How fast the CUDA C emulator runs: launches, bandwidth, a tiled SGEMM, and the two deliverables' training steps.

Measures, on the emulator (no GPU), with the reference solution files of every lab in a temporary workspace:

- ``launch``: launches per second of an empty kernel (one block of one thread), without and with four arguments
  (three device arrays and an int, packed and checked as every launch is): the fixed cost of one launch;
- ``elementwise``: ``y[i] = a * x[i] + y[i]`` over 4M floats, one thread per element: bytes moved (read x, y;
  write y) per second;
- ``sgemm``: a 16x16-tiled shared-memory SGEMM (two ``__syncthreads()`` per tile: one fiber per CUDA thread) of
  512x512x512 floats, and the Phase 5 reference ``ops.matmul`` of the same size: GFLOP/s;
- ``mnist``: one training step of the Phase 6 deliverable (the lab's CNN, batch 64, Adam, the step captured and
  replayed as the lab does): ``step_seconds`` (the best of the timed rounds) and ``mnist_epoch_seconds`` for the
  60,000 training images (937 steps); with ``--full-epoch`` the whole epoch is timed, else it is the step time
  times 937 (``epoch_from_steps`` says how many steps were timed);
- ``gpt``: one training step of the Phase 7 deliverable (the lab's GPT: 2 layers, 4 heads, d_model 64, context
  64, batch 64; AdamW, clipping; captured) and of the lab's reduced emulator configuration; with 1 worker the row
  also gives where the step's time goes, by kernel (``kernels``, as the MNIST row).

Every measurement runs with each worker count of ``--workers`` (default ``1,2``: one thread, and one per core of a
2-core machine). Each row gives ``seconds`` (wall clock, the best of the rounds) and ``cpu_seconds`` (CPU time of
the process over the same round); the machine's load average is recorded, as timings on a shared machine are
noisy. Writes ``benchmarks/results/emu_speed-<device>.json`` (``--out`` for another directory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import emulator_name, solution_sources, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn", "phase7_gpt")
MNIST_TRAIN_IMAGES, MNIST_BATCH = 60_000, 64
GPT_FULL = dict(d_model=64, n_head=4, n_layer=2, block_size=64, batch_size=64, lr=3e-3)
GPT_REDUCED = dict(d_model=32, n_head=2, n_layer=1, block_size=16, batch_size=16, lr=1e-2)

SOURCE = r"""
extern "C" __global__ void empty() {}
extern "C" __global__ void empty_args(const float* x, const float* y, float* z, int n) {}
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
#define TILE 16
extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def best_of(fn, rounds: int, min_seconds: float = 0.0) -> tuple[float, float, int]:
    """(best wall seconds, the CPU seconds of that round, calls per round) of ``fn()``; a round repeats ``fn``
    until it has taken ``min_seconds``, so that short calls are timed over many repetitions."""
    for _ in range(3):  # warm: compiles, first touches, and the code specialised for repeated launches
        fn()
    _specialize_now()
    calls = 1
    if min_seconds:
        start = time.perf_counter()
        fn()
        calls = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-9)))
    best, best_cpu = float("inf"), 0.0
    for _ in range(rounds):
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(calls):
            fn()
        wall = time.perf_counter() - start
        if wall < best:
            best, best_cpu = wall, time.process_time() - cpu
    return best / calls, best_cpu / calls, calls


def kernel_rows(workers: int, rounds: int, n: int = 1 << 22, size: int = 512, min_seconds: float = 0.3) -> list[dict]:
    from minitorch import emu

    module = emu.RawModule(code=SOURCE, filename="emu_speed.cu")
    empty, empty_args = module.get_function("empty"), module.get_function("empty_args")
    axpy, sgemm = module.get_function("axpy"), module.get_function("sgemm_tiled")
    rows = []
    small = [emu.zeros(16, np.float32) for _ in range(3)]
    for name, call in (("empty", lambda: empty((1,), (1,), ())),
                       ("empty_args", lambda: empty_args((1,), (1,), (*small, np.int32(16))))):
        seconds, cpu, calls = best_of(call, rounds, min_seconds)
        rows.append({"kind": "launch", "kernel": name, "workers": workers, "seconds": seconds, "cpu_seconds": cpu,
                     "launches_per_second": 1 / seconds, "calls": calls})
    rng = np.random.default_rng(0)
    x_host, y_host = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x, y = emu.asarray(x_host), emu.asarray(y_host)
    axpy(((n + 255) // 256,), (256,), (np.float32(2.0), x, y, np.int32(n)))
    if not np.array_equal(y.get(), np.float32(2.0) * x_host + y_host):
        raise AssertionError("axpy computed a wrong result")
    seconds, cpu, _ = best_of(lambda: axpy(((n + 255) // 256,), (256,), (np.float32(0.5), x, y, np.int32(n))),
                              rounds)
    rows.append({"kind": "elementwise", "kernel": "axpy", "n": n, "workers": workers, "seconds": seconds,
                 "cpu_seconds": cpu, "gb_per_second": 3 * 4 * n / seconds / 1e9})
    a_host = rng.standard_normal((size, size), dtype=np.float32)
    b_host = rng.standard_normal((size, size), dtype=np.float32)
    a, b, c = emu.asarray(a_host), emu.asarray(b_host), emu.zeros((size, size), np.float32)
    grid = ((size + 15) // 16, (size + 15) // 16)
    sgemm(grid, (16, 16), (a, b, c, np.int32(size), np.int32(size), np.int32(size)))
    expected = a_host.astype(np.float64) @ b_host.astype(np.float64)
    if not np.allclose(c.get(), expected, rtol=1e-4, atol=1e-3):
        raise AssertionError("the tiled SGEMM computed a wrong result")
    seconds, cpu, _ = best_of(lambda: sgemm(grid, (16, 16), (a, b, c, np.int32(size), np.int32(size),
                                                           np.int32(size))), rounds)
    rows.append({"kind": "sgemm", "kernel": "sgemm_tiled (16x16 tiles, 2 barriers a tile)", "size": size,
                 "workers": workers, "seconds": seconds, "cpu_seconds": cpu,
                 "gflop_per_second": 2 * size**3 / seconds / 1e9})
    return rows


def matmul_row(workers: int, rounds: int) -> dict:
    import minitorch
    from minitorch import ops

    size = 512
    rng = np.random.default_rng(1)
    a_host = rng.standard_normal((size, size), dtype=np.float32)
    b_host = rng.standard_normal((size, size), dtype=np.float32)
    a, b = minitorch.tensor(a_host), minitorch.tensor(b_host)
    out = ops.matmul(a, b).numpy()
    if not np.allclose(out, a_host.astype(np.float64) @ b_host.astype(np.float64), rtol=1e-4, atol=1e-3):
        raise AssertionError("ops.matmul computed a wrong result")
    seconds, cpu, _ = best_of(lambda: ops.matmul(a, b), rounds)
    return {"kind": "sgemm", "kernel": "ops.matmul (Phase 5 reference)", "size": size, "workers": workers,
            "seconds": seconds, "cpu_seconds": cpu, "gflop_per_second": 2 * size**3 / seconds / 1e9}


def mnist_step() -> tuple:
    """Lab 6's MNIST training step on the current device, as the lab runs it (benchmarks/phase6_mnist.py's model,
    Adam at 2e-3), its training images and labels, and ``feed(indices)``: those images and labels into the step's
    batch buffers. Returns (train_step, feed, number of training images)."""
    import minitorch
    from minitorch import data, optim
    from minitorch import functional as F  # noqa: N812

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from phase6_mnist import mnist_cnn

    images, labels = data.load_mnist("train")
    x_train = ((images.astype(np.float32) / 255 - 0.1307) / 0.3081)[:, None]
    y_train = labels.astype(np.int32)
    model = mnist_cnn(0)
    optimizer = optim.Adam(model.parameters(), lr=2e-3)
    x_batch = minitorch.zeros((MNIST_BATCH, 1, 28, 28))
    y_batch = F.class_indices(np.zeros(MNIST_BATCH, np.int64))

    def train_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_batch), y_batch)
        loss.backward()
        optimizer.step()

    def feed(indices: np.ndarray) -> None:
        x_batch.copy_from(x_train[indices])
        y_batch.copy_from(y_train[indices])

    return train_step, feed, len(x_train)


def mnist_row(workers: int, steps: int, full_epoch: bool) -> dict:
    """The Phase 6 deliverable's training step, as the lab runs it (benchmarks/phase6_mnist.py's loop)."""
    from minitorch import backend, graph

    train_step, feed, n_train = mnist_step()
    order = np.random.default_rng(0).permutation(n_train)
    epoch_steps = MNIST_TRAIN_IMAGES // MNIST_BATCH

    def run(first: int, count: int) -> None:
        for i in range(first, first + count):
            feed(order[(i % epoch_steps) * MNIST_BATCH:(i % epoch_steps + 1) * MNIST_BATCH])
            step.replay()
        backend.synchronize()

    step = graph.capture(train_step)
    run(0, 3)  # warm
    specialize_wait = _specialize_now()
    run(3, 3)  # and the specialised code: nothing is left to compile while the steps are timed
    _specialize_now()
    timed = epoch_steps if full_epoch else steps
    cpu, start = time.process_time(), time.perf_counter()
    run(6, timed)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    row = {"kind": "mnist", "workers": workers, "step_seconds": wall / timed, "step_cpu_seconds": cpu / timed,
           "launches_per_step": step.launches, "epoch_steps": epoch_steps, "epoch_from_steps": timed,
           "mnist_epoch_seconds": wall / timed * epoch_steps, "mnist_epoch_cpu_seconds": cpu / timed * epoch_steps,
           **specialize_wait}
    if workers == 1:
        row["kernels"] = kernel_profile(step._launches)
    return row


def kernel_profile(launches: list, rounds: int = 3) -> list[dict]:
    """Where one step's time goes: each recorded launch of the step made again, the CPU time of this thread (the
    one worker) the best of ``rounds``, summed by kernel; largest first. Each kernel's entry also gives its launch
    shapes (grid, block, dynamic shared memory, CUDA threads in all), whether it runs on fibers and whether it is
    split at its barriers."""
    best = [float("inf")] * len(launches)
    for _ in range(rounds):
        for i, launch in enumerate(launches):
            start = time.thread_time()
            launch.replay()
            best[i] = min(best[i], time.thread_time() - start)
    by_name: dict[str, dict] = {}
    for launch, seconds in zip(launches, best, strict=True):
        entry = by_name.setdefault(launch.kernel.function, {"kernel": launch.kernel.function, "launches": 0,
                                                            "cpu_seconds": 0.0, "fibers": uses_fibers(launch),
                                                            "split": split_at_barriers(launch), "shapes": []})
        entry["launches"] += 1
        entry["cpu_seconds"] += seconds
        shape = {"grid": list(launch.grid), "block": list(launch.block), "shared_mem": int(launch.shared_mem)}
        shape["threads"] = int(np.prod(shape["grid"]) * np.prod(shape["block"]))
        if shape not in entry["shapes"]:
            entry["shapes"].append(shape)
    return sorted(by_name.values(), key=lambda e: -e["cpu_seconds"])


def uses_fibers(launch) -> bool | None:
    """Whether the emulator runs the launch's kernel with a fiber per CUDA thread (it uses a barrier or a warp
    primitive and is not split at its barriers) or without (a plain loop over the threads, or one coroutine per
    thread: split_at_barriers); None where the launch does not say."""
    export = getattr(getattr(launch.kernel, "_raw", None), "export", None)
    return None if export is None else bool(export.uses_sync)


def split_at_barriers(launch) -> bool | None:
    """Whether the emulator runs the launch's kernel split at its barriers (minitorch/emu/split.py)."""
    export = getattr(getattr(launch.kernel, "_raw", None), "export", None)
    return None if export is None else bool(export.split)


def gpt_row(workers: int, steps: int, name: str, cfg: dict) -> dict:
    """The Phase 7 deliverable's training step (benchmarks/phase7_gpt.py's step), captured and replayed."""
    import minitorch
    from minitorch import backend, graph, nn, optim, text

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from phase7_gpt import WEIGHT_DECAY, minitorch_step, shakespeare_ids

    tokenizer, train_ids, _ = shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, cfg["batch_size"], cfg["block_size"]
    model = nn.GPT(vocab, d_model=cfg["d_model"], n_head=cfg["n_head"], n_layer=cfg["n_layer"], block_size=t, seed=0)
    opt = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=WEIGHT_DECAY)
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    captured = graph.capture(minitorch_step(model, opt, xb, yb, vocab))
    windows = text.RandomWindows(train_ids, t, b, seed=0)

    def run(count: int) -> None:
        for _ in range(count):
            x, y = windows.sample()
            xb.copy_from(x)
            yb.copy_from(y)
            captured.replay()
        backend.synchronize()

    run(3)
    specialize_wait = _specialize_now()
    run(3)  # and the specialised code: nothing is left to compile while the steps are timed
    _specialize_now()
    cpu, start = time.process_time(), time.perf_counter()
    run(steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    row = {"kind": "gpt", "config": name, **cfg, "workers": workers, "step_seconds": wall / steps,
           "step_cpu_seconds": cpu / steps, "launches_per_step": captured.launches, "steps_timed": steps,
           **specialize_wait}
    if workers == 1:
        row["kernels"] = kernel_profile(captured._launches, rounds=1)
    return row


def _specialize_now() -> dict:
    """Compile the warm-up's repeated launches for their integer arguments now and wait (the emulator does it by
    itself, in the background, once a module has spent MINITORCH_EMU_SPECIALIZE seconds, default 2, in launches):
    the timed steps are a long training loop's steady state (a compile running while they are timed would add its
    own Python work, rewriting and loading the module, to the process's CPU time). The row says whether it was on
    and how long the compiles took (about 0 when the disk cache had them)."""
    from minitorch.emu import config
    from minitorch.emu.specialize import specialize_now

    on = config.specialize_after_s() is not None
    return {"specialized": on, "specialize_compile_seconds": specialize_now() if on else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of the kernel measurements")
    parser.add_argument("--mnist-steps", type=int, default=40, help="MNIST steps timed (default 40)")
    parser.add_argument("--full-epoch", action="store_true", help="time a whole MNIST epoch (937 steps)")
    parser.add_argument("--gpt-steps", type=int, default=10, help="GPT steps timed (default 10)")
    parser.add_argument("--only", default="kernels,mnist,gpt", help="which parts to run")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase7"
    import minitorch
    from minitorch import emu
    from minitorch.kernels import write_source

    minitorch.set_device("emu")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    parts = set(args.only.split(","))
    rows: list[dict] = []
    for workers in [int(w) for w in args.workers.split(",")]:
        with emu.workers(workers):
            load = os.getloadavg()[0]
            if "kernels" in parts:
                rows += kernel_rows(workers, args.rounds)
                rows.append(matmul_row(workers, args.rounds))
            if "mnist" in parts:
                rows.append(mnist_row(workers, args.mnist_steps, args.full_epoch))
            if "gpt" in parts:
                rows.append(gpt_row(workers, args.gpt_steps, "lab (full)", GPT_FULL))
                rows.append(gpt_row(workers, args.gpt_steps, "reduced (emulator lab)", GPT_REDUCED))
            for row in rows:
                row.setdefault("load_average_before", load)
        for row in rows:
            if row["workers"] == workers:
                print({k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    import common

    if args.out:
        common.RESULTS = Path(args.out)
    write_results("emu_speed", emulator_name(), rows, cpu_count=os.cpu_count(),
                  notes=["seconds: wall clock, best of the rounds (MNIST and GPT: the mean over the timed steps); "
                         "cpu_seconds: the process's CPU time over the same round (all worker threads)",
                         "load_average_before: the machine's 1-minute load average when the worker count's "
                         "measurements began (other processes share the cores)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
