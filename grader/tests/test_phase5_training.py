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

from functools import partial
from typing import Any

import numpy as np
import pytest
from phase5_helpers import pool_over_a_training_loop, replayed_adam

import minitorch
from grader import checks, learner_process
from grader.checks import ODD_SIZES, GradeError, launch_checked
from minitorch import backend, kernels, optim

ON_GPU = backend.get_device() == "cuda"
BETAS = (0.9, 0.999)
# Adam's hyperparameters in the reference tests: the defaults (eps = 1e-8) with weight decay, and others, so that
# a launcher or kernel that hard-codes eps or a beta fails (eps = 1e-3 changes the step of every weight whose
# gradient is not much larger than it).
HYPER = {"default": dict(lr=0.01, weight_decay=0.1),
         "eps1e-3": dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.05)}
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


def run_adam(cls: type, p0: np.ndarray, grads: list[np.ndarray], *, capture: bool = False, **kw: Any) -> np.ndarray:
    """The parameter after len(grads) steps of minitorch's optimizer on the active device (the learner's
    kernels), eagerly or by replaying one captured step (the gradient refilled in place between replays)."""
    if capture:  # the capture and its replays, where the learner's code runs (its own process when isolated)
        weights, step_count = learner_process.run_in_learner_process(replayed_adam, cls.__name__, p0, grads, **kw)
    else:
        p = minitorch.tensor(p0.astype(np.float32), requires_grad=True)
        opt = cls([p], **kw)
        p.grad = minitorch.tensor(np.zeros_like(p0, dtype=np.float32))
        for g in grads:
            p.grad.copy_from(g.astype(np.float32))
            launch_checked(f"{cls.__name__}.step()", opt.step)
        weights, step_count = p.numpy(), opt.step_count
    if step_count != len(grads):
        raise GradeError(f"{cls.__name__}: the step count on the device is {step_count} after {len(grads)} "
                         f"steps: adam_step must add 1 to step[0] each time it runs")
    return weights


def as_given(x: Any) -> Any:
    """`x` as the device was given it (float32), in float64."""
    return np.asarray(x, np.float32).astype(np.float64) if isinstance(x, np.ndarray) else float(np.float32(x))


def check_adam(got: np.ndarray, p0: np.ndarray, grads: list[np.ndarray], what: str, cls: type, **kw: Any) -> None:
    decoupled = cls is optim.AdamW
    betas, eps = kw.get("betas", BETAS), kw.get("eps", 1e-8)
    # The float64 reference starts from the float32 values the kernels were given (weights, gradients, lr, betas,
    # eps, wd), as their results can only depend on those (off_the_steep says where that mattered).
    ref = partial(reference_adam, as_given(p0), [as_given(g) for g in grads], as_given(kw["lr"]),
                  tuple(as_given(b) for b in betas), as_given(eps), as_given(kw["weight_decay"]))
    expected = ref(decoupled)
    try:
        checks.assert_close(got, expected, rtol=1e-5, atol=1e-6, what=what)
    except GradeError as err:
        if np.allclose(got, ref(decoupled, bias_correction=False), rtol=1e-4, atol=1e-5):
            raise GradeError(f"{err}\n  these are the values WITHOUT bias correction: divide m by bias[0] = "
                             f"1 - beta1^t and v by bias[1] = 1 - beta2^t") from None
        if kw["weight_decay"] and np.allclose(got, ref(not decoupled), rtol=1e-5, atol=1e-6):
            raise GradeError(f"{err}\n  these are {'Adam' if decoupled else 'AdamW'}'s values: decoupled = 1 "
                             f"(AdamW) shrinks the weight, decoupled = 0 (Adam) adds wd * p to the gradient") from None
        default_eps = reference_adam(as_given(p0), [as_given(g) for g in grads], as_given(kw["lr"]),
                                     tuple(as_given(b) for b in betas), as_given(1e-8), as_given(kw["weight_decay"]),
                                     decoupled)
        if eps != 1e-8 and np.allclose(got, default_eps, rtol=1e-5, atol=1e-6):
            raise GradeError(f"{err}\n  these are the values for eps = 1e-8, not the optimizer's eps = {eps:g}: "
                             f"pass eps (and the betas) through to the kernel") from None
        raise


