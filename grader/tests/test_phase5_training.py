"""Graded tests of Phase 5's training half: adam.cu / adam.py (fused Adam, capturable), pool.py (the
caching allocator), init.cu / init.py (Philox and the initialisers), and the deliverable (the sales
model as an nn.Sequential, trained with SGD and with Adam from the same initialisation).

Run by `grader check phase5`, on the active device (cuda or emu), with fresh random inputs (seed
printed in the report), odd sizes and outputs poisoned before launch. Adam is compared with a float64
reference of several steps, eager and replayed from a captured graph; the pool with a recording fake
device (every raw allocation and free) and as the device's allocator over a training loop; the
deliverable by evaluating the saved models in float64 NumPy with Phase 4's own evaluation code.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import minitorch
from grader import checks
from grader.checks import ODD_SIZES, GradeError, launch_checked
from minitorch import backend, functional, graph, kernels, nn, optim

ON_GPU = backend.get_device() == "cuda"
BETAS = (0.9, 0.999)
ADAM = pytest.mark.kernel("adam.cu", "adam_update")
ADAM_STEP = pytest.mark.kernel("adam.cu", "adam_step")


# ---------------------------------------------------------------- Adam


def adam_module():
    return kernels.load_module("adam.py")


def reference_adam(p: np.ndarray, grads: list[np.ndarray], lr: float, betas: tuple[float, float], eps: float,
                   weight_decay: float, decoupled: bool, *, bias_correction: bool = True) -> np.ndarray:
    """Adam / AdamW in float64, from the papers' formulas (Kingma & Ba; Loshchilov & Hutter)."""
    p = p.astype(np.float64).copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1, b2 = betas
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        if decoupled:
            p = p - lr * weight_decay * p
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        p = p - lr * (m / c1) / (np.sqrt(v / c2) + eps)
    return p


def run_adam(cls: type, p0: np.ndarray, grads: list[np.ndarray], *, capture: bool = False, **kw: float) -> np.ndarray:
    """The parameter after len(grads) steps of minitorch's optimizer on the active device (the learner's
    kernels), eagerly or by replaying one captured step (the gradient refilled in place between replays)."""
    p = minitorch.tensor(p0.astype(np.float32), requires_grad=True)
    opt = cls([p], **kw)
    p.grad = minitorch.tensor(np.zeros_like(p0, dtype=np.float32))
    step = graph.capture(opt.step) if capture else None
    for g in grads:
        p.grad.copy_from(g.astype(np.float32))
        launch_checked(f"{cls.__name__}.step() {'replayed from a graph' if capture else ''}",
                       step.replay if step is not None else opt.step)
    if opt.step_count != len(grads):
        raise GradeError(f"{cls.__name__}: the step count on the device is {opt.step_count} after {len(grads)} "
                         f"steps: adam_step must add 1 to step[0] each time it runs")
    return p.numpy()


def check_adam(got: np.ndarray, p0: np.ndarray, grads: list[np.ndarray], what: str, cls: type, **kw: float) -> None:
    decoupled = cls is optim.AdamW
    expected = reference_adam(p0, grads, kw["lr"], BETAS, 1e-8, kw["weight_decay"], decoupled)
    try:
        checks.assert_close(got, expected, rtol=1e-5, atol=1e-6, what=what)
    except GradeError as err:
        uncorrected = reference_adam(p0, grads, kw["lr"], BETAS, 1e-8, kw["weight_decay"], decoupled,
                                     bias_correction=False)
        if np.allclose(got, uncorrected, rtol=1e-4, atol=1e-6):
            raise GradeError(f"{err}\n  these are the values WITHOUT bias correction: divide m by bias[0] = "
                             f"1 - beta1^t and v by bias[1] = 1 - beta2^t") from None
        other = reference_adam(p0, grads, kw["lr"], BETAS, 1e-8, kw["weight_decay"], not decoupled)
        if kw["weight_decay"] and np.allclose(got, other, rtol=1e-5, atol=1e-6):
            raise GradeError(f"{err}\n  these are {'Adam' if decoupled else 'AdamW'}'s values: decoupled = 1 "
                             f"(AdamW) shrinks the weight, decoupled = 0 (Adam) adds wd * p to the gradient") from None
        raise


