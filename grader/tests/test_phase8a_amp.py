"""Graded tests of Phase 8a, mixed precision: the loss scaler's device side (scaler.cu / scaler.py) and
``minitorch.amp`` running on it.

Run by `grader check phase8a`, on the active device (cuda or emu), with fresh random inputs (seed printed in the
report) and outputs poisoned before every launch. Unscaling is compared bit for bit with NumPy's float32 product
(one rounding, as the kernel's); the flag, the restore and the scale update against a Python model of their
contract; then a float16 training step with a GradScaler, captured in a graph, must skip exactly the steps whose
gradients overflow, replay after replay, as the same steps run eagerly do.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pytest
from phase8a_helpers import scaled_run

from grader import checks, learner_process
from grader.checks import GradeError, launch_checked
from minitorch import backend, kernels

ON_GPU = backend.get_device() == "cuda"
LENGTHS = [1, 7, 1000, 4099] + ([(1 << 22) + 3] if ON_GPU else [])


def scaler_module():
    return kernels.load_module("scaler.py")


def one(value: float):
    return backend.asarray(np.array([value], np.float32))


def host(a) -> np.ndarray:
    return backend.asnumpy(a)


# ---------------------------------------------------------------- unscale_check


@pytest.mark.kernel("scaler.cu", "unscale_check")
@pytest.mark.parametrize("n", LENGTHS, ids=str)
@pytest.mark.hint("g[i] * (*inv_scale) for every i < n in a grid-stride loop (one float32 product each), written "
                  "back in place; the flag raised only where a result is inf or NaN, and never lowered")
def test_unscale_check_values_and_flag(n):
    sc = scaler_module()
    gen = checks.rng("unscale", n)
    g_host = (gen.standard_normal(n) * 2.0 ** gen.integers(-20, 20, n)).astype(np.float32)
    inv = np.float32(1 / 3)  # not a power of two: every product is rounded once
    g, found = backend.asarray(g_host), one(0.0)
    launch_checked(f"unscale_check(g of {n}, 1/3, found)", lambda: sc.unscale_check(g, one(inv), found))
    want = g_host * inv  # NumPy's float32 product: the same single rounding
    checks.assert_close(g, want, rtol=0, atol=0, what=f"g after unscale_check (n = {n})")
    if host(found)[0] != 0:
        raise GradeError(f"unscale_check raised the flag for {n} finite gradients (found = {host(found)[0]})")
    found = one(1.0)  # a flag already raised (by an earlier gradient of the step) stays raised
    launch_checked("unscale_check(g, 1, found = 1)", lambda: sc.unscale_check(backend.asarray(g_host), one(1.0), found))
    if host(found)[0] == 0:
        raise GradeError("unscale_check lowered a raised flag: a step's later, finite gradients must not hide an "
                         "earlier overflow")
    for bad, where in ((np.inf, n - 1), (-np.inf, 0), (np.nan, n // 2)):
        values = g_host.copy()
        values[where] = bad
        found = one(0.0)
        launch_checked(f"unscale_check(g with {bad} at {where})",
                       lambda values=values, found=found: sc.unscale_check(backend.asarray(values), one(inv), found))
        if host(found)[0] != 1.0:
            raise GradeError(f"unscale_check of {n} gradients with {bad} at index {where}: found = {host(found)[0]}, "
                             f"expected 1 (the last element too: loop up to n)")
    big, found = backend.asarray(np.full(n, 3e38, np.float32)), one(0.0)  # finite, until multiplied by 4
    launch_checked("unscale_check(3e38, 4, found)", lambda: sc.unscale_check(big, one(4.0), found))
    if host(found)[0] != 1.0:
        raise GradeError("unscale_check: 3e38 * 4 is inf in float32; check the product, not the gradient before it")


@pytest.mark.kernel("scaler.cu", "unscale_check")
@pytest.mark.hint("many threads find an inf at once: raise the flag with atomicExch (a plain store from many "
                  "threads to one address is a race; check mode names it)", on="fault")
def test_unscale_check_has_no_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase8a --device emu)")
    from minitorch import emu
    from minitorch.emu.errors import RaceWarning

    sc = scaler_module()
    values = np.full(3000, np.inf, np.float32)
    found = one(0.0)
    with emu.check_mode(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RaceWarning)
        launch_checked("unscale_check(3000 infs) in check mode",
                       lambda: sc.unscale_check(backend.asarray(values), one(0.5), found))
    races = [w for w in caught if issubclass(w.category, RaceWarning)]
    if races:  # even a race of equal values: on a GPU it is undefined, and the emulator names it
        raise GradeError(f"unscale_check raises the flag with a race:\n  {races[0].message}")
    if host(found)[0] != 1.0:
        raise GradeError(f"unscale_check of 3000 infs: found = {host(found)[0]}, expected 1")


# ---------------------------------------------------------------- restore_if_found


@pytest.mark.kernel("scaler.cu", "restore_if_found")
@pytest.mark.parametrize("n", LENGTHS, ids=str)
@pytest.mark.hint("if *found != 0, copy every 32-bit word of saved into p (bit for bit: any dtype, NaN patterns "
                  "too), a grid-stride loop up to n words; if it is 0, write nothing")
def test_restore_if_found(n):
    sc = scaler_module()
    gen = checks.rng("restore", n)
    for dtype in (np.float32, np.int64):
        bits = gen.integers(0, 2 ** 32, n * np.dtype(dtype).itemsize // 4, dtype=np.uint64).astype(np.uint32)
        saved_host = bits.view(dtype)  # any pattern: NaNs with payloads, subnormals, large integers
        current_host = np.arange(n).astype(dtype)
        for flag in (0.0, 1.0, -2.5):
            p, saved = backend.asarray(current_host.copy()), backend.asarray(saved_host)
            launch_checked(f"restore_if_found(p, saved, found = {flag}) ({n} {np.dtype(dtype).name})",
                           lambda p=p, saved=saved, flag=flag: sc.restore_if_found(p, saved, one(flag)))
            want = current_host if flag == 0 else saved_host
            got = host(p)
            if not np.array_equal(got.view(np.uint32), np.ascontiguousarray(want).view(np.uint32)):
                wrong = np.flatnonzero(got.view(np.uint32) != np.ascontiguousarray(want).view(np.uint32))
                raise GradeError(f"restore_if_found with found = {flag}, {n} {np.dtype(dtype).name}: "
                                 f"{wrong.size} of {got.view(np.uint32).size} words differ, the first at word "
                                 f"{wrong[0]}: expected {'p left as it was' if flag == 0 else 'saved, bit for bit'}")


# ---------------------------------------------------------------- update_scale


def model_update(scale: float, count: float, found: bool, growth: float, backoff: float,
                 interval: int) -> tuple[float, float]:
    """The contract, in float32: (scale, good steps) after one update."""
    s, c = np.float32(scale), np.float32(count)
    if found:
        return float(s * np.float32(backoff)), 0.0
    c += np.float32(1)
    if c >= interval:
        with np.errstate(over="ignore"):
            grown = s * np.float32(growth)
        return float(grown if np.isfinite(grown) else s), 0.0
    return float(s), float(c)


@pytest.mark.kernel("scaler.cu", "update_scale")
@pytest.mark.hint("found: scale * backoff and the count back to 0; else count + 1 and, at `interval`, scale * "
                  "growth (unless that is inf) and the count back to 0; then inv_scale = 1 / scale")
def test_update_scale_follows_the_flags():
    sc = scaler_module()
    gen = checks.rng("update")
    flags = list(gen.random(40) < 0.3) + [False] * 7
    for growth, backoff, interval, start in ((2.0, 0.5, 3, 2.0 ** 16), (1.5, 0.25, 1, 1e30), (2.0, 0.5, 2, 3e38)):
        scale, inv, count = one(start), one(1 / start), one(0.0)
        want_s, want_c = start, 0.0
        for i, flag in enumerate(flags):
            found = one(1.0 if flag else 0.0)
            launch_checked("update_scale", partial(sc.update_scale, scale, inv, count, found, growth, backoff,
                                                   interval))
            want_s, want_c = model_update(want_s, want_c, flag, growth, backoff, interval)
            got = (host(scale)[0], host(count)[0], host(inv)[0])
            want = (np.float32(want_s), np.float32(want_c), np.float32(1) / np.float32(want_s))
            # 1/scale of a scale above 2^126 is subnormal: the H100 (2026-11-27) returned 0 there where the
            # emulator's host gives the subnormal; either is accepted (an inverse that small unscales nothing)
            tiny = abs(want[2]) < np.finfo(np.float32).tiny and got[2] == 0
            if got != want and not (tiny and got[:2] == want[:2]):
                raise GradeError(f"update_scale (growth {growth}, backoff {backoff}, interval {interval}), update "
                                 f"{i + 1} (found = {bool(flag)}): got scale, good steps, inverse {got}, expected "
                                 f"{want}")


# ---------------------------------------------------------------- the launcher


@pytest.mark.hint("scaler.py checks its arguments, and names what it expected and what it got, before launching")
def test_scaler_launcher_rejects_bad_arguments():
    sc = scaler_module()
    g, f = backend.asarray(np.ones(5, np.float32)), one(0.0)
    cases = [
        ("unscale_check with a float64 g", lambda: sc.unscale_check(backend.zeros(5, np.float64), one(1.0), f),
         TypeError),
        ("unscale_check with a two-element inv_scale", lambda: sc.unscale_check(g, backend.zeros(2, np.float32), f),
         ValueError),
        ("unscale_check with a host array", lambda: sc.unscale_check(np.ones(5, np.float32), one(1.0), f), TypeError),
        ("restore_if_found with saved of another dtype",
         lambda: sc.restore_if_found(g, backend.zeros(5, np.int32), f), TypeError),
        ("restore_if_found with saved of another shape",
         lambda: sc.restore_if_found(g, backend.zeros(4, np.float32), f), ValueError),
        ("update_scale with a two-element scale",
         lambda: sc.update_scale(backend.zeros(2, np.float32), one(1.0), one(0.0), f, 2.0, 0.5, 3), ValueError),
    ]
    for what, call, error in cases:
        try:
            call()
        except error:
            continue
        except Exception as exc:
            raise GradeError(f"scaler.py: {what} raised {type(exc).__name__}: {exc}; expected {error.__name__}") from exc
        raise GradeError(f"scaler.py: {what} was accepted; expected {error.__name__} naming what it expected")


@pytest.mark.kernel("scaler.cu", "unscale_check")
@pytest.mark.hint("the launcher launches your kernels and lets them write: nothing computed on the host")
def test_scaler_results_come_from_your_kernels():
    sc = scaler_module()
    g_host = checks.rng("replay scaler").standard_normal(333).astype(np.float32)
    inv, found = one(0.25), one(0.0)
    g = backend.asarray(g_host)
    checks.assert_computed_on_device("unscale_check(g, inv_scale, found)", partial(sc.unscale_check, g, inv, found),
                                     inputs=(inv,), in_place=(g, found), rtol=0, atol=0)


# ---------------------------------------------------------------- minitorch.amp on the learner's kernels


@pytest.mark.kernel("scaler.cu", "restore_if_found")
@pytest.mark.hint("a captured step with a GradScaler decides on the device: an overflowing step is undone "
                  "(restore_if_found), the scale halves (update_scale), two good steps double it")
def test_a_captured_scaled_step_skips_exactly_the_overflows():
    gen = checks.rng("scaled steps")
    small = [gen.standard_normal((8, 4)).astype(np.float32) for _ in range(4)]
    big = np.full((8, 4), 3000.0, np.float32)  # dL/dy * 2^12 is past float16's 65504: an overflow
    batches = [small[0], big, small[1], small[2], big, big, small[3]]
    eager = scaled_run(False, batches)  # in the judge: each launch goes to the learner's process
    scales = [e[0] for e in eager]
    want = [2.0 ** 12, 2.0 ** 11, 2.0 ** 11, 2.0 ** 12, 2.0 ** 11, 2.0 ** 10, 2.0 ** 10]
    if scales != want:
        raise GradeError(f"the scale after each of 7 steps (overflow at steps 2, 5, 6; growth every 2 good steps) "
                         f"was {scales}, expected {want}")
    if [e[1] for e in eager] != [1, 1, 2, 3, 3, 3, 4]:
        raise GradeError(f"Adam's step count after each step was {[e[1] for e in eager]}: an overflowing step must "
                         f"be undone, its count too")
    replayed = learner_process.run_in_learner_process(scaled_run, True, batches)
    for i, (a, b) in enumerate(zip(eager, replayed, strict=True)):
        if a[0] != b[0] or a[1] != b[1] or not all(np.array_equal(p, q) for p, q in zip(a[2], b[2], strict=True)):
            raise GradeError(f"step {i + 1} replayed from a graph differs from the same step run eagerly (scale "
                             f"{b[0]} vs {a[0]}, Adam step {b[1]} vs {a[1]}): nothing may be decided on the host")