def adam_case(n: int, steps: int, *salt: object) -> tuple[np.ndarray, list[np.ndarray]]:
    r = checks.rng("adam", n, steps, *salt)
    return r.standard_normal(n), [r.standard_normal(n) * r.uniform(0.1, 3) for _ in range(steps)]


def off_the_steep(p0: np.ndarray, grads: list[np.ndarray], weight_decay: float,
                  decoupled: bool) -> list[np.ndarray]:
    """`grads` with the first one moved where it nearly cancels (Adam: with wd * p) to |g| >= 1e-3. Adam's first
    step moves a weight by lr * g / (|g| + eps): at |g| ~ 1e-7 that is steep, and a float32 kernel's rounding
    alone (of its inputs, or of wd * p before the sum) moves the weight by 1e-5 to 1e-4, past any fair tolerance:
    about one case in 3,000 failed an honest kernel so (an H200, 2026-11-27). A case off that slope tests the
    formulas, not the rounding."""
    first = grads[0] + (0.0 if decoupled else weight_decay) * p0
    steep = np.abs(first) < 1e-3
    return [np.where(steep, grads[0] + np.where(first < 0, -2e-3, 2e-3), grads[0]), *grads[1:]]


@ADAM
@pytest.mark.parametrize("hyper", list(HYPER))
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.parametrize("n", ODD_SIZES[:5])
@pytest.mark.hint("m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g, p -= lr * (m / bias[0]) / (sqrt(v / bias[1]) + eps); "
                  "AdamW shrinks p by lr*wd*p first, Adam adds wd*p to g; lr, betas, eps and wd are the optimizer's")
def test_adam_matches_float64_reference(cls, n, hyper):
    kw = HYPER[hyper]
    p0, grads = adam_case(n, 6, cls.__name__, hyper)
    grads = off_the_steep(p0, grads, kw["weight_decay"], cls is optim.AdamW)
    got = run_adam(cls, p0, grads, **kw)
    check_adam(got, p0, grads, f"{cls.__name__}({', '.join(f'{k}={v}' for k, v in kw.items())}) on {n} weights "
               f"after {len(grads)} steps", cls, **kw)


@ADAM
@pytest.mark.hint("bias correction: the first step moves every weight by about lr, whatever the gradient's size")
def test_adam_first_step_moves_every_weight_by_lr():
    r = checks.rng("adam-first")
    p0 = r.standard_normal(4099)
    grads = [r.choice([-1.0, 1.0], 4099) * 10.0 ** r.uniform(-3, 3, 4099)]  # |g| from 0.001 to 1000
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
    grads = off_the_steep(p0, grads, kw["weight_decay"], cls is optim.AdamW)
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
    # The loop runs where the learner's code runs (its own process when isolated: the tests' process then keeps the
    # default allocator); the statistics it reports are the pool's own.
    found = learner_process.run_in_learner_process(pool_over_a_training_loop)
    if not found["active"]:
        raise GradeError("minitorch does not allocate through pool.py (is the file in the workspace?)")
    warm, after = found["warm"], found["after"]
    if after["misses"] != warm["misses"]:
        raise GradeError(f"steps 4-8 of a training loop still allocated from the device: misses {warm['misses']} -> "
                         f"{after['misses']}")
    if after["bytes_in_use"] != warm["bytes_in_use"]:
        raise GradeError(f"bytes in use grew from {warm['bytes_in_use']} to {after['bytes_in_use']} over five "
                         f"identical steps: blocks leak")
    if found["released"] != after["bytes_cached"] or found["cached_after_release"] != 0:
        raise GradeError("release() through minitorch.allocator did not give back every cached block")