def adam_case(n: int, steps: int, *salt: object) -> tuple[np.ndarray, list[np.ndarray]]:
    r = checks.rng("adam", n, steps, *salt)
    return r.standard_normal(n), [r.standard_normal(n) * r.uniform(0.1, 3) for _ in range(steps)]


@ADAM
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.parametrize("n", ODD_SIZES[:5])
@pytest.mark.hint("m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g, p -= lr * (m / bias[0]) / (sqrt(v / bias[1]) + eps); "
                  "AdamW shrinks p by lr*wd*p first, Adam adds wd*p to g")
def test_adam_matches_float64_reference(cls, n):
    p0, grads = adam_case(n, 6, cls.__name__)
    kw = dict(lr=0.01, weight_decay=0.1)
    got = run_adam(cls, p0, grads, **kw)
    check_adam(got, p0, grads, f"{cls.__name__} on {n} weights after {len(grads)} steps", cls, **kw)


@ADAM
@pytest.mark.hint("bias correction: the first step moves every weight by about lr, whatever the gradient's size")
def test_adam_first_step_moves_every_weight_by_lr():
    p0, grads = adam_case(4099, 1, "first")
    got = run_adam(optim.Adam, p0, grads, lr=0.01, weight_decay=0.0)
    moved = np.abs(got.astype(np.float64) - p0.astype(np.float32))
    if not np.allclose(moved, 0.01, rtol=2e-3):
        i = int(np.argmax(np.abs(moved - 0.01)))
        raise GradeError(f"Adam's first step (lr = 0.01) moved weight {i} by {moved[i]:.6g}, expected 0.01: "
                         f"m / (1 - beta1) and v / (1 - beta2) are the gradient and its square at t = 1"
                         + ("; without the correction the step is (1-b1)/sqrt(1-b2) = 3.16 lr"
                            if abs(moved[i] / 0.01 - 3.16) < 0.1 else ""))


@ADAM
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.hint("keep the step count in device memory: adam_step advances it and the corrections, and "
                  "adam_update reads them there; a value computed in Python is frozen into the captured launch")
def test_adam_captured_step_replays_exactly(cls):
    """n replays of one captured opt.step() = n eager steps = the float64 reference."""
    p0, grads = adam_case(257, 7, "capture", cls.__name__)
    kw = dict(lr=0.01, weight_decay=0.1)
    try:
        replayed = run_adam(cls, p0, grads, capture=True, **kw)
    except GradeError:
        raise
    except Exception as exc:
        raise GradeError(f"capturing {cls.__name__}.step() into a graph failed: {type(exc).__name__}: {exc}. "
                         f"Nothing in a step may copy between host and device") from exc
    eager = run_adam(cls, p0, grads, **kw)
    if not np.array_equal(replayed, eager):
        i = int(np.flatnonzero(replayed != eager)[0])
        raise GradeError(f"{cls.__name__}: {len(grads)} replays of a captured step give weight {i} = {replayed[i]!r}, "
                         f"{len(grads)} eager steps {eager[i]!r}: the replays do not advance the step count")
    check_adam(replayed, p0, grads, f"{cls.__name__} replayed {len(grads)} times from a graph", cls, **kw)


@ADAM_STEP
@pytest.mark.parametrize("beta2, start", [(0.999, 0), (0.9999, 1), (0.9999, 6), (0.9999, 99_999), (0.95, 3)],
                         ids=str)
@pytest.mark.hint("bias[k] = 1 - beta_k^t in double precision: in float, pow(0.9999, t) is rounded to 6e-8 and "
                  "1 - it keeps only a few digits")
def test_adam_step_kernel_counts_and_corrects(beta2, start):
    step, bias = backend.asarray(np.array([start], np.int64)), checks.poison(2)
    launch_checked(f"adam.adam_step(step = [{start}], bias, 0.9, {beta2})",
                   lambda: adam_module().adam_step(step, bias, 0.9, beta2))
    t = int(checks.to_host(step)[0])
    if t != start + 1:
        raise GradeError(f"adam_step on step = [{start}]: step is now [{t}], expected [{start + 1}]")
    b1, b2 = (float(np.float32(b)) for b in (0.9, beta2))  # the kernel gets the betas as float32
    checks.assert_close(checks.to_host(bias), np.array([1 - b1**t, 1 - b2**t]), rtol=2e-7,
                        what=f"adam_step's bias corrections at t = {t} (beta1 = 0.9, beta2 = {beta2})")


