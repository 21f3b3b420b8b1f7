"""Issue #27: why Phase 4's sum is slower timed isolated than in the tests' process, on an NVIDIA GPU.

Graded in the tests' own process, the reference solution's sum (reduce.py, variant "warp") streams 256 MiB in
about 94 us (checks.time_cuda: CUDA events, one buffer); graded isolated (grader/learner_process.py: the learner's
calls replayed in a process of its own over fresh sets of arrays, pieces of one allocation of the judge's that the
learner process maps by CUDA IPC handle, timed by the judge's clock), it took 139 us while its reference (cupy.sum,
cupy.copyto) timed over as many fresh sets in the judge stayed as fast (grade-isolated-refsets-phase4-*.json).

This script times the same launcher every way between the two, so that the difference is pinned on one cause:

- ``judge_*``: in this process (native memory): one buffer (time_cuda), fresh sets of one allocation (the layout of
  learner_process._fresh_sets, timed as checks.time_reference_over_sets times a reference), cupy.sum over them;
- ``child_*``: in a second process, CUDA events there (a diagnosis, not a grade): the judge's arena mapped by IPC
  handle (the judge's layout, and sets 2 MiB apart), one IPC-mapped allocation reused, an arena of the child's own
  (before and after the judge maps it by IPC handle), one native buffer reused; each eager (events around the
  launches), as one captured graph (events, and the host clock around replay + synchronize: what the judge's clock
  sees), and cupy.sum over the same memory;
- ``isolated_*``: the grader's own path (learner_process.time_replayed), its rounds, and the round trip of a request,
  with the sets in the judge's memory (mapped by the learner process) and in the learner process's (mapped by the
  judge: learner_process.TIMING_MEMORY_ENV).

Writes ``benchmarks/results/isolated_sum_timing-<gpu>.json``. Needs an NVIDIA GPU with about 50 GB free.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 26                      # the performance checks' input: 2^26 floats, 256 MiB
X_BYTES = 4 * N
MIB = 1 << 20
ROUNDS = 3
START = time.perf_counter()


def log(text: str) -> None:
    print(f"[{time.perf_counter() - START:7.2f} s] {text}", file=sys.stderr, flush=True)


def setup_workspace() -> None:
    """The reference solution's files of phases 1-4 in a temporary workspace; minitorch on the GPU."""
    sys.path.insert(0, str(ROOT))
    from grader.phases import PHASES
    from grader.runner import write_solution_files

    workspace = Path(tempfile.mkdtemp(prefix="isolated-sum-"))
    write_solution_files(workspace, PHASES["phase4"], include_own=True)
    os.environ["MINITORCH_WORKSPACE"] = str(workspace)
    os.environ["MINITORCH_DEVICE"] = "cuda"
    for name in ("MINITORCH_SYNC_LAUNCHES", "MINITORCH_LAUNCH_TRACE", "GRADER_ISOLATE"):
        os.environ.pop(name, None)


def layout(sets: int, align: int) -> dict[str, int]:
    """Where set i's x and out lie in an arena: x at i * step, out at i * step + out_off (learner_process._fresh_sets:
    align 512)."""
    up = lambda n: -(-n // align) * align  # noqa: E731
    return {"sets": sets, "step": up(X_BYTES) + up(4), "out_off": up(X_BYTES)}


def views_at(ptr: int, lay: dict[str, int], owner: Any) -> list[tuple[Any, Any]]:
    import cupy

    def view(address: int, n: int) -> Any:
        memory = cupy.cuda.UnownedMemory(address, 4 * n, owner, cupy.cuda.Device().id)
        return cupy.ndarray((n,), np.float32, cupy.cuda.MemoryPointer(memory, 0))

    return [(view(ptr + i * lay["step"], N), view(ptr + i * lay["step"] + lay["out_off"], 1))
            for i in range(lay["sets"])]


def kernel_facts() -> dict[str, Any]:
    """How this process compiled and would launch the sum: the kernel's attributes, the device, the CUDA settings."""
    import cupy

    from minitorch import kernels

    k = kernels.load_kernel("reduce.cu", "sum_warp")
    attributes = {key: int(v) for key, v in k._raw.attributes.items()}
    with kernels.recording() as launches:
        x, out = cupy.ones(N, np.float32), cupy.empty(1, np.float32)
        kernels.load_module("reduce.py").sum(x, out, variant="warp")
        cupy.cuda.Device().synchronize()
    module_key = next((key for key in kernels._modules if key[0] == "cuda"), None)
    return {"attributes": attributes, "compile_options": list(module_key[2]) if module_key else None,
            "launches": [[launch.kernel.function, list(launch.grid), list(launch.block)] for launch in launches],
            "sum_ok": bool(abs(float(out.get()[0]) - N) < 1),
            "sms": int(cupy.cuda.Device().attributes["MultiProcessorCount"]),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("CUDA", "CUPY", "NVRTC"))}}