# ---------------------------------------------------------------- init.cu: Philox and the initialisers

UNIFORM = pytest.mark.kernel("init.cu", "philox_uniform")
NORMAL = pytest.mark.kernel("init.cu", "philox_normal")
# Random123's known answer for philox4x32-10, counter (0, 0, 0, 0), key (0, 0): the first block of seed 0.
KNOWN_ANSWER = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
SEEDS = [0, 1234, (7 << 32) | 3, 2**64 - 1]
# The asymptotic Kolmogorov distribution's critical value at the 0.1% level, times sqrt(n): a correct
# generator fails one KS test in a thousand runs.
KS_CRITICAL = 1.95


def init_module():
    return kernels.load_module("init.py")


def device_draw(kind: str, n: int, seed: int, offset: int = 0, scale: float = 1.0, **kw: int) -> np.ndarray:
    out = checks.poison(n)
    with checks.expect_launch("init.cu", f"philox_{kind}"):
        launch_checked(f"init.philox_{kind}(out of {n} elements, scale={scale}, seed={seed}, offset={offset})",
                       lambda: getattr(init_module(), f"philox_{kind}")(out, scale, seed, offset, **kw))
    return checks.to_host(out)


def reference_draw(kind: str, n: int, seed: int, offset: int = 0, scale: float = 1.0) -> np.ndarray:
    from minitorch import philox

    unit = 2 * philox.uniform(n, seed, offset) - 1 if kind == "uniform" else philox.normal(n, seed, offset)
    return unit * np.float32(scale)


def check_uniforms(got: np.ndarray, seed: int, offset: int, what: str, scale: float = 1.0) -> None:
    """Bit for bit against minitorch.philox, with a diagnosis of the first difference."""
    from minitorch import philox

    expected = reference_draw("uniform", got.size, seed, offset, scale)
    if np.array_equal(got.view(np.uint32), expected.view(np.uint32)):
        return
    i = int(np.flatnonzero(got.view(np.uint32) != expected.view(np.uint32))[0])
    hint = ""
    if checks.is_poison(got[i:i + 1])[0]:
        hint = " (never written: every element 4b .. 4b + 3 of each block b < (n + 3) / 4)"
    else:
        words = philox.random_uint32(got.size, seed, offset)
        k = np.round(((got[i] / np.float32(scale) + 1) / 2 * 2**24 - 1) / 2)
        if 0 <= k < 2**23 and abs(int(k) - (int(words[i]) >> 9)) <= 1:
            hint = " (the right word, turned into a float differently: (2 * (word >> 9) + 1) * 2^-24)"
        elif not 0 <= k < 2**23 or abs(got[i]) > abs(scale):
            hint = " (outside (-scale, scale): out = (2u - 1) * scale, u in (0, 1))"
        else:
            hint = (" (a different word: check the round multipliers, the key increments between rounds "
                    "(not before the first), which halves of the products go where, and the counter "
                    "(i / 4, offset_lo, offset_hi, 0) and key (seed_lo, seed_hi))")
    raise GradeError(f"{what}: element {i} is {got[i]!r}, expected {expected[i]!r} (minitorch.philox){hint}")


@UNIFORM
@pytest.mark.hint("Philox-4x32-10: ten rounds; (hi, lo) of M0 * c.x and M1 * c.z; c = (hi1 ^ c.y ^ k.x, lo1, hi0 ^ "
                  "c.w ^ k.y, lo0); the key grows by (W0, W1) between rounds")
def test_philox_known_answer():
    """The first four uniforms of seed 0 carry the top 23 bits of Random123's known answer."""
    got = device_draw("uniform", 4, seed=0)
    k = np.round(((got.astype(np.float64) + 1) / 2 * 2**24 - 1) / 2).astype(np.int64)
    expected = [w >> 9 for w in KNOWN_ANSWER]
    if k.tolist() != expected:
        raise GradeError(f"philox4x32_10(counter (0, 0, 0, 0), key (0, 0)) gives words whose top 23 bits are "
                         f"{[hex(v) for v in k.tolist()]}; Random123's known answer is {[hex(w) for w in KNOWN_ANSWER]} "
                         f"(top 23 bits {[hex(v) for v in expected]})")