@ADAM
@pytest.mark.hint("a grid-stride loop: any grid must cover every weight")
def test_adam_update_kernel_is_grid_stride():
    n = 10_007
    p0, (g,) = adam_case(n, 1, "grid")
    args = [backend.asarray(a.astype(np.float32)) for a in (p0, g, np.zeros(n), np.zeros(n))]
    bias = backend.asarray(np.array([1 - 0.9, 1 - float(np.float32(0.999))], np.float32))
    expected = reference_adam(p0.astype(np.float32), [g.astype(np.float32)], 0.01, BETAS, 1e-8, 0.0, False)
    kernel = kernels.load_kernel("adam.cu", "adam_update")
    f32 = np.float32
    checks.assert_grid_stride("adam_update with a grid of 3 blocks of 64 threads", kernel,
                              (*args, bias, f32(0.01), f32(0.9), f32(0.999), f32(1e-8), f32(0.0), np.int32(0),
                               np.int64(n)), {"param": (args[0], expected)}, rtol=1e-5, atol=1e-6)


@ADAM
@pytest.mark.hint("compute the update with your kernels, on the device")
def test_adam_results_come_from_your_kernels():
    n = 4099
    p0, (g,) = adam_case(n, 1, "host-writes")
    p, grad, m, v = (backend.asarray(a.astype(np.float32)) for a in (p0, g, np.zeros(n), np.zeros(n)))
    step, bias = backend.asarray(np.zeros(1, np.int64)), backend.zeros(2)
    ad = adam_module()

    def both():
        ad.adam_step(step, bias, 0.9, 0.999)
        ad.adam_update(p, grad, m, v, bias, 0.01, 0.9, 0.999, 1e-8, 0.0, False)

    checks.assert_computed_on_device("adam_step + adam_update", both, inputs=(grad,), in_place=(p, m, v, step))


@pytest.mark.hint("check the arguments before launching: TypeError for a wrong dtype, ValueError for a wrong "
                  "shape, naming what was expected and what came")
def test_adam_launchers_reject_bad_arguments():
    ad = adam_module()
    ok = [backend.zeros(5) for _ in range(4)]
    bias = backend.zeros(2)
    checks.expect_error("adam_update with a float64 grad", lambda: ad.adam_update(
        ok[0], backend.asarray(np.zeros(5)), ok[2], ok[3], bias, 0.1, 0.9, 0.999, 1e-8, 0.0, False),
        TypeError, "float64")
    checks.expect_error("adam_update with m of shape (4,)", lambda: ad.adam_update(
        ok[0], ok[1], backend.zeros(4), ok[3], bias, 0.1, 0.9, 0.999, 1e-8, 0.0, False), ValueError, "(5,)", "(4,)")
    checks.expect_error("adam_step with a float32 step", lambda: ad.adam_step(backend.zeros(1), bias, 0.9, 0.999),
                        TypeError, "int64", "float32")
    checks.expect_error("adam_update with bias of shape (3,)", lambda: ad.adam_update(
        *ok, backend.zeros(3), 0.1, 0.9, 0.999, 1e-8, 0.0, False), ValueError, "(2,)", "(3,)")


@ADAM
@pytest.mark.perf
@pytest.mark.hint("one pass over the data: read p, g, m, v once and write p, m, v once (28 bytes a weight); a "
                  "grid-stride loop over enough blocks to fill the GPU")