def time_events(calls: list, enqueue_hint: float | None = None) -> float:
    """Seconds per call of `calls` run back to back, by CUDA events, fastest of ROUNDS rounds after an untimed one;
    L2 flushed and the host's enqueueing hidden behind a spin kernel, as checks.time_reference_over_sets does."""
    import cupy

    from grader import checks

    flush = checks.l2_flush_buffer()
    device = cupy.cuda.Device()
    best = float("inf")
    with checks._async_launches():
        start_host = time.perf_counter()
        for call in calls:
            call()
        enqueue = time.perf_counter() - start_host if enqueue_hint is None else enqueue_hint
        device.synchronize()
        for _ in range(ROUNDS):
            flush.max()
            checks._gpu_delay(min(0.05, 1.5 * enqueue + 200e-6))()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for call in calls:
                call()
            stop.record()
            stop.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(start, stop) * 1e-3 / len(calls))
    return best


def measure(views: list[tuple[Any, Any]]) -> dict[str, float]:
    """The sum over each (x, out) of `views`: eager, as one captured graph (events, and the host clock around a
    replay and a device synchronisation), and cupy.sum over the same x; microseconds per set."""
    import cupy

    from grader import checks
    from minitorch import graph, kernels

    red = kernels.load_module("reduce.py")
    calls = [lambda x=x, o=o: red.sum(x, o, variant="warp") for x, o in views]
    found: dict[str, float] = {"sets": len(views)}
    found["eager_us"] = 1e6 * time_events(calls)
    with checks._async_launches():
        captured = graph.capture(lambda: [c() for c in calls])
        captured.replay()
        cupy.cuda.Device().synchronize()
        found["graph_us"] = 1e6 * time_events([captured.replay], enqueue_hint=1e-4) / len(calls)
        walls = []
        flush = checks.l2_flush_buffer()
        for _ in range(ROUNDS):
            flush.max()
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            captured.replay()
            cupy.cuda.runtime.deviceSynchronize()
            walls.append(time.perf_counter() - start)
        found["graph_wall_us"] = 1e6 * min(walls) / len(calls)
    del captured
    found["cupy_sum_us"] = 1e6 * time_events([lambda x=x: cupy.sum(x) for x, _ in views])
    x, out = views[len(views) // 2]
    red.sum(x, out, variant="warp")
    want = float(cupy.sum(x, dtype=np.float64))
    found["sum_ok"] = bool(abs(float(out.get()[0]) - want) <= 1e-4 * float(cupy.abs(x).sum()) + 1e-3)
    return found


# ---------------------------------------------------------------- the second process


def child() -> None:
    """Answer the judge's JSON requests on stdin, one JSON reply a line on the original stdout."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints goes to stderr
    setup_workspace()
    import cupy

    from grader import learner_process

    state: dict[str, Any] = {}

    def op_facts(req: dict) -> dict:
        return kernel_facts()

    def op_time_ipc(req: dict) -> dict:
        base = int(cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(req["handle"])))
        owner = object()
        try:
            views = views_at(base + req["off"], req["layout"], owner)
            found = measure(views)
            del views
            cupy.cuda.Device().synchronize()
        finally:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.cuda.runtime.ipcCloseMemHandle(base)
        return found

    def op_native_alloc(req: dict) -> dict:
        lay = req["layout"]
        arena = cupy.empty(lay["sets"] * lay["step"], np.uint8)
        views = views_at(int(arena.data.ptr), lay, arena)
        x = cupy.random.RandomState(1).standard_normal(N, dtype=np.float32)
        for v, _ in views:
            cupy.copyto(v, x)
        cupy.cuda.Device().synchronize()
        state.update(arena=arena, views=views)
        base, handle = learner_process.cuda_ipc_handle(int(arena.data.ptr))
        return {"handle": handle.hex(), "off": int(arena.data.ptr) - base}

    def op_time_native(req: dict) -> dict:
        return measure(state["views"])

    def op_native_free(req: dict) -> dict:
        state.clear()
        cupy.get_default_memory_pool().free_all_blocks()
        return {}

    def op_time_single_native(req: dict) -> dict:
        x = cupy.random.RandomState(2).standard_normal(N, dtype=np.float32)
        out = cupy.empty(1, np.float32)
        found = measure([(x, out)] * req["sets"])
        del x, out
        cupy.get_default_memory_pool().free_all_blocks()
        return found

    ops = {"facts": op_facts, "time_ipc": op_time_ipc, "native_alloc": op_native_alloc, "time_native": op_time_native,
           "native_free": op_native_free, "time_single_native": op_time_single_native}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = ops[req["op"]](req)
        except Exception:  # noqa: BLE001 - a diagnosis: report and go on
            reply = {"error": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=dict(os.environ))

    def ask(self, req: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the child died (exit status {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


# ---------------------------------------------------------------- the judge's side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=86, help="fresh sets (the grade's run had 86)")
    parser.add_argument("--json", default=None, help="where to write the results (default benchmarks/results/)")
    parser.add_argument("--only", choices=["layout"], help="layout: only the IPC arena's layouts (which property of it "
                        "the importing process pays for)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    setup_workspace()
    import cupy
    from common import gpu_name, write_results

    from grader import checks, learner_process
    from minitorch import kernels

    found: dict[str, Any] = {}

    def step(name: str, fn: Any) -> Any:
        try:
            found[name] = fn()
        except Exception:  # noqa: BLE001 - a diagnosis: report and go on
            found[name] = {"error": traceback.format_exc()}
        log(f"{name}: {json.dumps(found[name])[:600]}")
        return found[name]

    sets = args.sets
    red = kernels.load_module("reduce.py")
    x = cupy.random.RandomState(0).standard_normal(N, dtype=np.float32)
    out = cupy.empty(1, np.float32)
    us = lambda s: None if s is None else 1e6 * s  # noqa: E731
    if args.only is None:
        step("judge_facts", kernel_facts)
        step("judge_single_time_cuda_us", lambda: us(checks.time_cuda(lambda: red.sum(x, out, variant="warp"))))
        step("judge_arena_sets_us", lambda: us(checks.time_reference_over_sets(
            lambda: red.sum(x, out, variant="warp"), sets)[0]))
        step("judge_arena_cupy_sum_us", lambda: us(checks.time_reference_over_sets(lambda: cupy.sum(x), sets)[0]))
        step("judge_single_cupy_sum_us", lambda: us(checks.time_cuda(lambda: cupy.sum(x))))
        cupy.get_default_memory_pool().free_all_blocks()

    kid = Child()
    step("child_facts", lambda: kid.ask({"op": "facts"}))

    def ipc_arena(align: int, size: str = "exact") -> dict:
        """The judge's arena of `sets` sets `align` bytes apart, mapped by the child; `size` "exact" (the sets' bytes),
        "2mib" (rounded up to a multiple of 2 MiB) or "+512" (512 bytes more): which of the layout's properties the
        importing process pays for, the sets' offsets or the allocation's size."""
        lay = layout(sets, align)
        nbytes = lay["sets"] * lay["step"]
        nbytes = {"exact": nbytes, "2mib": -(-nbytes // (2 * MIB)) * 2 * MIB, "+512": nbytes + 512}[size]
        arena = cupy.empty(nbytes, np.uint8)
        try:
            for v, _ in views_at(int(arena.data.ptr), lay, arena):
                cupy.copyto(v, x)
            cupy.cuda.Device().synchronize()
            base, handle = learner_process.cuda_ipc_handle(int(arena.data.ptr))
            return kid.ask({"op": "time_ipc", "handle": handle.hex(), "off": int(arena.data.ptr) - base,
                            "layout": lay})
        finally:
            del arena
            cupy.get_default_memory_pool().free_all_blocks()

    def ipc_single() -> dict:
        memory = cupy.cuda.Memory(X_BYTES + 512)  # cudaMalloc itself: one allocation, one handle
        view = cupy.ndarray((N,), np.float32, cupy.cuda.MemoryPointer(memory, 0))
        cupy.copyto(view, x)
        cupy.cuda.Device().synchronize()
        handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(int(memory.ptr)))
        # every set is the same allocation: step 0
        return kid.ask({"op": "time_ipc", "handle": handle.hex(), "off": 0,
                        "layout": {"sets": sets, "step": 0, "out_off": X_BYTES}})

    def native_mapped_by_judge() -> dict:
        """The child's own arena, timed; then the judge maps it by IPC handle and writes every set through the
        mapping (as a timing whose sets the learner process allocates would), and it is timed again."""
        lay = layout(sets, 512)
        got = kid.ask({"op": "native_alloc", "layout": lay})
        before = kid.ask({"op": "time_native"})
        base = int(cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(got["handle"])))
        try:
            owner = object()
            for i, (v, _) in enumerate(views_at(base + got["off"], lay, owner)):
                cupy.copyto(v, x * np.float32(1 + i / 1000))
            cupy.cuda.Device().synchronize()
            after = kid.ask({"op": "time_native"})
        finally:
            cupy.cuda.runtime.ipcCloseMemHandle(base)
            kid.ask({"op": "native_free"})
        return {"child_only": before, "mapped_and_written_by_judge": after}

    step("child_ipc_arena", lambda: ipc_arena(512))
    step("child_ipc_arena_2mib_apart", lambda: ipc_arena(2 * MIB))
    if args.only == "layout":
        step("child_ipc_arena_512_apart_size_2mib_multiple", lambda: ipc_arena(512, "2mib"))
        step("child_ipc_arena_2mib_apart_size_plus_512", lambda: ipc_arena(2 * MIB, "+512"))
        step("child_ipc_arena_64kib_apart", lambda: ipc_arena(64 << 10))
        step("child_ipc_arena_4kib_apart", lambda: ipc_arena(4 << 10))
        kid.close()
        write_results("isolated_sum_layout", gpu_name(), [found], path=args.json, sets=sets,
                      note="microseconds per sum of 2^26 float32 (256 MiB); see benchmarks/isolated_sum_timing.py")
        return
    step("child_ipc_single_allocation", ipc_single)
    step("child_native_arena", native_mapped_by_judge)
    step("child_native_single", lambda: kid.ask({"op": "time_single_native", "sets": sets}))
    kid.close()
    cupy.get_default_memory_pool().free_all_blocks()

    def isolated(memory: str) -> dict:
        """The grader's own timing (learner_process.time_replayed), the sets in the judge's memory (mapped by the
        learner process) or in the learner process's (mapped by the judge): learner_process.TIMING_MEMORY_ENV."""
        os.environ[learner_process.TIMING_MEMORY_ENV] = memory
        learner_process.install()
        try:
            proxy = kernels.load_module("reduce.py")
            learner_process._call({"op": "load_module", "file": "reduce.py"}, (), {}, "round trip")
            trips = []
            for _ in range(5):
                learner_process._call({"op": "load_module", "file": "reduce.py"}, (), {}, "round trip")
                trips.append(learner_process.learner_process().last_seconds)
            seconds = learner_process.time_replayed(lambda: proxy.sum(x, out, variant="warp"), what="sum (warp)")
            timing = dict(learner_process.last_timing)
        finally:
            learner_process.uninstall()
            os.environ.pop(learner_process.TIMING_MEMORY_ENV, None)
        reps = int(timing["reps"])
        return {"seconds_us": us(seconds), "reps": reps, "graph": timing.get("graph"), "memory": timing.get("memory"),
                "rounds_ms": [1e3 * r for r in timing["rounds"]], "once_ms": 1e3 * timing["once"],
                "warm_up_ms": 1e3 * timing["warm_up"], "round_trip_ms": [1e3 * t for t in trips]}

    step("isolated_sets_in_judge_memory", lambda: isolated("judge"))
    cupy.get_default_memory_pool().free_all_blocks()
    step("isolated_sets_in_learner_memory", lambda: isolated("learner"))
    device = gpu_name()
    write_results("isolated_sum_timing", device, [found], path=args.json, sets=sets,
                  note="microseconds per sum of 2^26 float32 (256 MiB); see benchmarks/isolated_sum_timing.py")


if __name__ == "__main__":
    main()