@UNIFORM
@pytest.mark.parametrize("seed", SEEDS, ids=hex)
@pytest.mark.parametrize("n", ODD_SIZES[:5])
@pytest.mark.hint("element i is word i % 4 of the block for counter (i / 4, offset_lo, offset_hi, 0) under key "
                  "(seed_lo, seed_hi); u = (2 * (word >> 9) + 1) * 2^-24; out = (2u - 1) * scale")
def test_uniforms_bit_for_bit(n, seed):
    offset = 5 if seed % 2 else (3 << 32) | 1
    got = device_draw("uniform", n, seed, offset, scale=0.75)
    check_uniforms(got, seed, offset, f"philox_uniform(n={n}, seed={seed:#x}, offset={offset:#x}, scale=0.75)", 0.75)


@NORMAL
@pytest.mark.parametrize("seed", SEEDS[:3], ids=hex)
@pytest.mark.parametrize("n", ODD_SIZES[:5])
@pytest.mark.hint("Box-Muller on the pairs (u0, u1), (u2, u3) of each block: r = sqrt(-2 ln u_even), then r cos(2 pi "
                  "u_odd) and r sin(2 pi u_odd), in double, rounded to float, times scale")
def test_normals_within_one_ulp(n, seed):
    """Within one float32 ulp of minitorch.philox (the device's double-precision log, sin and cos may
    differ from the host's in the last bit), and equal for all but a few elements."""
    got = device_draw("normal", n, seed, 11, scale=2.5)
    expected = reference_draw("normal", n, seed, 11, scale=2.5)
    what = f"philox_normal(n={n}, seed={seed:#x}, offset=11, scale=2.5)"
    if checks.is_poison(got).any():
        i = int(np.flatnonzero(checks.is_poison(got))[0])
        raise GradeError(f"{what}: element {i} was never written")
    ulps = np.abs(got.view(np.int32).astype(np.int64) - expected.view(np.int32).astype(np.int64))
    bad = np.flatnonzero(ulps > 1)
    if bad.size:
        i = int(bad[0])
        pair = "(the pair's two normals swapped: cos first, then sin)" if i + 1 < n and np.isclose(
            got[i], expected[i ^ 1], rtol=1e-6) else ""
        raise GradeError(f"{what}: element {i} is {got[i]!r}, expected {expected[i]!r} (minitorch.philox), "
                         f"{int(ulps[i])} ulp apart; {bad.size} elements are more than 1 ulp off {pair}")
    if n >= 257 and np.count_nonzero(ulps) > max(2, n // 1000):
        raise GradeError(f"{what}: {np.count_nonzero(ulps)} of {n} elements differ by an ulp; expected almost none "
                         f"(compute Box-Muller in double, round once to float, then multiply by scale)")


def ks_statistic(sample: np.ndarray, cdf) -> float:
    x = np.sort(np.asarray(sample, dtype=np.float64))
    n, f = x.size, cdf(np.sort(np.asarray(sample, dtype=np.float64)))
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def normal_cdf(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    return 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))


STAT_N = 200_003


@UNIFORM
@pytest.mark.hint("uniform in (-scale, scale): every value equally likely")
def test_uniform_statistics():
    """Mean, variance and the Kolmogorov-Smirnov distance to U(-1, 1), on a fresh seed each run."""
    seed = int(checks.rng("uniform-stats").integers(2**63))
    u = device_draw("uniform", STAT_N, seed).astype(np.float64)
    what = f"{STAT_N} uniforms of seed {seed}"
    if not (np.all(u > -1) and np.all(u < 1)):
        raise GradeError(f"{what}: values outside (-1, 1): min {u.min()}, max {u.max()}")
    if abs(u.mean()) > 5 * np.sqrt(1 / 3 / STAT_N) or abs(u.var() - 1 / 3) > 0.01:
        raise GradeError(f"{what}: mean {u.mean():.5f}, variance {u.var():.5f}; U(-1, 1) has 0 and 1/3")
    d = ks_statistic(u, lambda x: (x + 1) / 2)
    if d > KS_CRITICAL / np.sqrt(STAT_N):
        raise GradeError(f"{what}: Kolmogorov-Smirnov distance to U(-1, 1) {d:.5f} > {KS_CRITICAL / np.sqrt(STAT_N):.5f}"
                         f" (the 0.1% critical value): not uniform")