def test_perf_adam_against_copy_bandwidth(record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    n = checks.PERF_BYTES // 4
    p, g = cupy.random.standard_normal(n, dtype=np.float32), cupy.random.standard_normal(n, dtype=np.float32)
    m, v = cupy.zeros(n, np.float32), cupy.zeros(n, np.float32)
    bias = cupy.asarray(np.array([0.1, 0.001], np.float32))
    src, dst = cupy.empty(n, np.float32), cupy.empty(n, np.float32)
    ad = adam_module()
    checks.perf_ratio("adam_update bandwidth", lambda: ad.adam_update(p, g, m, v, bias, 1e-3, 0.9, 0.999, 1e-8,
                                                                      0.0, False),
                      lambda: cupy.copyto(dst, src), 28 * n, "phase5.adam_vs_copy", record_property,
                      reference_name="cupy.copyto (bytes read + written)", reference_nbytes=8 * n)


# ---------------------------------------------------------------- pool.py: the caching allocator


def pool_module():
    return kernels.load_module("pool.py")


class RecordingDevice:
    """raw_malloc / raw_free with bookkeeping: addresses are never reused, every call is counted, and a
    free of an address not allocated (or freed already) is reported."""

    def __init__(self) -> None:
        self.next, self.live, self.mallocs, self.frees = 0x10000, {}, 0, 0

    def malloc(self, size: int) -> int:
        if not isinstance(size, (int, np.integer)) or size < 0:
            raise GradeError(f"pool.py called raw_malloc({size!r}): expected a number of bytes >= 0")
        self.mallocs += 1
        addr, self.next = self.next, self.next + max(int(size), 1) + 4096
        self.live[addr] = int(size)
        return addr

    def free(self, addr: int) -> None:
        if addr not in self.live:
            raise GradeError(f"pool.py called raw_free({addr!r}) on an address that is not allocated (freed twice, or "
                             f"never from raw_malloc)")
        self.frees += 1
        del self.live[addr]


def new_pool(device: RecordingDevice):
    return pool_module().CachingPool(device.malloc, device.free)


def check_stats(pool, expected: dict[str, int], when: str) -> None:
    got = pool.stats()
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    if wrong:
        raise GradeError(f"pool.stats() {when}: " + ", ".join(f"{k} = {g!r}, expected {e}" for k, (g, e) in
                                                              wrong.items()))


@pytest.mark.hint("size_class(n): the smallest power of two >= max(n, 512)")
def test_pool_size_classes():
    pm = pool_module()
    for n, expected in [(0, 512), (1, 512), (511, 512), (512, 512), (513, 1024), (4096, 4096), (4097, 8192),
                        (1_000_003, 1 << 20), ((1 << 30) + 1, 1 << 31)]:
        got = pm.size_class(n)
        if got != expected:
            raise GradeError(f"size_class({n}) = {got!r}, expected {expected}")
    checks.expect_error("size_class(-1)", lambda: pm.size_class(-1), ValueError, "-1")


@pytest.mark.hint("a block is in use from malloc() until free(): never hand it out again before; pop it from the "
                  "free list when you hand it out")
def test_pool_never_hands_out_a_block_in_use():
    """Random interleavings of malloc and free: every handle in use is distinct, lies in a raw block at
    least as large as the request, and the statistics follow every call exactly."""
    device = RecordingDevice()
    pool, pm = new_pool(device), pool_module()
    r = checks.rng("pool-interleaved")
    live: dict[int, int] = {}  # handle -> size class
    hits = misses = peak = 0
    cached: dict[int, int] = {}  # size class -> number of free blocks the pool should hold
    for call in range(3000):
        if live and r.random() < 0.45:
            handle = list(live)[int(r.integers(len(live)))]
            size = live.pop(handle)
            pool.free(handle)
            cached[size] = cached.get(size, 0) + 1
        else:
            nbytes = int(r.choice([1, 100, 512, 513, 1000, 4096, 5000, int(r.integers(0, 70_000))]))
            size = pm.size_class(nbytes)
            before = device.mallocs
            handle = pool.malloc(nbytes)
            if handle in live:
                raise GradeError(f"malloc({nbytes}) (call {call}) handed out block {handle!r}, which is still in use "
                                 f"(handed out twice: two tensors would share its memory)")
            if handle not in device.live:
                raise GradeError(f"malloc({nbytes}) returned {handle!r}, which is no block of the device (raw_malloc "
                                 f"never returned it, or raw_free already took it back)")
            if device.live[handle] < nbytes:
                raise GradeError(f"malloc({nbytes}) handed out a block of {device.live[handle]} bytes: too small")
            if device.mallocs > before:
                misses += 1
                if cached.get(size):
                    raise GradeError(f"malloc({nbytes}) called raw_malloc although a freed block of its size class "
                                     f"({size} bytes) was cached: reuse it (a hit)")
            else:
                hits += 1
                cached[size] -= 1
            live[handle] = size
            peak = max(peak, sum(live.values()))
        check_stats(pool, {"bytes_in_use": sum(live.values()), "hits": hits, "misses": misses, "peak": peak,
                           "bytes_cached": sum(s * c for s, c in cached.items())}, f"after {call + 1} calls")


@pytest.mark.hint("free() keeps the block for the next request of its size class; a training loop asks for the "
                  "same sizes every step, so after the first steps every request is a hit")
def test_pool_training_loop_reuses_blocks_and_leaks_none():
    device = RecordingDevice()
    pool = new_pool(device)
    shapes = [4 * 33 * 16, 4 * 16, 4 * 33 * 16, 4 * 33, 4 * 16 * 16, 4, 4 * 33 * 16]  # one step's temporaries
    for step in range(100):
        handles = [pool.malloc(n) for n in shapes]
        for h in handles:
            pool.free(h)
        if step == 0:
            after_first = device.mallocs
    if device.mallocs != after_first:
        raise GradeError(f"{device.mallocs - after_first} raw allocations after the first of 100 identical steps: "
                         f"freed blocks are not reused")
    s = pool.stats()
    if s["bytes_in_use"] != 0:
        raise GradeError(f"stats()['bytes_in_use'] is {s['bytes_in_use']} after every block was freed (a leak)")
    if s["bytes_cached"] != sum(device.live.values()):
        raise GradeError(f"stats()['bytes_cached'] is {s['bytes_cached']}, but the pool holds "
                         f"{sum(device.live.values())} bytes from the device")


@pytest.mark.hint("release() calls raw_free on every cached block (never on one in use), empties the cache and "
                  "returns the bytes it gave back")
def test_pool_release_returns_the_cached_memory():
    device = RecordingDevice()
    pool = new_pool(device)
    kept = pool.malloc(3000)
    freed = [pool.malloc(n) for n in (10, 600, 600, 70_000)]
    for h in freed:
        pool.free(h)
    released = pool.release()
    expected = 512 + 1024 + 1024 + (1 << 17)
    if released != expected:
        raise GradeError(f"release() returned {released!r}, expected {expected} (the bytes of the 4 cached blocks)")
    if set(device.live) != {kept}:
        raise GradeError(f"after release() the device still holds {len(device.live)} blocks; expected only the one in "
                         f"use" + ("" if kept in device.live else " (and release() freed the block in use!)"))
    check_stats(pool, {"bytes_cached": 0, "bytes_in_use": 4096}, "after release()")
    before = device.mallocs
    pool.free(pool.malloc(600))
    if device.mallocs != before + 1:
        raise GradeError("malloc() after release() was served from a released block: release() must empty the cache")
    if pool.release() != 1024 or pool.release() != 0:
        raise GradeError("release() twice in a row: the second must release 0 bytes")


@pytest.mark.hint("free() of a handle that is not in use (a double free) must raise ValueError, not corrupt the cache")
def test_pool_double_free_raises():
    pool = new_pool(RecordingDevice())
    h = pool.malloc(100)
    pool.free(h)
    checks.expect_error("free() of a block already freed", lambda: pool.free(h), ValueError)
    checks.expect_error("free() of an address never handed out", lambda: pool.free(12345), ValueError)
    a, b = pool.malloc(100), pool.malloc(100)
    if a == b:
        raise GradeError("after a rejected double free, two mallocs returned the same block")


@pytest.mark.hint("from Phase 5 on your pool allocates the tensors' memory: a training step must reuse its blocks "
                  "and leak none")
def test_pool_is_the_device_allocator_over_a_training_loop():
    from minitorch import allocator

    device = backend.get_device()
    if allocator.active_pool(device) is None:
        raise GradeError("minitorch does not allocate through pool.py (is the file in the workspace?)")
    r = checks.rng("pool-training")
    model = nn.Sequential(nn.Linear(5, 16, seed=1), nn.ReLU(), nn.Linear(16, 1, seed=2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = minitorch.tensor(r.standard_normal((33, 5)).astype(np.float32))
    y = minitorch.tensor(r.standard_normal((33, 1)).astype(np.float32))

    def step() -> float:
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    gc.collect()
    warm = allocator.stats(device)
    for _ in range(5):
        step()
    gc.collect()
    after = allocator.stats(device)
    if after["misses"] != warm["misses"]:
        raise GradeError(f"steps 4-8 of a training loop still allocated from the device: misses {warm['misses']} -> "
                         f"{after['misses']}")
    if after["bytes_in_use"] != warm["bytes_in_use"]:
        raise GradeError(f"bytes in use grew from {warm['bytes_in_use']} to {after['bytes_in_use']} over five "
                         f"identical steps: blocks leak")
    cached = after["bytes_cached"]
    if allocator.release(device) != cached or allocator.stats(device)["bytes_cached"] != 0:
        raise GradeError("release() through minitorch.allocator did not give back every cached block")