@NORMAL
@pytest.mark.hint("normals from two independent uniforms per pair (Box-Muller): r from one, the angle from the other")
def test_normal_statistics():
    """Mean, variance and the Kolmogorov-Smirnov distance to N(0, 1), on a fresh seed each run."""
    seed = int(checks.rng("normal-stats").integers(2**63))
    z = device_draw("normal", STAT_N, seed).astype(np.float64)
    what = f"{STAT_N} normals of seed {seed}"
    if not np.all(np.isfinite(z)):
        raise GradeError(f"{what}: {int((~np.isfinite(z)).sum())} are not finite (log of 0? u must be in (0, 1))")
    if abs(z.mean()) > 5 / np.sqrt(STAT_N) or abs(z.var() - 1) > 0.02:
        raise GradeError(f"{what}: mean {z.mean():.5f}, variance {z.var():.5f}; N(0, 1) has 0 and 1")
    d = ks_statistic(z, normal_cdf)
    if d > KS_CRITICAL / np.sqrt(STAT_N):
        raise GradeError(f"{what}: Kolmogorov-Smirnov distance to N(0, 1) {d:.5f} > {KS_CRITICAL / np.sqrt(STAT_N):.5f}"
                         f" (the 0.1% critical value): not normal")
    pairs = z[: STAT_N // 2 * 2].reshape(-1, 2)
    r = np.corrcoef(pairs[:, 0] ** 2, pairs[:, 1] ** 2)[0, 1]
    if abs(r) > 0.02:
        raise GradeError(f"{what}: the squares of the two normals of a pair are correlated (r = {r:.3f}): they must "
                         f"come from two independent uniforms, z0 = r cos(2 pi u2), z1 = r sin(2 pi u2)")


@pytest.mark.parametrize("kind", [pytest.param("uniform", marks=UNIFORM), pytest.param("normal", marks=NORMAL)])
@pytest.mark.hint("a grid-stride loop over the blocks of four: any grid must give the same numbers")
def test_init_kernels_any_grid(kind):
    n = 40_009  # 10,003 blocks of four, the last one partial
    for blocks in (1, 3):
        got = device_draw(kind, n, 99, 0, blocks=blocks)
        with checks.grid_stride_advice(got, blocks, 256):
            if kind == "uniform":
                check_uniforms(got, 99, 0, f"philox_uniform with a grid of {blocks} block(s)")
            else:
                checks.assert_close(got, reference_draw("normal", n, 99).astype(np.float64), rtol=1e-6, atol=1e-6,
                                    what=f"philox_normal with a grid of {blocks} block(s)")


@pytest.mark.parametrize("kind", [pytest.param("uniform", marks=UNIFORM), pytest.param("normal", marks=NORMAL)])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 4099])
@pytest.mark.hint("write element 4b + j only when it is < n: the last block of four may be partial")
def test_init_writes_nothing_past_n(kind, n):
    got = device_draw(kind, n, 5)
    if kind == "uniform":
        check_uniforms(got, 5, 0, f"philox_uniform of {n} elements")


@pytest.mark.hint("minitorch.init draws on the device with your kernels from Phase 5 on")
def test_initialisers_draw_with_your_kernels():
    from minitorch import init

    w = minitorch.zeros((300, 77))
    with checks.expect_launch("init.cu", "philox_normal"):
        init.kaiming_normal_(w, nonlinearity="relu", seed=31)
    std = np.float32(np.sqrt(2.0 / 300))
    expected = reference_draw("normal", w.size, 31, 0, float(std)).reshape(w.shape)
    checks.assert_close(w.numpy(), expected.astype(np.float64), rtol=1e-6, atol=1e-7,
                        what="init.kaiming_normal_ of a (300, 77) weight, seed 31")
    v = minitorch.zeros((64, 33))
    with checks.expect_launch("init.cu", "philox_uniform"):
        init.xavier_uniform_(v, seed=8)
    check_uniforms(v.numpy().reshape(-1), 8, 0, "init.xavier_uniform_ of a (64, 33) weight", np.sqrt(6 / 97))


@pytest.mark.parametrize("kind", ["uniform", "normal"])
@pytest.mark.hint("compute the numbers with your kernel, on the device")
def test_init_results_come_from_your_kernels(kind):
    out = checks.poison(4099)
    checks.assert_computed_on_device(f"init.philox_{kind}", lambda: getattr(init_module(), f"philox_{kind}")(
        out, 1.0, 77), outputs=(out,), rtol=0, atol=0)


@pytest.mark.hint("check the arguments before launching: TypeError for a wrong dtype, ValueError for a bad seed")
def test_init_launchers_reject_bad_arguments():
    im = init_module()
    checks.expect_error("philox_uniform into a float64 array",
                        lambda: im.philox_uniform(backend.asarray(np.zeros(5)), 1.0, 1), TypeError, "float64")
    checks.expect_error("philox_normal with seed -1", lambda: im.philox_normal(backend.zeros(5), 1.0, -1),
                        ValueError, "-1")
    checks.expect_error("philox_normal with seed 2**64", lambda: im.philox_normal(backend.zeros(5), 1.0, 2**64),
                        ValueError, str(2**64))


@pytest.mark.parametrize("kind", [pytest.param("uniform", marks=UNIFORM), pytest.param("normal", marks=NORMAL)])
@pytest.mark.perf
@pytest.mark.hint("one Philox block per thread gives four numbers: write them as one float4 where you can, and "
                  "launch enough blocks to fill the GPU")
def test_perf_init_against_curand(kind, record_property):
    """Numbers written per second, against cuRAND's Philox4_32_10 generator (cupy.random.RandomState)."""
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    n = checks.PERF_BYTES // 4
    out = cupy.empty(n, np.float32)
    rs = cupy.random.RandomState(seed=1, method=cupy.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
    fn = getattr(init_module(), f"philox_{kind}")
    reference = (lambda: rs.uniform(-1, 1, n, dtype=np.float32)) if kind == "uniform" else (
        lambda: rs.standard_normal(n, dtype=np.float32))
    checks.perf_ratio(f"philox_{kind}", lambda: fn(out, 1.0, 1), reference, 4 * n, f"phase5.init_{kind}_vs_curand",
                      record_property, reference_name="cuRAND Philox (cupy.random)", flush_l2=False)


# ---------------------------------------------------------------- the deliverable: SGD against Adam

RECORD = "sales_optim.json"
MODELS = {"start": "sales_start.npz", "sgd": "sales_sgd.npz", "adam": "sales_adam.npz",
          "adam_at_sgd_loss": "sales_adam_at_sgd_loss.npz"}
LAB_SECTION = '"The deliverable: SGD against Adam, from one initialisation" in labs/phase5_fast.ipynb'
SEQUENTIAL = {"hidden.weight": "0.weight", "hidden.bias": "0.bias", "out.weight": "2.weight", "out.bias": "2.bias"}
# A float32 training run evaluated in float32, against the same model in float64: the same loss to well
# within this (the losses are means of ~10^4..10^5 squared residuals).
LOSS_RTOL = 0.02


def load_deliverable() -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """The record and the four parameter files the lab saved, the parameters under Phase 4's names."""
    import json

    workspace = kernels.workspace_dir()
    missing = [name for name in (RECORD, *MODELS.values()) if not (workspace / name).exists()]
    if missing:
        raise GradeError(f"{', '.join(missing)} not found in your workspace ({workspace}): run the section "
                         f"{LAB_SECTION} to its end (sales_adam_at_sgd_loss.npz is saved only when Adam "
                         f"reached SGD's final loss). Then grade again.")
    try:
        record = json.loads((workspace / RECORD).read_text())
        models = {}
        for key, name in MODELS.items():
            with np.load(workspace / name) as saved:
                state = {k: saved[k].astype(np.float64) for k in saved.files}
            absent = sorted(set(SEQUENTIAL.values()) - set(state))
            if absent:
                raise GradeError(f"{name} lacks {', '.join(absent)} (it holds {', '.join(sorted(state))}): save the "
                                 f"nn.Sequential(Linear, ReLU, Linear) with its state_dict")
            models[key] = {phase4_name: state[seq_name] for phase4_name, seq_name in SEQUENTIAL.items()}
    except (ValueError, OSError, KeyError) as exc:
        raise GradeError(f"cannot read the saved deliverable ({exc}); run the section {LAB_SECTION} again") from exc
    keys = ("features", "log_features", "log_target", "feature_mean", "feature_std", "target_mean", "target_std",
            "config", "sgd_losses", "adam_losses", "adam_epoch_at_sgd_loss", "init_seed")
    absent = [k for k in keys if k not in record]
    if absent:
        raise GradeError(f"{RECORD} lacks {', '.join(absent)}: save it as the lab's last deliverable cell does")
    record["record_file"] = RECORD
    return record, models


_ROWS: dict[str, tuple] = {}


def deliverable_rows(record: dict) -> tuple:
    """Phase 4's sales_rows for this record, read once per grading run (parsing sales.tsv takes seconds)."""
    import json

    from grader.deliverables import sales_rows

    key = json.dumps([record.get("sales_sha256"), record["features"], record["log_features"]])
    if key not in _ROWS:
        _ROWS[key] = sales_rows(record)
    return _ROWS[key]


def training_rows(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """The training features and prices the models were trained on (every k-th row when reduced)."""
    x_train, _, price_train, _ = deliverable_rows(record)
    rows = record["config"].get("train_rows")
    if rows:
        step = len(x_train) // int(rows)
        x_train, price_train = x_train[::step][:rows], price_train[::step][:rows]
    return x_train, price_train


def training_loss(record: dict, params: dict[str, np.ndarray], x: np.ndarray, price: np.ndarray) -> float:
    """The MSE of the normalised log price, in float64, through Phase 4's predict_prices."""
    from grader.deliverables import predict_prices

    with np.errstate(divide="ignore", invalid="ignore"):
        log_error = np.log(predict_prices(record, params, x)) - np.log(price)
    if not np.all(np.isfinite(log_error)):
        return float("inf")
    return float(np.mean(log_error**2) / float(record["target_std"]) ** 2)


@pytest.mark.hint(f"run the section {LAB_SECTION} to its end; both models are Phase 4's network, so they pass "
                  f"its bar by far")
def test_sales_sequential_models_pass_phase4_mae_bar():
    from grader.deliverables import predict_prices

    record, models = load_deliverable()
    _, x_test, price_train, price_test = deliverable_rows(record)
    baseline = float(np.mean(np.abs(price_test - price_train.mean())))
    limit = checks.threshold("phase4.sales_mae_ratio")
    for key in ("sgd", "adam"):
        predicted = predict_prices(record, models[key], x_test)
        mae = float(np.mean(np.abs(predicted - price_test)))
        if not np.isfinite(mae) or not mae < limit * baseline:
            raise GradeError(f"the {key.upper()} model ({MODELS[key]}): test MAE {mae:.3f} is {mae / baseline:.3f} x "
                             f"the mean predictor's {baseline:.3f}; less than {limit} x is needed "
                             f"(phase4.sales_mae_ratio); evaluated on the {len(price_test):,} test sales")


@pytest.mark.hint("Adam from the same start, with the lab's learning rate: its loss must reach SGD's final loss before "
                  "the last epoch; the recorded losses must be the saved models' (the grader recomputes them)")
def test_adam_reaches_sgd_final_loss_in_fewer_epochs():
    record, models = load_deliverable()
    sgd_losses, adam_losses = record["sgd_losses"], record["adam_losses"]
    epochs = int(record["config"]["epochs"])
    if len(sgd_losses) != epochs or len(adam_losses) != epochs:
        raise GradeError(f"{RECORD}: {len(sgd_losses)} SGD and {len(adam_losses)} Adam losses for {epochs} epochs")
    x_train, price_train = training_rows(record)
    recomputed = {key: training_loss(record, models[key], x_train, price_train)
                  for key in ("sgd", "adam", "adam_at_sgd_loss")}
    reached = record["adam_epoch_at_sgd_loss"]
    recorded = {"sgd": sgd_losses[-1], "adam": adam_losses[-1],
                "adam_at_sgd_loss": adam_losses[reached - 1] if reached else float("nan")}
    for key, loss in recomputed.items():
        if not abs(loss - recorded[key]) <= LOSS_RTOL * abs(recorded[key]):
            raise GradeError(f"{MODELS[key]}: its training loss, recomputed in float64 on the {len(x_train):,} training "
                             f"rows, is {loss:.4e}; {RECORD} records {recorded[key]:.4e}: the saved model is not the "
                             f"one whose loss was recorded")
    first = next((e + 1 for e, loss in enumerate(adam_losses) if loss <= sgd_losses[-1]), None)
    if first is None or first >= epochs:
        raise GradeError(f"Adam's recorded losses never reach SGD's final loss {sgd_losses[-1]:.4e} before the last of "
                         f"the {epochs} epochs (Adam's best: {min(adam_losses):.4e})")
    if reached != first:
        raise GradeError(f"{RECORD} says Adam reached SGD's final loss at epoch {reached}, its recorded losses at "
                         f"epoch {first}")
    if not recomputed["adam_at_sgd_loss"] <= recomputed["sgd"] * (1 + LOSS_RTOL):
        raise GradeError(f"recomputed in float64, Adam's model after {first} epochs has training loss "
                         f"{recomputed['adam_at_sgd_loss']:.4e}, SGD's after {epochs} {recomputed['sgd']:.4e}")


@pytest.mark.hint("both runs start from make_model's weights: He-uniform (relu) with seed INIT_SEED, Xavier-uniform "
                  "with INIT_SEED + 1, zero biases, drawn by your init.cu")
def test_deliverable_starts_from_your_initialisation():
    """The saved start is minitorch.init's draw on the host (minitorch.philox): bit for bit, since the
    uniforms of your init.cu are."""
    from minitorch import init

    record, models = load_deliverable()
    start, seed = models["start"], int(record["init_seed"])
    n_features, hidden = start["hidden.weight"].shape
    expected = {
        "hidden.weight": init.kaiming_uniform_(minitorch.zeros((n_features, hidden), device="cpu"),
                                               nonlinearity="relu", seed=seed),
        "out.weight": init.xavier_uniform_(minitorch.zeros((hidden, 1), device="cpu"), seed=seed + 1)}
    for name, draw in expected.items():
        if start[name].shape != draw.shape or not np.array_equal(start[name], draw.numpy().astype(np.float64)):
            kind = "He-uniform (relu)" if name == "hidden.weight" else "Xavier-uniform"
            raise GradeError(f"{MODELS['start']}: {SEQUENTIAL[name]} is not the {kind} draw of seed "
                             f"{seed + (name == 'out.weight')} (minitorch.init, with your generator)")
    for name in ("hidden.bias", "out.bias"):
        if np.any(start[name] != 0):
            raise GradeError(f"{MODELS['start']}: {SEQUENTIAL[name]} is not zero")
