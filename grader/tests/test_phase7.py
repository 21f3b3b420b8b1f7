"""Graded tests of Phase 7 (transformers): gelu, layernorm, embedding, attention and clip kernels and launchers.

Run by `grader check phase7`, on the active device (cuda or emu), with fresh random inputs (seed printed in the
report), odd sizes (sequences of 1 and of prime lengths, head dimensions 16, 32 and 64, vocabularies and widths
that are no multiple of any tile), outputs poisoned with NaN before every launch, and a check that the learner's
kernels really ran. Every value is compared with NumPy in float64. Performance (GPU only) is a ratio to the copy
bandwidth or to PyTorch, measured in the same run. The deliverable is in test_phase7_gpt.py.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np
import pytest
from phase7_helpers import gpt_training_step, replayed_clip, replayed_gpt_steps

from grader import checks, learner_process
from grader.checks import ODD_SIZES, GradeError, launch_checked
from minitorch import backend, kernels

EPS32 = float(np.finfo(np.float32).eps)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
ON_GPU = backend.get_device() == "cuda"


def module(name: str) -> Any:
    return kernels.load_module(name)


def dev(host: np.ndarray) -> Any:
    return backend.asarray(np.ascontiguousarray(host))


def host(a: Any) -> np.ndarray:
    return checks.to_host(a).astype(np.float64)


def run(what: str, file: str, function: str, call: Any) -> None:
    """Launch through the learner's launcher, captured (no copy between host and device inside it), require a
    launch of `function`, report faults by kind. Make the call's arrays before: `dev(x)` inside it is a copy."""
    checks.reset_launches()
    checks.run_without_host_transfers(what, call)
    checks.require_launch(file, function)


def unwritten_note(got: np.ndarray) -> str:
    n = int(checks.is_poison(got).sum())
    return f"\n  {n} of {got.size} values were never written (still the NaN poison)" if n else ""


# ---------------------------------------------------------------- GELU

GELU_FWD = pytest.mark.kernel("gelu.cu", "gelu_forward")
GELU_BWD = pytest.mark.kernel("gelu.cu", "gelu_backward")


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def gelu_tanh_slope(x: np.ndarray) -> np.ndarray:
    t = np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)


def _phi(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * (1 + np.vectorize(erf)(x / math.sqrt(2)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    return x * _phi(x)


def gelu_erf_slope(x: np.ndarray) -> np.ndarray:
    return _phi(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def check_gelu(got: Any, expected: np.ndarray, erf_version: np.ndarray, what: str, formula: str) -> None:
    try:
        checks.assert_close(got, expected, rtol=1e-5, atol=2e-6, what=what)
    except GradeError as err:
        values = host(got)
        if values.shape == erf_version.shape and np.allclose(values, erf_version, rtol=1e-5, atol=2e-6):
            raise GradeError(f"{err}\n  these are the values of the exact (erf) GELU{formula}: forward and "
                             f"backward must both use GPT-2's tanh approximation") from None
        raise


@GELU_FWD
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("out[i] = 0.5 x (1 + tanhf(sqrt(2/pi) (x + 0.044715 x^3))) for every i < n (grid-stride loop)")
def test_gelu_forward_values(n):
    x = checks.rng("gelu", n).uniform(-8, 8, n).astype(np.float32)
    out = checks.poison(n)
    xd = dev(x)
    run(f"gelu_forward(x of {n} elements, out)", "gelu.cu", "gelu_forward",
        lambda: module("gelu.py").gelu_forward(xd, out))
    x64 = x.astype(np.float64)
    sample = slice(None) if n < 5000 else slice(0, 5000)  # the erf reference is slow: diagnose on a sample
    check_gelu(checks.to_host(out)[sample], gelu_tanh(x64)[sample], gelu_erf(x64[sample]),
               f"gelu_forward, n={n}", "")
    checks.assert_close(out, gelu_tanh(x64), rtol=1e-5, atol=2e-6, what=f"gelu_forward, n={n}")


@GELU_BWD
@pytest.mark.parametrize("n", ODD_SIZES[:5])
@pytest.mark.hint("grad_in = grad_out * gelu'(x), the derivative of the forward's tanh formula")
def test_gelu_backward_values(n):
    r = checks.rng("gelu-backward", n)
    x = r.uniform(-5, 5, n).astype(np.float32)
    g = r.standard_normal(n).astype(np.float32)
    grad_in = checks.poison(n)
    xd, gd = dev(x), dev(g)
    run(f"gelu_backward(x, grad_out of {n} elements, grad_in)", "gelu.cu", "gelu_backward",
        lambda: module("gelu.py").gelu_backward(xd, gd, grad_in))
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    check_gelu(grad_in, g64 * gelu_tanh_slope(x64), g64 * gelu_erf_slope(x64), f"gelu_backward, n={n}",
               "'s derivative")


@GELU_FWD
@pytest.mark.hint("tanhf saturates at +-1: gelu(x) is x for large x and 0 for very negative x, never NaN")
def test_gelu_large_inputs():
    x = np.array([-1e4, -100, -30, -10, -1e-30, 0, 1e-30, 10, 30, 100, 1e4], np.float32)
    out, grad = checks.poison(x.size), checks.poison(x.size)
    gm = module("gelu.py")
    xd = dev(x)
    run("gelu_forward of large |x|", "gelu.cu", "gelu_forward", lambda: gm.gelu_forward(xd, out))
    launch_checked("gelu_backward of large |x|", lambda: gm.gelu_backward(dev(x), dev(np.ones_like(x)), grad))
    x64 = x.astype(np.float64)
    # x**3 overflows float32 at |x| = 1e4: tanh(+-inf) is still +-1
    with np.errstate(over="ignore"):
        checks.assert_close(out, gelu_tanh(x64), rtol=1e-5, atol=1e-6, what="gelu_forward of large |x|")
        checks.assert_close(grad, gelu_tanh_slope(x64), rtol=1e-5, atol=1e-6, what="gelu_backward of large |x|")


@GELU_FWD
@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 41)], ids=str)
@pytest.mark.hint("gelu is elementwise over arrays of ANY shape (the framework passes (B, T, 4C) activations): n is "
                  "x.size, every element, not len(x), the first dimension")
def test_gelu_launchers_any_shape(shape):
    r = checks.rng("gelu-shape", shape)
    x, g = r.uniform(-4, 4, shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)
    out, grad_in = checks.poison(shape), checks.poison(shape)
    gm = module("gelu.py")
    xd, gd = dev(x), dev(g)
    run(f"gelu_forward(x of shape {shape}, out)", "gelu.cu", "gelu_forward", lambda: gm.gelu_forward(xd, out))
    run(f"gelu_backward(x, grad_out of shape {shape}, grad_in)", "gelu.cu", "gelu_backward",
        lambda: gm.gelu_backward(xd, gd, grad_in))
    x64 = x.astype(np.float64)
    checks.assert_close(out, gelu_tanh(x64), rtol=1e-5, atol=2e-6, what=f"gelu_forward, x of shape {shape}")
    checks.assert_close(grad_in, g * gelu_tanh_slope(x64), rtol=1e-5, atol=2e-6,
                        what=f"gelu_backward, x of shape {shape}")


@pytest.mark.parametrize("kernel", ["gelu_forward", "gelu_backward"])
@pytest.mark.hint("a grid-stride loop: i += gridDim.x * blockDim.x, so that any grid covers any n")
def test_gelu_kernels_any_grid(kernel):
    n = 5003
    r = checks.rng("gelu-grid", kernel)
    x, g = r.uniform(-4, 4, n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    out = checks.poison(n)
    k = kernels.load_kernel("gelu.cu", kernel)
    x64 = x.astype(np.float64)
    if kernel == "gelu_forward":
        args, expected = (dev(x), out, np.int64(n)), gelu_tanh(x64)
    else:
        args, expected = (dev(x), dev(g), out, np.int64(n)), g * gelu_tanh_slope(x64)
    checks.assert_grid_stride(f"{kernel} launched with 3 blocks of 64 threads", k, args,
                              {"out": (out, expected)}, rtol=1e-5, atol=2e-6)


# ---------------------------------------------------------------- LayerNorm

LN_FWD = pytest.mark.kernel("layernorm.cu", "layernorm_forward")
LN_BWD = pytest.mark.kernel("layernorm.cu", "layernorm_backward")
# Each value test runs both kernels of a pass, through the launcher's `variant`: "warp" (a warp a row, what "best"
# runs on a GPU) and "thread" (a thread a row, what "best" runs on the emulator); each check names its kernel.
LN_FORWARD_KERNEL = {"warp": "layernorm_forward", "thread": "layernorm_forward_thread"}
LN_BACKWARD_KERNEL = {"warp": "layernorm_backward", "thread": "layernorm_backward_thread"}
LN_FWD_VARIANTS = pytest.mark.parametrize("variant", [
    pytest.param(v, marks=pytest.mark.kernel("layernorm.cu", k)) for v, k in LN_FORWARD_KERNEL.items()])
LN_BWD_VARIANTS = pytest.mark.parametrize("variant", [
    pytest.param(v, marks=pytest.mark.kernel("layernorm.cu", k)) for v, k in LN_BACKWARD_KERNEL.items()])
# (rows, cols): one element, short rows (a warp has idle lanes), rows of 33 and 1000 (lanes loop), a prime number of
# rows, GPT-2's width.
LN_SHAPES = [(1, 1), (7, 3), (31, 64), (257, 33), (100, 1000), (4099, 17), (64, 768)]


def ln_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float, *, ddof: int = 0,
                 eps_outside: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    mean = x.mean(axis=1)
    var = x.var(axis=1, ddof=ddof) if x.shape[1] > ddof else np.zeros(len(x))
    rstd = 1 / (np.sqrt(var) + eps) if eps_outside else 1 / np.sqrt(var + eps)
    return (x - mean[:, None]) * rstd[:, None] * w + b, mean, rstd


def ln_inputs(rows: int, cols: int, *salt: object, scale: float = 2.0, offset: float = 1.0) -> tuple:
    r = checks.rng("layernorm", rows, cols, *salt)
    x = (r.standard_normal((rows, cols)) * scale + offset).astype(np.float32)
    return x, r.uniform(0.5, 2, cols).astype(np.float32), r.standard_normal(cols).astype(np.float32)


def device_layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5, variant: str = "warp"
                     ) -> tuple:
    rows, cols = x.shape
    out, mean, rstd = checks.poison((rows, cols)), checks.poison(rows), checks.poison(rows)
    xd, wd, bd = dev(x), dev(w), dev(b)
    run(f"layernorm_forward(x of shape {x.shape}, eps={eps:g}, variant={variant!r})", "layernorm.cu",
        LN_FORWARD_KERNEL[variant],
        lambda: module("layernorm.py").layernorm_forward(xd, wd, bd, out, mean, rstd, eps, variant=variant))
    return checks.to_host(out), checks.to_host(mean), checks.to_host(rstd)


def check_layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float, got: tuple, what: str,
                    rtol: float = 1e-4) -> None:
    out, mean, rstd = got
    exp_out, exp_mean, exp_rstd = ln_reference(x, w, b, eps)
    scale = float(np.abs(exp_out).max()) if exp_out.size else 1.0
    try:
        checks.assert_close(out, exp_out, rtol=rtol, atol=rtol * scale, what=f"{what}: out")
        checks.assert_close(rstd, exp_rstd, rtol=rtol, what=f"{what}: rstd (1 / sqrt(var + eps))")
    except GradeError as err:
        for note, kwargs in (("the SAMPLE variance (divided by cols - 1): LayerNorm divides by cols",
                              {"ddof": 1}),
                             ("eps added AFTER the square root, 1 / (sqrt(var) + eps): it goes inside, "
                              "1 / sqrt(var + eps)", {"eps_outside": True})):
            alt_out, _, alt_rstd = ln_reference(x, w, b, eps, **kwargs)
            if (np.allclose(out, alt_out, rtol=rtol, atol=rtol * scale)
                    and np.allclose(rstd, alt_rstd, rtol=rtol)):
                raise GradeError(f"{err}\n  these values come from {note}") from None
        raise
    checks.assert_close(mean, exp_mean, rtol=1e-5, atol=1e-6 * float(np.abs(x).max() or 1), what=f"{what}: mean")


@LN_FWD_VARIANTS
@pytest.mark.parametrize("rows, cols", LN_SHAPES, ids=lambda v: str(v))
@pytest.mark.hint("a warp (or a thread) per row: the mean, then the mean of (x - mean)^2 (divided by cols), "
                  "rstd = 1 / sqrtf(var + eps); every row and every column written")
def test_layernorm_forward_values(rows, cols, variant):
    x, w, b = ln_inputs(rows, cols)
    got = device_layernorm(x, w, b, variant=variant)
    check_layernorm(x, w, b, 1e-5, got, f"{LN_FORWARD_KERNEL[variant]}, x of shape {(rows, cols)}")


@LN_FWD_VARIANTS
@pytest.mark.parametrize("cols", [2, 3, 8, 64])
@pytest.mark.hint("the population variance: the mean of (x - mean)^2 over the row, divided by cols (not cols - 1)")
def test_layernorm_population_variance(cols, variant):
    x, w, b = ln_inputs(37, cols, "population", scale=1.0)
    check_layernorm(x, w, b, 1e-5, device_layernorm(x, w, b, variant=variant),
                    f"{LN_FORWARD_KERNEL[variant]}, rows of {cols} columns")


@LN_FWD_VARIANTS
@pytest.mark.parametrize("std", [3e-3, 1e-3, 0.0])
@pytest.mark.hint("rstd = 1 / sqrt(var + eps): eps inside the square root (it matters when var is near eps, and "
                  "keeps a constant row finite)")
def test_layernorm_eps_inside_the_square_root(std, variant):
    x, w, b = ln_inputs(40, 64, "eps", std, scale=std, offset=0.5)
    got = device_layernorm(x, w, b, eps=1e-5, variant=variant)
    # float32 rounding of x around 0.5 is 3e-8: a relative error of var ~ 1e-5 at std 1e-3
    check_layernorm(x, w, b, 1e-5, got, f"{LN_FORWARD_KERNEL[variant]}, rows of standard deviation {std:g}",
                    rtol=2e-3)


@LN_FWD_VARIANTS
@pytest.mark.parametrize("eps", [1e-3, 0.1])
@pytest.mark.hint("use the eps argument (layernorm_forward(..., eps)) in the launcher and the kernel: not a "
                  "hard-coded 1e-5")
def test_layernorm_other_eps(eps, variant):
    # rows whose variance is about eps: rstd with eps = 1e-5 instead differs by up to 40%
    x, w, b = ln_inputs(37, 45, "other-eps", eps, scale=math.sqrt(eps), offset=0.0)
    what = f"{LN_FORWARD_KERNEL[variant]} with eps={eps:g}"
    got = device_layernorm(x, w, b, eps=eps, variant=variant)
    try:
        check_layernorm(x, w, b, eps, got, what)
    except GradeError as err:
        alt_out, _, alt_rstd = ln_reference(x, w, b, 1e-5)
        if np.allclose(got[2], alt_rstd, rtol=1e-4):
            raise GradeError(f"{err}\n  these values come from eps = 1e-5: the eps argument is ignored") from None
        raise
    g = checks.rng("layernorm-grad", "other-eps", eps).standard_normal(x.shape).astype(np.float32)
    check_layernorm_backward(g, x, w, device_layernorm_backward(g, x, w, eps=eps, variant=variant),
                             f"{LN_BACKWARD_KERNEL[variant]} after a forward with eps={eps:g}", eps=eps)


@LN_FWD_VARIANTS
@pytest.mark.parametrize("offset", [1e3, 1e4])
@pytest.mark.hint("two passes: the mean first, then the mean of (x - mean)^2; E[x^2] - E[x]^2 loses every digit "
                  "in float32 when the mean is large")
def test_layernorm_is_stable_with_a_large_mean(offset, variant):
    x, w, b = ln_inputs(33, 100, "stable", offset, scale=1.0, offset=offset)
    got = device_layernorm(x, w, b, variant=variant)
    # x itself holds offset to float32 precision (offset * 6e-8): the reference sees the same rounded values
    check_layernorm(x, w, b, 1e-5, got, f"{LN_FORWARD_KERNEL[variant]}, mean {offset:g}, standard deviation 1",
                    rtol=3e-3)


def ln_backward_reference(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> tuple:
    g, x = g.astype(np.float64), x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(x.var(axis=1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    gw = g * w
    dx = rstd * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    return dx, (g * xhat).sum(axis=0), g.sum(axis=0), np.abs(g * xhat).sum(axis=0), np.abs(g).sum(axis=0)


def device_layernorm_backward(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float = 1e-5,
                              variant: str = "warp") -> tuple:
    """The backward of `variant` after the forward of the same variant (which saves mean and rstd)."""
    rows, cols = x.shape
    b = np.zeros(cols, np.float32)
    xd, wd = dev(x), dev(w)
    lm = module("layernorm.py")
    out, mean, rstd = backend.empty((rows, cols)), backend.empty(rows), backend.empty(rows)
    launch_checked(f"layernorm_forward(variant={variant!r})",
                   lambda: lm.layernorm_forward(xd, wd, dev(b), out, mean, rstd, eps, variant=variant))
    dx, dw, db = checks.poison((rows, cols)), checks.poison(cols), checks.poison(cols)
    gd = dev(g)
    run(f"layernorm_backward(x of shape {x.shape}, variant={variant!r})", "layernorm.cu", LN_BACKWARD_KERNEL[variant],
        lambda: lm.layernorm_backward(gd, xd, wd, mean, rstd, dx, dw, db, variant=variant))
    if variant == "thread":
        checks.require_launch("layernorm.cu", "layernorm_param_partials")
    checks.require_launch("layernorm.cu", "layernorm_param_grads")
    return checks.to_host(dx), checks.to_host(dw), checks.to_host(db)


def check_layernorm_backward(g, x, w, got, what: str, eps: float = 1e-5) -> None:
    dx, dw, db = got
    exp_dx, exp_dw, exp_db, abs_dw, abs_db = ln_backward_reference(g, x, w, eps)
    checks.assert_close(dx, exp_dx, rtol=1e-3, atol=1e-4 * float(np.abs(exp_dx).max() or 1), what=f"{what}: grad_x")
    rows = x.shape[0]
    # sums over rows, in any order: within rows * eps of the sum of the terms' magnitudes
    for name, got_sum, exp_sum, magnitude in (("grad_weight", dw, exp_dw, abs_dw), ("grad_bias", db, exp_db, abs_db)):
        bound = 4 * (rows + 8) * EPS32 * magnitude + 1e-30
        bad = ~(np.abs(got_sum.astype(np.float64) - exp_sum) <= bound)
        if bad.any():
            c = int(np.flatnonzero(bad)[0])
            note = " (never written: the NaN poison)" if checks.is_poison(got_sum[c:c + 1]).all() else ""
            raise GradeError(f"{what}: {name}: {int(bad.sum())} of {bad.size} columns differ from the sum over the "
                             f"{rows} rows; first: column {c}, expected {exp_sum[c]!r}, got {got_sum[c]!r}{note}")


@LN_BWD_VARIANTS
@pytest.mark.parametrize("rows, cols", LN_SHAPES + [(5000, 64)], ids=lambda v: str(v))
@pytest.mark.hint("grad_x = rstd (g - mean(g) - xhat mean(g xhat)), g = grad_out * weight; the parameter "
                  "gradients sum over every row: partial rows (a block's, or a chunk of rows' with "
                  "layernorm_param_partials), then layernorm_param_grads adds them")
def test_layernorm_backward_values(rows, cols, variant):
    x, w, _ = ln_inputs(rows, cols, "backward")
    g = checks.rng("layernorm-grad", rows, cols).standard_normal((rows, cols)).astype(np.float32)
    check_layernorm_backward(g, x, w, device_layernorm_backward(g, x, w, variant=variant),
                             f"{LN_BACKWARD_KERNEL[variant]}, x of shape {(rows, cols)}")


@pytest.mark.kernel("layernorm.cu", "layernorm_backward")
@pytest.mark.parametrize("grid, threads", [(1, 32), (3, 64), (5, 256)], ids=str)
@pytest.mark.hint("warps loop over the rows (a grid-stride loop counted in warps): any grid and any block of a "
                  "multiple of 32 threads covers any number of rows")
def test_layernorm_kernels_any_grid(grid, threads):
    rows, cols = 203, 40
    x, w, b = ln_inputs(rows, cols, "grid", grid)
    g = checks.rng("layernorm-grid", grid).standard_normal((rows, cols)).astype(np.float32)
    xd, wd, bd = dev(x), dev(w), dev(b)
    out, mean, rstd = checks.poison((rows, cols)), checks.poison(rows), checks.poison(rows)
    what = f"layernorm_forward launched with {grid} block(s) of {threads} threads for {rows} rows"
    launch_checked(what, lambda: kernels.load_kernel("layernorm.cu", "layernorm_forward")(
        (grid,), (threads,), (xd, wd, bd, out, mean, rstd, np.int32(rows), np.int32(cols), np.float32(1e-5))))
    with checks.grid_stride_advice(out, grid, threads):
        check_layernorm(x, w, b, 1e-5, (checks.to_host(out), checks.to_host(mean), checks.to_host(rstd)), what)
    dx, wp, bp = checks.poison((rows, cols)), checks.poison((grid, cols)), checks.poison((grid, cols))
    what = f"layernorm_backward launched with {grid} block(s) of {threads} threads for {rows} rows"
    launch_checked(what, lambda: kernels.load_kernel("layernorm.cu", "layernorm_backward")(
        (grid,), (threads,), (dev(g), xd, wd, mean, rstd, dx, wp, bp, np.int32(rows), np.int32(cols)),
        shared_mem=threads // 32 * 2 * cols * 4))  # 2 * cols floats for each warp
    dw, db = checks.poison(cols), checks.poison(cols)
    launch_checked("layernorm_param_grads launched with 1 block of (32, 3) threads",
                   lambda: kernels.load_kernel("layernorm.cu", "layernorm_param_grads")(
                       (1,), (32, 3), (wp, bp, dw, db, np.int32(grid), np.int32(cols))))
    with checks.grid_stride_advice(dx, grid, threads):
        check_layernorm_backward(g, x, w, (checks.to_host(dx), checks.to_host(dw), checks.to_host(db)), what)


@pytest.mark.kernel("layernorm.cu", "layernorm_backward")
@pytest.mark.hint("a __syncthreads() after zeroing the shared sums and another before reading them; in "
                  "layernorm_param_grads, one before the row-0 sums and one before the next columns", on="fault")
def test_layernorm_has_no_shared_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase7 --device emu)")
    from minitorch import emu

    # the launcher's blocks of several warps: each warp's sums follow the other warps' zeroing of the shared memory,
    # and the block's sum over the warps' slices follows every warp's last row;
    # rows of 70 columns (the general path) and of 72 (a multiple of 4: the row-in-registers path of the reference)
    for cols in (70, 72):
        x, w, _ = ln_inputs(77, cols, "race")
        g = checks.rng("layernorm-race", cols).standard_normal((77, cols)).astype(np.float32)
        with emu.check_mode():
            got = device_layernorm_backward(g, x, w, variant="warp")
        check_layernorm_backward(g, x, w, got, f"layernorm_backward, rows of {cols} columns, under the emulator's "
                                               "check mode")
    # layernorm_param_grads with ONE block of (32, 4) threads for 70 columns: the block loops over three groups of
    # 32 columns, rewriting sw and sb for the next group after the row-0 threads read them
    r = checks.rng("layernorm-race", "partials")
    wp, bp = (r.standard_normal((5, 70)).astype(np.float32) for _ in range(2))
    dw, db = checks.poison(70), checks.poison(70)
    what = "layernorm_param_grads launched with 1 block of (32, 4) threads for 5 partial rows of 70 columns"
    with emu.check_mode():
        launch_checked(f"{what} under the emulator's check mode",
                       lambda: kernels.load_kernel("layernorm.cu", "layernorm_param_grads")(
                           (1,), (32, 4), (dev(wp), dev(bp), dw, db, np.int32(5), np.int32(70))))
    for name, got_sum, partials in (("grad_weight", dw, wp), ("grad_bias", db, bp)):
        with checks.grid_stride_advice(got_sum, 1, 128):
            checks.assert_close(got_sum, partials.astype(np.float64).sum(axis=0), rtol=1e-5,
                                atol=1e-5 * float(np.abs(partials).sum(axis=0).max()), what=f"{what}: {name}")


# LayerNorm a thread a row (layernorm_forward_thread, layernorm_backward_thread) and its parameter gradients a thread
# a column (layernorm_param_partials): what "best" runs on the emulator. The value tests above run them through the
# launcher (variant="thread"); these launch them on grids of their own, and check the launcher's choice.

@pytest.mark.kernel("layernorm.cu", "layernorm_backward_thread")
@pytest.mark.parametrize("grid, threads", [(1, 32), (3, 64), (5, 256)], ids=str)
@pytest.mark.hint("threads loop over the rows (row += gridDim.x * blockDim.x), and layernorm_param_partials's over "
                  "the columns (c += gridDim.x * blockDim.x), its block row blockIdx.y over chunk_rows rows (the "
                  "last chunk shorter): any grid covers any shape")
def test_layernorm_thread_kernels_any_grid(grid, threads):
    rows, cols, chunk_rows = 203, 40, 37  # 6 chunks of rows, the last of 18; 40 columns: more than a block of 32
    x, w, b = ln_inputs(rows, cols, "thread-grid", grid)
    g = checks.rng("layernorm-thread-grid", grid).standard_normal((rows, cols)).astype(np.float32)
    xd, wd, bd, gd = dev(x), dev(w), dev(b), dev(g)
    out, mean, rstd = checks.poison((rows, cols)), checks.poison(rows), checks.poison(rows)
    what = f"layernorm_forward_thread launched with {grid} block(s) of {threads} threads for {rows} rows"
    launch_checked(what, lambda: kernels.load_kernel("layernorm.cu", "layernorm_forward_thread")(
        (grid,), (threads,), (xd, wd, bd, out, mean, rstd, np.int32(rows), np.int32(cols), np.float32(1e-5))))
    with checks.grid_stride_advice(out, grid, threads):
        check_layernorm(x, w, b, 1e-5, (checks.to_host(out), checks.to_host(mean), checks.to_host(rstd)), what)
    dx = checks.poison((rows, cols))
    what = f"layernorm_backward_thread launched with {grid} block(s) of {threads} threads for {rows} rows"
    launch_checked(what, lambda: kernels.load_kernel("layernorm.cu", "layernorm_backward_thread")(
        (grid,), (threads,), (gd, xd, wd, mean, rstd, dx, np.int32(rows), np.int32(cols))))
    exp_dx, _, _, _, _ = ln_backward_reference(g, x, w)
    with checks.grid_stride_advice(dx, grid, threads):
        checks.assert_close(dx, exp_dx, rtol=1e-3, atol=1e-4 * float(np.abs(exp_dx).max()), what=f"{what}: grad_x")
    chunks = (rows + chunk_rows - 1) // chunk_rows
    wp, bp = checks.poison((chunks, cols)), checks.poison((chunks, cols))
    what = (f"layernorm_param_partials launched with ({grid}, {chunks}) blocks of {threads} threads for {cols} "
            f"columns, chunks of {chunk_rows} of the {rows} rows")
    launch_checked(what, lambda: kernels.load_kernel("layernorm.cu", "layernorm_param_partials")(
        (grid, chunks), (threads,), (gd, xd, mean, rstd, wp, bp, np.int32(rows), np.int32(cols),
                                     np.int32(chunk_rows))))
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    xhat = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    for name, got, terms in (("weight_partial", wp, g64 * xhat), ("bias_partial", bp, g64)):
        expected = np.array([terms[k * chunk_rows:(k + 1) * chunk_rows].sum(axis=0) for k in range(chunks)])
        scale = np.array([np.abs(terms[k * chunk_rows:(k + 1) * chunk_rows]).sum(axis=0) for k in range(chunks)])
        with checks.grid_stride_advice(got, grid, threads):
            checks.assert_close(got, expected, rtol=1e-4, atol=1e-5 * float(scale.max()),
                                what=f"{what}: {name} (row k: the sum over rows k * {chunk_rows} ... of column c)")


@pytest.mark.kernel("layernorm.cu", "layernorm_forward_thread")
@pytest.mark.hint("variant=\"best\" runs default_variant(): the warp kernels on a GPU, the thread-a-row kernels "
                  "elsewhere (the emulator)")
def test_layernorm_best_runs_the_kernels_of_the_device():
    thread = backend.get_device() != "cuda"
    x, w, b = ln_inputs(70, 33, "best")
    g = checks.rng("layernorm-best").standard_normal((70, 33)).astype(np.float32)
    lm = module("layernorm.py")
    xd, wd, bd, gd = dev(x), dev(w), dev(b), dev(g)
    out, mean, rstd = backend.empty((70, 33)), backend.empty(70), backend.empty(70)
    dx, dw, db = backend.empty((70, 33)), backend.empty(33), backend.empty(33)
    checks.reset_launches()
    launch_checked("layernorm_forward and layernorm_backward (variant \"best\")", lambda: (
        lm.layernorm_forward(xd, wd, bd, out, mean, rstd), lm.layernorm_backward(gd, xd, wd, mean, rstd, dx, dw, db)))
    device = "the emulator" if thread else "a GPU"
    for kernel_of in (LN_FORWARD_KERNEL, LN_BACKWARD_KERNEL):
        wanted, other = (kernel_of["thread"], kernel_of["warp"]) if thread else (kernel_of["warp"], kernel_of["thread"])
        if kernels.launch_count("layernorm.cu", wanted) == 0 or kernels.launch_count("layernorm.cu", other):
            raise GradeError(f"on {device} variant=\"best\" must launch `{wanted}`, not `{other}`; launched: "
                             f"{wanted} {kernels.launch_count('layernorm.cu', wanted)} time(s), {other} "
                             f"{kernels.launch_count('layernorm.cu', other)} time(s)")
    check_layernorm(x, w, b, 1e-5, (checks.to_host(out), checks.to_host(mean), checks.to_host(rstd)),
                    "layernorm_forward (variant \"best\")")
    check_layernorm_backward(g, x, w, (checks.to_host(dx), checks.to_host(dw), checks.to_host(db)),
                             "layernorm_backward (variant \"best\")")


@pytest.mark.parametrize("variant", ["warp", "thread"])
@pytest.mark.parametrize("launcher", ["layernorm_forward", "layernorm_backward"])
@pytest.mark.hint("compute the result with your kernels, on the device: nothing computed with NumPy, CuPy or "
                  "PyTorch and copied in after (or instead of) the launch")
def test_layernorm_results_come_from_your_kernels(launcher, variant):
    what, call, inputs, outputs, in_place = _replay_case(launcher)
    call = partial(call.func, *call.args, variant=variant)
    # the weight's and bias's gradients, summed by atomics if a learner adds them so: another order on every run
    atomic = launcher == "layernorm_backward"
    checks.assert_computed_on_device(f"{what} (variant={variant!r})", call, inputs=inputs, outputs=outputs,
                                     in_place=in_place, rtol=1e-3 if atomic else 1e-5, atol=1e-5 if atomic else 1e-6)


# ---------------------------------------------------------------- embeddings

EMB_FWD = pytest.mark.kernel("embedding.cu", "embedding_forward")
EMB_BWD = pytest.mark.kernel("embedding.cu", "embedding_backward")
# (vocab, dim, shape of the ids)
EMB_CASES = [(1, 1, (1,)), (65, 7, (3, 11)), (257, 64, (64, 64)), (13, 33, (1000,)), (65, 16, (2, 3, 5))]


def device_embedding(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    out = checks.poison(ids.shape + (table.shape[1],))
    run(f"embedding_forward(ids of shape {ids.shape}, weight of shape {table.shape})", "embedding.cu",
        "embedding_forward",
        partial(module("embedding.py").embedding_forward, dev(ids.astype(np.int32)), dev(table), out))
    return checks.to_host(out)


def device_embedding_backward(ids: np.ndarray, g: np.ndarray, vocab: int) -> np.ndarray:
    grad = checks.poison((vocab, g.shape[-1]))
    run(f"embedding_backward(ids of shape {ids.shape}, grad_out of shape {g.shape})", "embedding.cu",
        "embedding_backward",
        partial(module("embedding.py").embedding_backward, dev(ids.astype(np.int32)), dev(g), grad))
    return checks.to_host(grad)


@EMB_FWD
@pytest.mark.parametrize("vocab, dim, shape", EMB_CASES, ids=str)
@pytest.mark.hint("out[i, d] = weight[idx[i], d] for every element e = i * dim + d (grid-stride)")
def test_embedding_forward_values(vocab, dim, shape):
    r = checks.rng("embedding", vocab, dim, shape)
    table = r.standard_normal((vocab, dim)).astype(np.float32)
    ids = r.integers(0, vocab, shape)
    checks.assert_bitwise_equal(device_embedding(ids, table), table[ids],
                                what=f"embedding_forward, {vocab} x {dim} table, ids of shape {shape}")


def check_scatter(got: np.ndarray, ids: np.ndarray, g: np.ndarray, what: str) -> None:
    vocab, dim = got.shape
    expected = np.zeros((vocab, dim))
    np.add.at(expected, ids.reshape(-1), g.reshape(-1, dim).astype(np.float64))
    magnitude = np.zeros((vocab, dim))
    np.add.at(magnitude, ids.reshape(-1), np.abs(g.reshape(-1, dim).astype(np.float64)))
    bound = 2 * (np.bincount(ids.reshape(-1), minlength=vocab)[:, None] + 1) * EPS32 * magnitude
    bad = ~(np.abs(got.astype(np.float64) - expected) <= bound)
    if not bad.any():
        return
    v, d = (int(i) for i in np.argwhere(bad)[0])
    count = int((ids == v).sum())
    lines = [f"{what}: {int(bad.any(axis=1).sum())} rows of grad_weight differ from the sum of their ids' gradient "
             f"rows; first: row {v} (id {v} occurs {count} times), column {d}: expected {expected[v, d]!r}, "
             f"got {got[v, d]!r}"]
    rows = g.reshape(-1, dim)[ids.reshape(-1) == v, d].astype(np.float64)
    if count > 1 and np.any(np.isclose(got[v, d], rows, rtol=1e-6, atol=0)):
        lines.append(f"  that is ONE of its {count} gradient rows: the threads of a repeated id overwrite each "
                     f"other; add with atomicAdd")
    elif count == 0 and got[v, d] != 0:
        lines.append("  that id does not occur: its row must be 0 (zero grad_weight before adding)")
    raise GradeError("\n".join(lines))


@EMB_BWD
@pytest.mark.parametrize("vocab, dim, shape", EMB_CASES, ids=str)
@pytest.mark.hint("grad_weight[idx[i], d] += grad_out[i, d] with atomicAdd, after zeroing grad_weight")
def test_embedding_backward_values(vocab, dim, shape):
    r = checks.rng("embedding-backward", vocab, dim, shape)
    ids = r.integers(0, vocab, shape)
    g = r.standard_normal(shape + (dim,)).astype(np.float32)
    check_scatter(device_embedding_backward(ids, g, vocab), ids, g,
                  f"embedding_backward, {vocab} x {dim} table, ids of shape {shape}")


@EMB_BWD
@pytest.mark.parametrize("case", ["one id everywhere", "few ids"])
@pytest.mark.hint("a repeated id (a character occurs many times in a batch) gets the SUM of its gradient rows: "
                  "atomicAdd, never a plain store")
def test_embedding_backward_accumulates_repeated_ids(case):
    r = checks.rng("embedding-repeated", case)
    ids = np.full((16, 64), 7) if case == "one id everywhere" else r.integers(0, 3, (16, 64))
    g = r.standard_normal((16, 64, 32)).astype(np.float32)
    check_scatter(device_embedding_backward(ids, g, 65), ids, g, f"embedding_backward, {case}")


@EMB_BWD
@pytest.mark.hint("threads of different blocks add into one row when an id repeats: atomicAdd, never a plain `+=` "
                  "(the emulator runs one thread after the other and loses no update; a GPU loses most of them)",
                  on="fault")
def test_embedding_backward_has_no_device_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase7 --device emu); on a GPU, "
                    "test_embedding_backward_accumulates_repeated_ids sees the lost updates")
    from minitorch import emu

    r = checks.rng("embedding-race")
    ids = r.integers(0, 3, (4, 80))  # 320 ids x 8 columns: several blocks add into the same three rows
    g = r.standard_normal((4, 80, 8)).astype(np.float32)
    with emu.check_mode():
        got = device_embedding_backward(ids, g, 5)
    check_scatter(got, ids, g, "embedding_backward under the emulator's check mode")


@EMB_FWD
@pytest.mark.hint("an id outside [0, vocab) gives a row of NaN (__int_as_float(0x7fffffff)), and adds nothing in "
                  "the backward")
def test_embedding_ids_out_of_range():
    table = checks.rng("embedding-range").standard_normal((5, 3)).astype(np.float32)
    ids = np.array([0, 5, -1, 4, 1000])
    out = device_embedding(ids, table)
    bad = [i for i in (1, 2, 4) if not np.all(np.isnan(out[i])) or checks.is_poison(out[i]).any()]
    if bad:
        raise GradeError(f"embedding_forward: id {ids[bad[0]]} is outside [0, 5): its row must be NaN computed by "
                         f"the kernel (not left unwritten), got {out[bad[0]]!r}")
    checks.assert_bitwise_equal(out[[0, 3]], table[[0, 4]], what="embedding_forward, the ids in range")
    g = np.ones((5, 3), np.float32)
    grad = device_embedding_backward(ids, g, 5)
    expected = np.zeros((5, 3))
    expected[[0, 4]] = 1
    checks.assert_close(grad, expected, rtol=0, what="embedding_backward with ids out of range (skipped)")


@pytest.mark.parametrize("kernel", ["embedding_forward", "embedding_backward"])
@pytest.mark.hint("a grid-stride loop over the n * dim elements: any grid covers any number of ids")
def test_embedding_kernels_any_grid(kernel):
    r = checks.rng("embedding-grid", kernel)
    vocab, dim, n = 19, 13, 301
    table = r.standard_normal((vocab, dim)).astype(np.float32)
    ids = r.integers(0, vocab, n)
    g = r.standard_normal((n, dim)).astype(np.float32)
    k = kernels.load_kernel("embedding.cu", kernel)
    if kernel == "embedding_forward":
        out = checks.poison((n, dim))
        checks.assert_grid_stride("embedding_forward launched with 3 blocks of 64 threads", k,
                                  (dev(ids.astype(np.int32)), dev(table), out, np.int64(n), np.int32(dim),
                                   np.int32(vocab)), {"out": (out, table[ids])}, rtol=0)
    else:
        grad = backend.zeros((vocab, dim))
        launch_checked("embedding_backward launched with 3 blocks of 64 threads", lambda: k(
            (3,), (64,), (dev(ids.astype(np.int32)), dev(g), grad, np.int64(n), np.int32(dim), np.int32(vocab))))
        check_scatter(checks.to_host(grad), ids, g, "embedding_backward launched with 3 blocks of 64 threads")


# ---------------------------------------------------------------- batched GEMM

BMM = pytest.mark.kernel("attention.cu", "bmm")
BMM_REGTILE = pytest.mark.kernel("attention.cu", "bmm_regtile")
TRANSPOSES = pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)],
                                     ids=["AB", "ABt", "AtB", "AtBt"])
# (batch, M, K, N): single elements; odd sizes; attention's shapes for head dims 16, 32, 64 (Q Kᵀ: T x D x T,
# P V: T x T x D); sequences of 1 and of prime lengths; tiles cut at every edge; rows of a multiple of 4 floats
# (16-byte loads) over several steps of k, the last one partial.
BMM_SHAPES = [(1, 1, 1, 1), (3, 7, 5, 9), (4, 64, 16, 64), (4, 64, 64, 16), (2, 31, 32, 31), (2, 37, 37, 64),
              (5, 1, 16, 1), (2, 33, 70, 31), (1, 129, 7, 65), (2, 68, 36, 132)]


def bmm_operands(shape: tuple, ta: bool, tb: bool, *salt: object) -> tuple[np.ndarray, np.ndarray]:
    batch, m, k, n = shape
    r = checks.rng("bmm", shape, ta, tb, *salt)
    a = r.uniform(-1, 1, (batch, k, m) if ta else (batch, m, k)).astype(np.float32)
    b = r.uniform(-1, 1, (batch, n, k) if tb else (batch, k, n)).astype(np.float32)
    return a, b


def check_bmm(got: Any, a: np.ndarray, b: np.ndarray, ta: bool, tb: bool, what: str) -> None:
    a64 = np.swapaxes(a, 1, 2).astype(np.float64) if ta else a.astype(np.float64)
    b64 = np.swapaxes(b, 1, 2).astype(np.float64) if tb else b.astype(np.float64)
    expected = a64 @ b64
    values = host(got)
    if values.shape != expected.shape:
        raise GradeError(f"{what}: shape {values.shape}, expected {expected.shape}")
    bound = a64.shape[2] * EPS32 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    bad = ~(np.abs(values - expected) <= bound)
    if bad.any():
        z, i, j = (int(v) for v in np.argwhere(bad)[0])
        raise GradeError(f"{what}: {int(bad.sum())} of {bad.size} values differ from op(A)·op(B) (float64) by more "
                         f"than K·eps·(|A|·|B|); first: matrix {z}, C[{i}][{j}]: expected {expected[z, i, j]!r}, "
                         f"got {values[z, i, j]!r}{unwritten_note(checks.to_host(got))}")


def check_bmm_variant(shape: tuple, ta: bool, tb: bool, variant: str) -> None:
    """bmm(variant=...) through the learner's launcher: "tiled" launches bmm, "regtile" bmm_regtile."""
    a, b = bmm_operands(shape, ta, tb)
    batch, m, _, n = shape
    kernel = "bmm_regtile" if variant == "regtile" else "bmm"
    out = checks.poison((batch, m, n))
    what = f"{kernel} of {batch} x ({m} x {shape[2]}) @ ({shape[2]} x {n})" + (", A transposed" * ta) + (
        ", B transposed" * tb)
    run(what, "attention.cu", kernel,
        partial(module("attention.py").bmm, dev(a), dev(b), out, ta, tb, variant=variant))
    check_bmm(out, a, b, ta, tb, what)


@BMM
@pytest.mark.parametrize("shape", BMM_SHAPES, ids=lambda v: "x".join(map(str, v)))
@TRANSPOSES
@pytest.mark.hint("blockIdx.z picks the matrix (offset by z * stride); with ta, A is stored (K, M) and op(A)(m, k) "
                  "is A[k * M + m]; loads outside the matrices read 0, stores outside C are skipped")
def test_bmm_values(shape, ta, tb):
    check_bmm_variant(shape, ta, tb, "tiled")


@BMM_REGTILE
@pytest.mark.parametrize("shape", BMM_SHAPES, ids=lambda v: "x".join(map(str, v)))
@TRANSPOSES
@pytest.mark.hint("bmm_regtile: blockIdx.z picks the matrix; thread (tx, ty) computes rows 4 ty.. and columns 4 tx.. "
                  "of the block's 64 x 64 tile; op(A)(m, k) is A[m * K + k], or A[k * M + m] with ta (op(B) "
                  "likewise); the rows and columns past C's edge are not stored")
def test_bmm_regtile_values(shape, ta, tb):
    check_bmm_variant(shape, ta, tb, "regtile")


@BMM
@pytest.mark.hint("a __syncthreads() after the tiles are stored and another before they are overwritten",
                  on="fault")
def test_bmm_has_no_shared_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase7 --device emu)")
    from minitorch import emu

    # K = 40: several steps over k; odd rows (loads one float at a time) and rows of a multiple of 4 (16-byte loads)
    for (m, n), ta, tb in (((33, 35), False, True), ((33, 35), True, False), ((36, 68), False, False)):
        a, b = bmm_operands((2, m, 40, n), ta, tb, "race")
        out = checks.poison((2, m, n))
        with emu.check_mode():
            run("bmm under the emulator's check mode", "attention.cu", "bmm",
                partial(module("attention.py").bmm, dev(a), dev(b), out, ta, tb, variant="tiled"))
        check_bmm(out, a, b, ta, tb, "bmm under the emulator's check mode")


# ---------------------------------------------------------------- the masked softmax

SOFTMAX = pytest.mark.kernel("attention.cu", "softmax_forward")
SOFTMAX_BWD = pytest.mark.kernel("attention.cu", "softmax_backward")
SOFTMAX_ROWS = pytest.mark.kernel("attention.cu", "softmax_forward_rows")
SOFTMAX_ROWS_BWD = pytest.mark.kernel("attention.cu", "softmax_backward_rows")
# softmax_forward's variant (attention.py) -> its kernel: a warp a row (the GPU's), a thread a row (the emulator's)
SOFTMAX_KERNEL = {"warp": "softmax_forward", "rows": "softmax_forward_rows"}
SEQUENCES = [1, 2, 7, 12, 31, 64, 130]


def softmax_reference(s: np.ndarray, scale: float, causal: bool, *, shift: int = 0, axis: int = -1) -> np.ndarray:
    """softmax(scale * s) over `axis`; causal: query t sees keys j <= t + shift."""
    z = s.astype(np.float64) * scale
    if causal:
        t = s.shape[-1]
        z = np.where(np.tril(np.ones((t, t), bool), k=shift), z, -np.inf)
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    with np.errstate(invalid="ignore"):
        return e / e.sum(axis=axis, keepdims=True)


def check_softmax(got: np.ndarray, s: np.ndarray, scale: float, causal: bool, what: str) -> None:
    try:
        checks.assert_close(got, softmax_reference(s, scale, causal), rtol=1e-5, atol=1e-7, what=what)
    except GradeError as err:
        t = s.shape[-1]
        if causal and t > 1:
            future = np.triu(np.ones((t, t), bool), k=1)
            leaked = (got[..., future] != 0) & ~np.isnan(got[..., future])
            if leaked.any():
                raise GradeError(f"{err}\n  query positions see the future: {int(leaked.sum())} probabilities above "
                                 f"the diagonal (key j > query t) are not 0; query t may see keys 0..t only"
                                 ) from None
        candidates = [("the mask lets query t see key t + 1 (j <= t + 1): the future leaks", dict(shift=1)),
                      ("the mask hides key t from query t itself (j < t): t sees 0..t", dict(shift=-1)),
                      ("the probabilities are normalised over the wrong axis (each COLUMN sums to 1, not each "
                       "row): a row of scores is one query's keys", dict(axis=-2)),
                      ("the scale is missing: softmax(scale * s), scale = 1 / sqrt(D)", dict(scale_one=True))]
        for note, kw in candidates:
            if kw.get("shift") is not None and not causal:
                continue
            alt = softmax_reference(s, 1.0 if kw.pop("scale_one", False) else scale, causal, **kw)
            with np.errstate(invalid="ignore"):
                if np.allclose(got, np.nan_to_num(alt), rtol=1e-4, atol=1e-6):
                    raise GradeError(f"{err}\n  {note}") from None
        raise


def device_softmax(s: np.ndarray, scale: float, causal: bool, variant: str = "warp") -> np.ndarray:
    probs, kernel = checks.poison(s.shape), SOFTMAX_KERNEL[variant]
    run(f"{kernel}(scores of shape {s.shape}, scale={scale:g}, causal={causal})", "attention.cu", kernel,
        partial(module("attention.py").softmax_forward, dev(s), probs, scale, causal, variant=variant))
    return checks.to_host(probs)


def check_softmax_forward(t: int, causal: bool, variant: str) -> None:
    s = (checks.rng("softmax", t, causal).standard_normal((3, t, t)) * 3).astype(np.float32)
    scale = 1 / math.sqrt(16)
    check_softmax(device_softmax(s, scale, causal, variant), s, scale, causal,
                  f"{SOFTMAX_KERNEL[variant]} of 3 x ({t} x {t}) scores, causal={causal}")


@SOFTMAX
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("t", SEQUENCES)
@pytest.mark.hint("a warp per row (query t of a matrix): max and sum of exp(scale (s - max)) over keys j <= t "
                  "(causal), then every column written: the probability, or 0 for a masked key")
def test_softmax_forward_values(t, causal):
    check_softmax_forward(t, causal, "warp")


@SOFTMAX_ROWS
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("t", SEQUENCES)
@pytest.mark.hint("a thread per row (query t of a matrix, row % T): max and sum of exp(scale (s - max)) over keys "
                  "j <= t (causal), then every column written: the probability, or 0 for a masked key")
def test_softmax_rows_forward_values(t, causal):
    check_softmax_forward(t, causal, "rows")


def softmax_mistakes(s: np.ndarray, scale: float, causal: bool) -> list[tuple[str, np.ndarray]]:
    """What the usual mistakes of a softmax give, computed in float32 as a kernel would (exp overflowing to inf
    past 88.7, inf / inf and 0 / 0 giving NaN): (what went wrong, its output)."""
    z = s.astype(np.float32) * np.float32(scale)
    t = s.shape[-1]
    visible = np.tril(np.ones((t, t), bool)) if causal else np.ones((t, t), bool)
    out = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        e = np.where(visible, np.exp(z), 0).astype(np.float32)
        out.append(("exp overflows to inf (expf of 89 already is) and inf / inf is NaN: subtract the row's maximum "
                    "(over the visible keys) before exp", e / e.sum(axis=-1, keepdims=True)))
        if causal:
            m = z.max(axis=-1, keepdims=True)
            e = np.where(visible, np.exp(z - m), 0).astype(np.float32)
            out.append(("in rows where a masked key's score is far above every visible one, every visible exp "
                        "underflows to 0 and 0 / 0 is NaN: the maximum was taken over every key, the masked ones "
                        "too (or the row was normalised over every key and masked after, then normalised again); "
                        "take the maximum and the sum over keys j <= t only, inside the kernel",
                        e / e.sum(axis=-1, keepdims=True)))
            full = np.exp(z - m)
            out.append(("the softmax was taken over every key and the masked keys zeroed after it (on the host, or "
                        "after the kernel's sum): a row's probabilities then come from keys it may not see; mask "
                        "inside the kernel, before the maximum and the sum",
                        np.where(visible, full / full.sum(axis=-1, keepdims=True), 0).astype(np.float32)))
    return out


def softmax_evidence(got: np.ndarray, s: np.ndarray, scale: float, causal: bool) -> str:
    """What the output itself shows: which known mistake reproduces it (computed in float32), else the facts
    (non-finite values and where, masked keys given probability, rows that do not sum to 1)."""
    t = s.shape[-1]
    masked = ~np.tril(np.ones((t, t), bool)) if causal else np.zeros((t, t), bool)
    for note, alt in softmax_mistakes(s, scale, causal):
        # as computed, or with the masked keys' 0 written without dividing it by the row's sum (0 / 0 is NaN where
        # a row's exps all underflowed): how a kernel that writes every column, the masked ones as 0, shows it
        with np.errstate(invalid="ignore"):
            if any(np.allclose(got, a, rtol=1e-3, atol=1e-6, equal_nan=True) for a in (alt, np.where(masked, 0, alt))):
                return note
    facts = []
    bad = ~np.isfinite(got)
    if bad.any():
        where = "masked" if (bad & ~masked).sum() == 0 else "visible" if (bad & masked).sum() == 0 else "both"
        facts.append(f"{int(bad.sum())} values are NaN or infinite (at {where} keys"
                     + ("" if where == "masked" else f", in {int(bad.any(axis=-1).sum())} rows") + ")")
    leaked = masked & np.isfinite(got) & (got != 0)
    if leaked.any():
        facts.append(f"{int(leaked.sum())} probabilities of masked keys (j > t) are not 0")
    with np.errstate(invalid="ignore"):
        sums = np.where(masked, 0, got).sum(axis=-1)
    off = np.isfinite(sums) & ~np.isclose(sums, 1, rtol=0, atol=1e-4)
    if off.any():
        r = tuple(int(i) for i in np.argwhere(off)[0])
        facts.append(f"{int(off.sum())} rows' visible probabilities do not sum to 1 (row {r}: {float(sums[r]):.6g})")
    return "; ".join(facts)


def check_softmax_large_scores(variant: str) -> None:
    s = (checks.rng("softmax-large").standard_normal((2, 33, 33)) * 1e4).astype(np.float32)
    got = device_softmax(s, 0.25, True, variant)
    what = f"{SOFTMAX_KERNEL[variant]} of scores of size 1e4"
    if not np.all(np.isfinite(got)):
        raise checks.WrongValuesError(f"{what}: {int((~np.isfinite(got)).sum())} of {got.size} probabilities are NaN or "
                                 f"infinite: {softmax_evidence(got, s, 0.25, True)}")
    try:
        check_softmax(got, s, 0.25, True, what)
    except GradeError as err:
        evidence = softmax_evidence(got, s, 0.25, True)
        raise GradeError(f"{err}\n  {evidence}" if evidence and evidence not in str(err) else str(err)) from None


@SOFTMAX
@pytest.mark.hint("mask inside the kernel: the maximum, the sum and the probabilities over keys j <= t only, each "
                  "exponent scale (s - max) <= 0; read the evidence above")
def test_softmax_large_scores():
    check_softmax_large_scores("warp")


@SOFTMAX_ROWS
@pytest.mark.hint("mask inside the kernel: the maximum, the sum and the probabilities over keys j <= t only, each "
                  "exponent scale (s - max) <= 0; read the evidence above")
def test_softmax_rows_large_scores():
    check_softmax_large_scores("rows")


def check_softmax_backward(t: int, causal: bool, variant: str) -> None:
    r = checks.rng("softmax-backward", t, causal)
    scale = 1 / math.sqrt(32)
    p = softmax_reference(r.standard_normal((3, t, t)) * 3, scale, causal).astype(np.float32)
    dp = r.standard_normal((3, t, t)).astype(np.float32)
    ds = checks.poison((3, t, t))
    kernel = "softmax_backward_rows" if variant == "rows" else "softmax_backward"
    run(f"{kernel}(probs of shape {p.shape}, causal={causal})", "attention.cu", kernel,
        partial(module("attention.py").softmax_backward, dev(p), dev(dp), ds, scale, causal, variant=variant))
    p64, dp64 = p.astype(np.float64), dp.astype(np.float64)
    expected = scale * p64 * (dp64 - (p64 * dp64).sum(axis=-1, keepdims=True))
    checks.assert_close(ds, expected, rtol=1e-4, atol=1e-6, what=f"{kernel}, causal={causal}, T={t}")


@SOFTMAX_BWD
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("t", SEQUENCES)
@pytest.mark.hint("ds[j] = scale * p[j] * (dp[j] - sum_k p[k] dp[k]) over the visible keys, 0 at masked ones")
def test_softmax_backward_values(t, causal):
    check_softmax_backward(t, causal, "warp")


@SOFTMAX_ROWS_BWD
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("t", SEQUENCES)
@pytest.mark.hint("a thread per row: ds[j] = scale * p[j] * (dp[j] - sum_k p[k] dp[k]) over the visible keys, 0 at "
                  "masked ones")
def test_softmax_rows_backward_values(t, causal):
    check_softmax_backward(t, causal, "rows")


@pytest.mark.parametrize("kernel", ["softmax_forward", "softmax_backward", "softmax_forward_rows",
                                    "softmax_backward_rows"])
@pytest.mark.hint("warps (a thread, in the _rows kernels) loop over the rows: a grid-stride loop covers any rows "
                  "with any grid")
def test_softmax_kernels_any_grid(kernel):
    r = checks.rng("softmax-grid", kernel)
    t, scale = 29, 0.3
    s = (r.standard_normal((5, t, t)) * 2).astype(np.float32)
    p = softmax_reference(s, scale, True)
    dp = r.standard_normal((5, t, t)).astype(np.float32)
    out = checks.poison((5, t, t))
    k = kernels.load_kernel("attention.cu", kernel)
    rows = np.int64(5 * t)
    what = f"{kernel} launched with 2 blocks of 64 threads for {5 * t} rows"
    if kernel.startswith("softmax_forward"):
        launch_checked(what, lambda: k((2,), (64,), (dev(s), out, rows, np.int32(t), np.float32(scale), np.int32(1))))
        expected = p
    else:
        launch_checked(what, lambda: k((2,), (64,), (dev(p.astype(np.float32)), dev(dp), out, rows, np.int32(t),
                                                      np.float32(scale), np.int32(1))))
        p32 = p.astype(np.float32).astype(np.float64)
        expected = scale * p32 * (dp - (p32 * dp).sum(axis=-1, keepdims=True))
    with checks.grid_stride_advice(out, 2, 64):
        checks.assert_close(out, expected, rtol=1e-4, atol=1e-6, what=what)


# ---------------------------------------------------------------- the online softmax (Exercise 9b)

ONLINE = pytest.mark.kernel("online_softmax.cu", "online_softmax")
ONLINE_COLS = [1, 2, 31, 32, 33, 127, 1000]


def online_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 (probabilities, row maximum, row sum of exp(x - max)); a row with no finite entry gives zeros, a
    maximum of -inf and a sum of 0."""
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0.0))
    s = e.sum(axis=1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0), m[:, 0], s[:, 0]


def online_rows(cols: int, salt: object) -> np.ndarray:
    """Rows a careless online softmax gets wrong: plain, large (exp overflows float32 without the maximum), very
    negative, half masked (-inf), nothing visible, one visible entry at either end of the row."""
    r = checks.rng("online-softmax", cols, salt)
    x = (r.standard_normal((41, cols)) * 3).astype(np.float32)
    x[1] += 1000.0
    x[2] -= 1e4
    x[3] = np.float32(90.0) + np.arange(cols, dtype=np.float32) * np.float32(0.5)  # the maximum rises along the row
    x[4] = np.float32(90.0) - np.arange(cols, dtype=np.float32) * np.float32(0.5)  # the first entry is the largest
    x[5:25][r.random((20, cols)) < 0.5] = -np.inf
    x[25] = -np.inf
    x[26] = -np.inf
    x[26, 0] = 7.0
    x[27] = -np.inf
    x[27, -1] = -3.0
    return x


def device_online(x: np.ndarray, grid: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, cols = x.shape
    out, m, total = checks.poison(x.shape), checks.poison((rows,)), checks.poison((rows,))
    k, xd = kernels.load_kernel("online_softmax.cu", "online_softmax"), dev(x)
    run(f"online_softmax of {rows} x {cols} launched with {grid} blocks of {threads} threads", "online_softmax.cu",
        "online_softmax", lambda: k((grid,), (threads,), (xd, out, m, total, np.int32(rows), np.int32(cols))))
    return checks.to_host(out), checks.to_host(m), checks.to_host(total)


def check_online(got: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray, what: str) -> None:
    probs, m, total = got
    want_p, want_m, want_l = online_reference(x)
    empty = ~np.isfinite(want_m)
    computed_nan = (np.isnan(probs) & ~checks.is_poison(probs)).any(axis=1) | (np.isnan(total) & ~checks.is_poison(total))
    nan_rows = np.flatnonzero(computed_nan)
    if nan_rows.size:
        kinds = "with nothing visible (every entry -inf)" if empty[nan_rows].all() else "some with visible entries"
        raise GradeError(f"{what}: rows {nan_rows[:5].tolist()} compute a NaN sum or NaN probabilities ({kinds}, "
                         f"where some lanes meet only -inf entries): merging two "
                         f"empty parts takes exp(-inf - (-inf)) = exp(NaN); when the new maximum is -inf, the "
                         f"sum is 0 and nothing is rescaled")
    checks.assert_close(probs, want_p, rtol=1e-5, atol=1e-7, what=f"{what}: probabilities")
    if not np.array_equal(m.astype(np.float64), want_m):
        bad = int(np.flatnonzero(m.astype(np.float64) != want_m)[0])
        raise GradeError(f"{what}: row_max[{bad}] = {m[bad]!r}, expected {want_m[bad]!r} (the row's maximum, -inf "
                         f"for a row with nothing visible: exact)")
    checks.assert_close(total, want_l, rtol=1e-5, atol=0, what=f"{what}: row_sum (the sum of exp(x - max))")


@ONLINE
@pytest.mark.parametrize("cols", ONLINE_COLS)
@pytest.mark.hint("(m, l) = (-inf, 0); each entry x merges as (x, 1): m' = max(m, x), l' = l exp(m - m') + "
                  "exp(x - m'), nothing rescaled when m' is -inf; the 32 lanes' pairs merge by the same rule in a "
                  "butterfly; out = exp(x - m) / l, 0 where l = 0")
def test_online_softmax_values(cols):
    x = online_rows(cols, "values")
    check_online(device_online(x, (41 + 3) // 4, 128), x, f"online_softmax of 41 x {cols}")


@ONLINE
@pytest.mark.parametrize("grid, threads", [(1, 32), (3, 64), (200, 256)])
@pytest.mark.hint("warps loop over the rows (a grid-stride loop counted in warps): any grid covers any rows, "
                  "and a grid with more warps than rows leaves the extra warps idle")
def test_online_softmax_any_grid(grid, threads):
    x = online_rows(45, ("grid", grid, threads))
    check_online(device_online(x, grid, threads), x, f"online_softmax launched with {grid} blocks of {threads}")


# ---------------------------------------------------------------- heads

HEADS = pytest.mark.kernel("attention.cu", "split_heads")
# (B, T, H, D): head dims 16, 32, 64, sequences of 1 and primes, one head
HEAD_SHAPES = [(1, 1, 1, 16), (2, 7, 4, 16), (3, 13, 2, 32), (2, 31, 3, 64), (1, 5, 1, 1)]


def heads_kernel(kernel: str, d: int, aligned: bool = True) -> str:
    """The kernel a launcher takes for heads of d columns (ld = 3 d H, offsets part * d H): the _x4 one when the
    head, the rows and the part's offset are whole quads of 4 floats and the arrays start 16-byte aligned."""
    return kernel + "_x4" if d % 4 == 0 and aligned else kernel


@HEADS
@pytest.mark.parametrize("b, t, h, d", HEAD_SHAPES, ids=lambda v: str(v))
@pytest.mark.hint("out[b, h, t, d] = x[b, t, part * C + h * D + d] (split); merge writes the same places back and "
                  "leaves the other parts' columns alone; split_heads_x4 / merge_heads_x4 where in_quads holds")
def test_split_and_merge_heads(b, t, h, d):
    am = module("attention.py")
    c = h * d
    x = checks.rng("heads", b, t, h, d).standard_normal((b, t, 3 * c)).astype(np.float32)
    xd = dev(x)
    for part in range(3):
        out = checks.poison((b, h, t, d))
        run(f"split_heads(x of shape {x.shape}, out of shape {(b, h, t, d)}, part={part})", "attention.cu",
            heads_kernel("split_heads", d), lambda out=out, part=part: am.split_heads(xd, out, part))
        expected = x[:, :, part * c:(part + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3)
        checks.assert_bitwise_equal(out, np.ascontiguousarray(expected), what=f"split_heads, part {part}")
        back = checks.poison((b, t, 3 * c))
        run(f"merge_heads(y of shape {(b, h, t, d)}, out of shape {x.shape}, part={part})", "attention.cu",
            heads_kernel("merge_heads", d), lambda out=out, back=back, part=part: am.merge_heads(out, back, part))
        got = checks.to_host(back)
        checks.assert_bitwise_equal(np.ascontiguousarray(got[:, :, part * c:(part + 1) * c]),
                                    np.ascontiguousarray(x[:, :, part * c:(part + 1) * c]),
                                    what=f"merge_heads, part {part}")
        others = np.delete(got, np.s_[part * c:(part + 1) * c], axis=2)
        if not checks.is_poison(others).all():
            raise GradeError(f"merge_heads(part={part}) wrote outside part {part}'s columns "
                             f"{part * c}..{(part + 1) * c - 1} of the rows")


@pytest.mark.kernel("attention.cu", "split_heads_x4")
@pytest.mark.parametrize("aligned", [True, False], ids=["16-byte-aligned", "not-16-byte-aligned"])
@pytest.mark.hint("split_heads_x4 / merge_heads_x4 only where in_quads(...) holds: D, ld and offset multiples of 4 "
                  "and both arrays starting 16-byte aligned (a view may start anywhere); else the element kernels")
def test_heads_in_quads_only_where_aligned(aligned):
    b, t, h, d, part = 2, 9, 3, 8, 2
    c = h * d
    am = module("attention.py")
    x = checks.rng("heads-quads", aligned).standard_normal((b, t, 3 * c)).astype(np.float32)
    rows = checks.view_at_alignment(dev(np.zeros(x.size + 8, np.float32)), x.size, aligned)
    rows.set(x.ravel())
    rows = rows.reshape(x.shape)
    heads_buffer = checks.poison(b * h * t * d + 8)
    heads = checks.view_at_alignment(heads_buffer, b * h * t * d, aligned).reshape(b, h, t, d)
    where = "16-byte aligned" if aligned else "not 16-byte aligned"
    run(f"split_heads of arrays {where}", "attention.cu", heads_kernel("split_heads", d, aligned),
        lambda: am.split_heads(rows, heads, part))
    expected = x[:, :, part * c:(part + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3)
    checks.assert_bitwise_equal(heads, np.ascontiguousarray(expected), what=f"split_heads ({where})")
    checks.assert_untouched_around(heads_buffer, heads, f"split_heads ({where})")
    back_buffer = checks.poison(x.size + 8)
    back = checks.view_at_alignment(back_buffer, x.size, aligned).reshape(x.shape)
    run(f"merge_heads of arrays {where}", "attention.cu", heads_kernel("merge_heads", d, aligned),
        lambda: am.merge_heads(heads, back, part))
    got = checks.to_host(back)
    checks.assert_bitwise_equal(np.ascontiguousarray(got[:, :, part * c:]), np.ascontiguousarray(x[:, :, part * c:]),
                                what=f"merge_heads ({where})")
    if not checks.is_poison(got[:, :, :part * c]).all():
        raise GradeError(f"merge_heads ({where}) wrote outside part {part}'s columns")
    checks.assert_untouched_around(back_buffer, back, f"merge_heads ({where})")


@pytest.mark.parametrize("kernel", ["split_heads", "merge_heads"])
@pytest.mark.hint("a grid-stride loop over the B * H * T * D elements: any grid covers any number of them")
def test_heads_kernels_any_grid(kernel):
    b, t, h, d, part = 2, 13, 3, 16, 1  # 1,248 elements for 3 x 64 threads
    c = h * d
    r = checks.rng("heads-grid", kernel)
    x = r.standard_normal((b, t, 3 * c)).astype(np.float32)
    heads = np.ascontiguousarray(x[:, :, part * c:(part + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3))
    k = kernels.load_kernel("attention.cu", kernel)
    sizes = (np.int32(b), np.int32(t), np.int32(h), np.int32(d), np.int32(3 * c), np.int32(part * c))
    what = f"{kernel} launched with 3 blocks of 64 threads"
    if kernel == "split_heads":
        out = checks.poison((b, h, t, d))
        checks.assert_grid_stride(what, k, (dev(x), out) + sizes, {"out": (out, heads)}, rtol=0)
    else:
        # the other parts' columns hold other values, which merge_heads leaves alone; its own are poisoned
        keep = r.standard_normal((b, t, 3 * c)).astype(np.float32)
        start = keep.copy()
        start[:, :, part * c:(part + 1) * c] = checks.poisoned_host((b, t, c))
        expected = keep.copy()
        expected[:, :, part * c:(part + 1) * c] = x[:, :, part * c:(part + 1) * c]
        out = dev(start)
        checks.assert_grid_stride(what, k, (dev(heads), out) + sizes, {"out": (out, expected)}, rtol=0)


# ---------------------------------------------------------------- attention, through the framework


def attention_reference(qkv: np.ndarray, n_head: int, grad_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, grad_qkv) of causal multi-head attention in float64, from the formulas."""
    b, t, width = qkv.shape
    c = width // 3
    d = c // n_head
    heads = qkv.astype(np.float64).reshape(b, t, 3, n_head, d).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, D)
    q, k, v = heads
    scale = 1 / math.sqrt(d)
    s = q @ np.swapaxes(k, -1, -2) * scale
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
    gy = grad_y.astype(np.float64).reshape(b, t, n_head, d).transpose(0, 2, 1, 3)
    dp = gy @ np.swapaxes(v, -1, -2)
    dv = np.swapaxes(p, -1, -2) @ gy
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * scale
    dq, dk = ds @ k, np.swapaxes(ds, -1, -2) @ q
    grad = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(b, t, 3 * c)
    return y, grad


@pytest.mark.kernel("attention.cu", "bmm")
@pytest.mark.parametrize("b, t, h, d", [(1, 1, 1, 16), (2, 7, 2, 16), (2, 13, 4, 32), (1, 64, 2, 64),
                                        (3, 31, 4, 16)], ids=lambda v: str(v))
@pytest.mark.hint("ops.attention composes your kernels: split_heads, bmm (Q Kᵀ), softmax_forward, bmm (P V), "
                  "merge_heads; its backward bmm with transposed operands and softmax_backward")
def test_attention_forward_and_backward(b, t, h, d):
    import minitorch
    from minitorch import ops

    r = checks.rng("attention", b, t, h, d)
    qkv = r.standard_normal((b, t, 3 * h * d)).astype(np.float32)
    g = r.standard_normal((b, t, h * d)).astype(np.float32)
    what = f"causal attention of qkv (B={b}, T={t}, 3C) with {h} heads of {d}"
    checks.reset_launches()
    y, saved = launch_checked(what, lambda: ops.attention(minitorch.tensor(qkv), h))
    grad = launch_checked(f"{what}: backward", lambda: ops.attention_backward(minitorch.tensor(g), saved))
    # attention.py's "best": the warp and tiled kernels on a GPU, the emulator's kernels (no shuffle, no barrier)
    ran = ("bmm", "softmax_forward", "softmax_backward") if ON_GPU else (
        "bmm_regtile", "softmax_forward_rows", "softmax_backward_rows")
    for fn in (*ran, heads_kernel("split_heads", d), heads_kernel("merge_heads", d)):
        checks.require_launch("attention.cu", fn)
    exp_y, exp_grad = attention_reference(qkv, h, g)
    checks.assert_close(y, exp_y, rtol=1e-4, atol=1e-5, what=f"{what}: y")
    checks.assert_close(grad, exp_grad, rtol=1e-3, atol=1e-4 * float(np.abs(exp_grad).max()),
                        what=f"{what}: the gradient of qkv")


@pytest.mark.kernel("attention.cu", "softmax_forward")
@pytest.mark.hint("position t may only see positions 0..t: changing a later token must not change anything before it")
def test_attention_is_causal():
    import minitorch
    from minitorch import ops

    b, t, h, d = 2, 23, 2, 16
    qkv = checks.rng("causal").standard_normal((b, t, 3 * h * d)).astype(np.float32)
    y, _ = ops.attention(minitorch.tensor(qkv), h)
    before = y.numpy()
    for cut in (1, 10, t - 1):
        changed = qkv.copy()
        changed[:, cut:] = checks.rng("causal", cut).standard_normal(changed[:, cut:].shape) * 10
        after = ops.attention(minitorch.tensor(changed), h)[0].numpy()
        if not np.array_equal(after[:, :cut], before[:, :cut]):
            pos = int(np.argwhere(after[:, :cut] != before[:, :cut])[0][1])
            raise GradeError(f"causal attention: changing the tokens from position {cut} on changed the output at "
                             f"position {pos} < {cut}: position {pos} sees the future")


# ---------------------------------------------------------------- gradient clipping


def grads_of(sizes: tuple, scale: float, *salt: object) -> list[np.ndarray]:
    r = checks.rng("clip", sizes, scale, *salt)
    return [(r.standard_normal(n) * scale).astype(np.float32) for n in sizes]


def global_norm(arrays: list[np.ndarray]) -> float:
    return math.sqrt(sum(float((a.astype(np.float64) ** 2).sum()) for a in arrays))


def check_clipped(got: list[np.ndarray], original: list[np.ndarray], norm: float, max_norm: float, what: str) -> None:
    coef = min(1.0, max_norm / (norm + 1e-6))
    for i, (g, o) in enumerate(zip(got, original, strict=True)):
        try:
            checks.assert_close(g, o.astype(np.float64) * coef, rtol=2e-5, atol=1e-7, what=f"{what}: gradient {i}")
        except GradeError as err:
            unclamped = o.astype(np.float64) * (max_norm / (norm + 1e-6))
            if coef == 1.0 and np.allclose(host(g), unclamped, rtol=2e-5, atol=1e-7):
                raise GradeError(f"{err}\n  the gradients were scaled UP by max_norm / norm = "
                                 f"{max_norm / (norm + 1e-6):.3g}: the coefficient is min(1, max_norm / "
                                 f"(norm + 1e-6)), a norm below max_norm leaves them as they are") from None
            raise


@pytest.mark.kernel("clip.cu", "sum_squares")
@pytest.mark.parametrize("scale", [1e-3, 0.01, 1.0, 30.0])  # global norms 0.27 (left as it is), 2.7, 270, 8200
@pytest.mark.hint("norm = sqrt(sum of every gradient's squares), on the device; each g *= min(1, max_norm / "
                  "(norm + 1e-6)), the coefficient read from device memory: a norm below max_norm leaves the "
                  "gradients as they are")
def test_clip_grad_norm_values(scale):
    import minitorch
    from minitorch import optim

    sizes = (1, 7, 257, 4099, 70001)
    original = grads_of(sizes, scale)
    params = [minitorch.zeros(n, requires_grad=True) for n in sizes]
    for p, g in zip(params, original, strict=True):
        p.grad = minitorch.tensor(g)
    checks.reset_launches()
    norm = launch_checked("optim.clip_grad_norm_", lambda: optim.clip_grad_norm_(params, 1.0))
    for fn in ("sum_squares", "clip_coefficient", "scale_by"):
        checks.require_launch("clip.cu", fn)
    expected = global_norm(original)
    if not abs(norm.item() - expected) <= 1e-5 * expected + 1e-12:
        raise GradeError(f"clip_grad_norm_: the global norm is {norm.item()!r}, expected {expected!r} (float64)"
                         + (" (NaN: was `total` zeroed and written?)" if math.isnan(norm.item()) else ""))
    check_clipped([p.grad.numpy() for p in params], original, expected, 1.0, f"clip_grad_norm_ (norm {expected:.3g})")


@pytest.mark.kernel("clip.cu", "scale_by")
@pytest.mark.hint("the coefficient must be computed and read on the device: a captured step replays the kernels, "
                  "and each replay clips by its own gradients' norm")
def test_clip_in_a_captured_graph():
    sizes, scales = (33, 1000), (0.01, 5.0, 0.5)
    grad_sets = [grads_of(sizes, scale, "graph") for scale in scales]
    # captured and replayed where the learner's code runs (its own process when isolated); checked here
    replays = learner_process.run_in_learner_process(replayed_clip, sizes, grad_sets, 2.0)
    for original, (norm, clipped) in zip(grad_sets, replays, strict=True):
        expected = global_norm(original)
        if not abs(norm - expected) <= 1e-5 * expected:
            raise GradeError(f"a replay of a captured clip_grad_norm_ gave the norm {norm!r}, "
                             f"expected {expected!r}: is the norm (or the coefficient) a host value frozen into the "
                             f"capture?")
        check_clipped(clipped, original, expected, 2.0, f"a replay of a captured clip_grad_norm_ (norm {expected:.3g})")


@pytest.mark.kernel("clip.cu", "sum_squares")
@pytest.mark.hint("every block adds its partial sum into the one total: atomicAdd, never a plain `+=` (the emulator "
                  "runs one block after the other and loses no update; a GPU loses most of them)", on="fault")
def test_clip_sum_of_squares_has_no_device_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase7 --device emu); on a GPU, "
                    "test_clip_grad_norm_values sees the lost updates")
    from minitorch import emu

    n = 3001  # several blocks of the launcher, each adding its partial sum into total[0]
    x = checks.rng("clip-race").standard_normal(n).astype(np.float32)
    xd, total = dev(x), backend.zeros(1)  # made before the call, which is captured (no copies inside)
    with emu.check_mode():
        run("sum_squares under the emulator's check mode", "clip.cu", "sum_squares",
            lambda: module("clip.py").sum_squares(xd, total))
    got, expected = float(checks.to_host(total)[0]), float((x.astype(np.float64) ** 2).sum())
    if not abs(got - expected) <= 1e-5 * expected:
        raise GradeError(f"sum_squares over {n} elements under the emulator's check mode: got {got!r}, expected "
                         f"{expected!r}")


def sum_squares_evidence(got: float, x: np.ndarray, threads: int) -> str:
    """What a wrong sum of squares points to, from its value: only the elements one pass of the grid covers
    (no grid-stride loop), one block's share only (an atomicAdd missing), or a NaN (a value nothing wrote)."""
    squares = x.astype(np.float64) ** 2
    close = lambda v: abs(got - v) <= 1e-5 * max(abs(v), 1e-30)  # noqa: E731
    if close(squares[:threads].sum()):
        return (f": the sum of the first {threads} squares only, one element a thread: a grid-stride loop "
                f"(i += gridDim.x * blockDim.x) lets any grid cover any n")
    if math.isnan(got):
        return ": NaN, which no sum of squares gives: a value read that nothing wrote (a shared slot, a variable)?"
    return ": the total is wrong (the block's sum, or how the blocks add into total[0]: one atomicAdd a block)"


@pytest.mark.parametrize("kernel", ["sum_squares", "scale_by"])
@pytest.mark.hint("any grid covers any n: a grid-stride loop, then (sum_squares) each block's warps' sums, only the "
                  "slots its warps wrote, into total[0] with one atomicAdd; read the evidence above")
def test_clip_kernels_any_grid(kernel):
    n = 9001
    x = checks.rng("clip-grid", kernel).standard_normal(n).astype(np.float32)
    k = kernels.load_kernel("clip.cu", kernel)
    if kernel == "sum_squares":
        total = backend.zeros(1)
        launch_checked("sum_squares launched with 3 blocks of 64 threads",
                       lambda: k((3,), (64,), (dev(x), total, np.int64(n))))
        got, expected = float(checks.to_host(total)[0]), float((x.astype(np.float64) ** 2).sum())
        if not abs(got - expected) <= 1e-5 * expected:
            raise checks.WrongValuesError(f"sum_squares launched with 3 blocks of 64 threads over {n} elements: got "
                                     f"{got!r}, expected {expected!r}" + sum_squares_evidence(got, x, 3 * 64))
    else:
        xd = dev(x)
        launch_checked("scale_by launched with 3 blocks of 64 threads",
                       lambda: k((3,), (64,), (xd, dev(np.array([0.5], np.float32)), np.int64(n))))
        checks.assert_close(xd, x.astype(np.float64) * 0.5, rtol=0, what="scale_by launched with 3 blocks of 64")


# ---------------------------------------------------------------- the recipe: dropout and the schedule (11b, 11c)

DROPOUT = pytest.mark.kernel("recipe.cu", "dropout_apply")


def dropout_case(n: int, p: float, seed: int, step: int, site: int, salt: object) -> tuple[np.ndarray, np.ndarray]:
    """(x, the exact expected output): minitorch.philox's mask, x * float32(1 / (1 - p)) where kept."""
    from minitorch import philox

    x = checks.rng("dropout", n, p, salt).standard_normal(n).astype(np.float32)
    keep = philox.uniform(n, seed, (step << 16) + site) >= np.float32(p)
    return x, np.where(keep, x * np.float32(1.0 / (1.0 - p)), np.float32(0))


def check_dropout(got: Any, want: np.ndarray, x: np.ndarray, p: float, what: str) -> None:
    got = checks.to_host(got)
    if np.array_equal(got, want):
        return
    kept = got != 0
    bad = int(np.flatnonzero(got != want)[0])
    note = ""
    if np.isnan(got).any():
        note = " (NaN: never written?)"
    elif abs(kept.mean() - (1 - p)) < 0.05 and not np.array_equal(kept, want != 0):
        note = (" (about the right fraction kept, but not Philox's elements: element i keeps its value when the "
                "uniform of word i % 4 of the block for counter (i / 4, offset_lo, offset_hi, 0), key (seed_lo, "
                "seed_hi), is >= p, offset = (step[0] << 16) + site)")
    elif np.array_equal(kept, want != 0):
        note = " (the right mask; the kept values are scaled by 1 / (1 - p), computed in float32)"
    raise GradeError(f"{what}: element {bad} is {got[bad]!r}, expected {want[bad]!r} (x = {x[bad]!r}), bit for bit"
                     f"{note}")


@DROPOUT
@pytest.mark.parametrize("n, p, seed, step, site", [(1, 0.5, 0, 1, 0), (1003, 0.1, 12345, 7, 3),
                                                    (70001, 0.5, 2**40 + 3, 2**33 + 5, 65535)],
                         ids=["n1", "n1003", "n70001-large-seed-and-step"])
@pytest.mark.hint("keep element i when the Philox uniform of (seed, offset = (step[0] << 16) + site) is >= p: "
                  "minitorch.philox.uniform(n, seed, offset) is the host reference, bit for bit; kept values "
                  "times float32(1 / (1 - p)); the step read from device memory and recorded in step_used")
def test_dropout_masks_are_philox_bit_for_bit(n, p, seed, step, site):
    x, want = dropout_case(n, p, seed, step, site, "values")
    out, used = checks.poison(n), checks.poison(1, np.int64)
    xd, step_d = dev(x), dev(np.array([step], np.int64))
    run(f"dropout_apply of {n} elements, p={p}", "recipe.cu", "dropout_apply",
        partial(module("recipe.py").dropout_apply, xd, out, step_d, used, seed, site, p))
    check_dropout(out, want, x, p, f"dropout_apply of {n} elements (p={p}, seed={seed}, step={step}, site={site})")
    if int(checks.to_host(used)[0]) != step:
        raise GradeError(f"dropout_apply: step_used holds {checks.to_host(used)[0]}, expected the step it read, "
                         f"{step}: the backward regenerates the mask from it")


@pytest.mark.kernel("recipe.cu", "dropout_apply_x4")
@pytest.mark.parametrize("n, aligned", [(4, True), (4096, True), (70000, True), (1000, False)],
                         ids=["n4", "n4096", "n70000", "n1000-not-16-byte-aligned"])
@pytest.mark.hint("n a multiple of 4 and both arrays 16-byte aligned: dropout_apply_x4 over n / 4 quads, quad q "
                  "from the one Philox block of counter (q, offset_lo, offset_hi, 0), its words 0..3 for elements "
                  "4q..4q+3 (the same masks as dropout_apply, bit for bit); otherwise dropout_apply")
def test_dropout_four_a_thread_draws_the_same_masks(n, aligned):
    p, seed, step, site = 0.2, 2**35 + 11, 2**20 + 3, 40000
    x, want = dropout_case(n, p, seed, step, site, ("x4", aligned))
    xd = checks.view_at_alignment(dev(np.zeros(n + 8, np.float32)), n, aligned)
    xd.set(x)
    out = checks.view_at_alignment(checks.poison(n + 8), n, aligned)
    used, step_d = checks.poison(1, np.int64), dev(np.array([step], np.int64))
    kernel = "dropout_apply_x4" if aligned and n % 4 == 0 else "dropout_apply"
    where = "16-byte aligned" if aligned else "not 16-byte aligned"
    run(f"dropout_apply of {n} elements, {where}", "recipe.cu", kernel,
        partial(module("recipe.py").dropout_apply, xd, out, step_d, used, seed, site, p))
    check_dropout(out, want, x, p, f"dropout_apply of {n} elements, {where} (p={p}, seed={seed}, step={step}, "
                                   f"site={site})")
    if int(checks.to_host(used)[0]) != step:
        raise GradeError(f"dropout_apply ({kernel}): step_used holds {checks.to_host(used)[0]}, expected {step}")


@pytest.mark.kernel("recipe.cu", "dropout_add")
@pytest.mark.parametrize("n, aligned", [(1003, True), (4096, True), (1000, False)],
                         ids=["n1003", "n4096", "n1000-not-16-byte-aligned"])
@pytest.mark.hint("dropout_add (given) calls your dropout_keeps and Philox: out = x + the dropout of h, the mask of "
                  "dropout_apply for the same (seed, step, site); check dropout_apply's own tests first")
def test_dropout_add_is_x_plus_the_dropout(n, aligned):
    p, seed, step, site = 0.25, 91, 2**21 + 7, 12
    h, dropped = dropout_case(n, p, seed, step, site, ("add", aligned))
    x = checks.rng("dropout add x", n).standard_normal(n).astype(np.float32)
    xd, hd = (checks.view_at_alignment(dev(np.zeros(n + 8, np.float32)), n, aligned) for _ in range(2))
    xd.set(x)
    hd.set(h)
    out = checks.view_at_alignment(checks.poison(n + 8), n, aligned)
    used, step_d = checks.poison(1, np.int64), dev(np.array([step], np.int64))
    kernel = "dropout_add_x4" if aligned and n % 4 == 0 else "dropout_add"
    where = "16-byte aligned" if aligned else "not 16-byte aligned"
    run(f"dropout_add of {n} elements, {where}", "recipe.cu", kernel,
        partial(module("recipe.py").dropout_add, xd, hd, out, step_d, used, seed, site, p))
    check_dropout(out, x + dropped, h, p, f"dropout_add of {n} elements, {where}: x + dropout(h)")


@DROPOUT
@pytest.mark.hint("the step comes from device memory (step[0]), never from the host: a captured step replays its "
                  "launches, and dropout_advance must move every replay to new masks")
def test_dropout_reads_its_step_on_the_device_and_advance_moves_it():
    n, p, seed, site = 4099, 0.25, 77, 2
    recipe = module("recipe.py")
    step_d, used = dev(np.array([5], np.int64)), checks.poison(1, np.int64)
    x = dropout_case(n, p, seed, 5, site, "advance")[0]
    xd, out = dev(x), checks.poison(n)
    run("dropout_advance", "recipe.cu", "dropout_advance", partial(recipe.dropout_advance, step_d))
    if int(checks.to_host(step_d)[0]) != 6:
        raise GradeError(f"dropout_advance: step[0] is {checks.to_host(step_d)[0]} after one launch from 5, "
                         f"expected 6 (one thread adds 1)")
    run("dropout_apply after dropout_advance", "recipe.cu", "dropout_apply",
        partial(recipe.dropout_apply, xd, out, step_d, used, seed, site, p))
    check_dropout(out, dropout_case(n, p, seed, 6, site, "advance")[1], x, p,
                  "dropout_apply at the advanced step 6")


@DROPOUT
@pytest.mark.parametrize("grid, threads", [(1, 32), (3, 64), (500, 256)])
@pytest.mark.hint("a grid-stride loop: any grid covers any n")
def test_dropout_kernel_any_grid(grid, threads):
    n, p, seed, step, site = 10007, 0.3, 5, 9, 1
    x, want = dropout_case(n, p, seed, step, site, ("grid", grid))
    out, used = checks.poison(n), checks.poison(1, np.int64)
    k = kernels.load_kernel("recipe.cu", "dropout_apply")
    xd, step_d = dev(x), dev(np.array([step], np.int64))
    what = f"dropout_apply launched with {grid} blocks of {threads} threads for {n} elements"
    launch_checked(what, lambda: k((grid,), (threads,), (xd, out, step_d, used, np.uint64(seed), np.int64(site),
                                                         np.float32(p), np.float32(1 / (1 - p)), np.int64(n))))
    with checks.grid_stride_advice(out, grid, threads):
        check_dropout(out, want, x, p, what)


@pytest.mark.kernel("recipe.cu", "lr_schedule")
@pytest.mark.parametrize("t", [1, 3, 4, 5, 37, 100, 101, 500])
@pytest.mark.hint("it = step[0] - 1: max_lr (it + 1) / (warmup + 1) while it < warmup; min_lr + (max_lr - min_lr) "
                  "(1 + cos(pi r)) / 2, r = (it - warmup) / (total - warmup), up to total; min_lr after; then "
                  "bias[0] /= lr, lr[0] = lr, decay[0] = 1 - lr * weight_decay")
def test_lr_schedule_values(t):
    from minitorch import optim

    schedule = optim.WarmupCosine(max_lr=6e-4, min_lr=6e-5, warmup=4, total=100)
    bias0 = np.array([0.19, 0.002], np.float32)
    step_d, bias, rate, decay = dev(np.array([t], np.int64)), dev(bias0), checks.poison(1), checks.poison(1)
    run(f"lr_schedule at step {t}", "recipe.cu", "lr_schedule",
        partial(module("recipe.py").lr_schedule, step_d, bias, rate, decay, 0.1, schedule.max_lr, schedule.min_lr,
                schedule.warmup, schedule.total))
    lr = schedule.lr(t)
    checks.assert_close(rate, [lr], rtol=1e-6, what=f"lr_schedule at step {t} (warmup 4, total 100): the rate")
    checks.assert_close(bias, [float(bias0[0]) / lr, float(bias0[1])], rtol=2e-6,
                        what=f"lr_schedule at step {t}: bias (bias[0] / lr; bias[1] untouched)")
    checks.assert_close(decay, [1 - 0.1 * lr], rtol=1e-7, what=f"lr_schedule at step {t}: decay = 1 - lr * 0.1")


# ---------------------------------------------------------------- a block, and a captured training step


@pytest.mark.kernel("layernorm.cu", "layernorm_backward")
@pytest.mark.hint("every kernel of the block, forward and backward, through the framework: compare each one's "
                  "own test first")
def test_transformer_block_against_float64():
    import minitorch
    from minitorch import nn

    r = checks.rng("block")
    block = nn.TransformerBlock(32, 2, seed=3)
    reference = nn.TransformerBlock(32, 2, device="cpu", dtype="float64", seed=3)
    x = r.standard_normal((2, 11, 32)).astype(np.float32)
    g = r.standard_normal((2, 11, 32)).astype(np.float32)
    xd = minitorch.tensor(x, requires_grad=True)
    xr = minitorch.tensor(x.astype(np.float64), device="cpu", dtype="float64", requires_grad=True)
    y = launch_checked("TransformerBlock forward", lambda: block(xd))
    launch_checked("TransformerBlock backward", lambda: y.backward(minitorch.tensor(g)))
    yr = reference(xr)
    yr.backward(minitorch.tensor(g.astype(np.float64), device="cpu", dtype="float64"))
    checks.assert_close(y, yr.numpy(), rtol=1e-4, atol=1e-4, what="TransformerBlock output")
    checks.assert_close(xd.grad, xr.grad.numpy(), rtol=1e-3, atol=1e-4 * float(np.abs(xr.grad.numpy()).max()),
                        what="TransformerBlock: the gradient of x")
    for (name, p), (_, pr) in zip(block.named_parameters(), reference.named_parameters(), strict=True):
        expected = pr.grad.numpy()
        checks.assert_close(p.grad, expected, rtol=1e-3, atol=1e-4 * float(np.abs(expected).max() or 1),
                            what=f"TransformerBlock: the gradient of {name}")


@pytest.mark.kernel("clip.cu", "scale_by")
@pytest.mark.hint("a replay of the captured step must do exactly what the eager step does: nothing computed on "
                  "the host during the capture (the clip coefficient, the step count) may be frozen into it")
def test_captured_training_step_replays_the_eager_steps():
    vocab, t, b = 11, 8, 3
    r = checks.rng("captured-step")
    batches = [(r.integers(0, vocab, (b, t)), r.integers(0, vocab, (b, t))) for _ in range(3)]
    # The captured step and its replays run where the learner's code runs (its own process when isolated); its
    # eager twin runs here, launch by launch, and is what the replays are held to.
    replayed, names, replayed_params = launch_checked(
        "graph.capture(training step) and its replays",
        lambda: learner_process.run_in_learner_process(replayed_gpt_steps, vocab, t, b, batches))
    model, x, y, step = gpt_training_step(vocab, t, b)
    for k, (xs, ys) in enumerate(batches):
        x.copy_from(xs.astype(np.int32))
        y.copy_from(ys.astype(np.int32))
        eager = launch_checked(f"eager step {k}", step).item()
        if not abs(eager - replayed[k]) <= 1e-5 * abs(eager):
            raise GradeError(f"step {k}: the eager step's loss is {eager!r}, the captured step's {replayed[k]!r}")
    # On a GPU the embedding backward's scatter-add and the clipping's sum of squares add with atomics, in
    # an order that changes between runs; AdamW divides a gradient by its own size, so a weight whose
    # gradient is rounding noise may move by up to lr either way. The losses (1e-5) are the strict check;
    # the weights must agree to well under one step (lr = 3e-2): a stale step count, a learning rate or
    # clip coefficient frozen at capture time moves them far more.
    eager_params = list(model.named_parameters())
    if names != [name for name, _ in eager_params]:
        raise GradeError(f"the captured model's parameters are {names}, the eager model's "
                         f"{[name for name, _ in eager_params]}")
    for (name, p0), p1 in zip(eager_params, replayed_params, strict=True):
        checks.assert_close(p1, p0.numpy(), rtol=1e-3, atol=2e-3, what=f"{name} after 3 captured steps vs 3 eager steps")


# ---------------------------------------------------------------- the launchers


@pytest.mark.hint("check the arguments before launching: TypeError for a wrong dtype or a host array, ValueError "
                  "for a wrong shape, naming what was expected and what came")
def test_launchers_reject_bad_arguments():
    f32 = partial(np.zeros, dtype=np.float32)
    gm, lm, em, am, cm = (module(n) for n in ("gelu.py", "layernorm.py", "embedding.py", "attention.py", "clip.py"))
    e = checks.expect_error
    e("gelu_forward with out of another shape", lambda: gm.gelu_forward(dev(f32(5)), dev(f32(4))), ValueError,
      "(5,)", "(4,)")
    e("gelu_backward with a float64 grad_out", lambda: gm.gelu_backward(dev(f32(5)), dev(np.zeros(5)), dev(f32(5))),
      TypeError, "float64")
    e("gelu_forward of a NumPy array", lambda: gm.gelu_forward(f32(5), dev(f32(5))), TypeError, "numpy")
    x = dev(f32((4, 6)))
    e("layernorm_forward with weight of 5 columns",
      lambda: lm.layernorm_forward(x, dev(f32(5)), dev(f32(6)), dev(f32((4, 6))), dev(f32(4)), dev(f32(4))),
      ValueError, "(6,)", "(5,)")
    e("layernorm_forward with mean of 6 rows",
      lambda: lm.layernorm_forward(x, dev(f32(6)), dev(f32(6)), dev(f32((4, 6))), dev(f32(6)), dev(f32(4))),
      ValueError, "(4,)", "(6,)")
    e("layernorm_forward of a 1-D x",
      lambda: lm.layernorm_forward(dev(f32(6)), dev(f32(6)), dev(f32(6)), dev(f32(6)), dev(f32(1)), dev(f32(1))),
      ValueError, "(6,)")
    e("layernorm_backward with grad_x of another shape",
      lambda: lm.layernorm_backward(x, x, dev(f32(6)), dev(f32(4)), dev(f32(4)), dev(f32((6, 4))), dev(f32(6)),
                                    dev(f32(6))), ValueError, "(4, 6)", "(6, 4)")
    table = dev(f32((10, 3)))
    e("embedding_forward with float32 ids", lambda: em.embedding_forward(dev(f32(4)), table, dev(f32((4, 3)))),
      TypeError, "int32", "float32")
    e("embedding_forward into out of the wrong shape",
      lambda: em.embedding_forward(dev(np.zeros(4, np.int32)), table, dev(f32((4, 2)))), ValueError, "(4, 3)",
      "(4, 2)")
    e("embedding_backward with grad_out of the wrong shape",
      lambda: em.embedding_backward(dev(np.zeros(4, np.int32)), dev(f32((5, 3))), table), ValueError, "(4, 3)",
      "(5, 3)")
    e("bmm with inner dimensions that differ",
      lambda: am.bmm(dev(f32((2, 3, 4))), dev(f32((2, 5, 6))), dev(f32((2, 3, 6)))), ValueError, "(2, 3, 4)",
      "(2, 5, 6)")
    e("bmm with batches that differ",
      lambda: am.bmm(dev(f32((2, 3, 4))), dev(f32((3, 4, 6))), dev(f32((2, 3, 6)))), ValueError, "(3, 4, 6)")
    e("bmm into out of the wrong shape",
      lambda: am.bmm(dev(f32((2, 3, 4))), dev(f32((2, 4, 6))), dev(f32((2, 6, 3)))), ValueError, "(2, 3, 6)",
      "(2, 6, 3)")
    e("bmm of 2-D arrays", lambda: am.bmm(dev(f32((3, 4))), dev(f32((4, 6))), dev(f32((3, 6)))), ValueError,
      "(3, 4)")
    e("causal softmax_forward of (2, 3, 4) scores",
      lambda: am.softmax_forward(dev(f32((2, 3, 4))), dev(f32((2, 3, 4))), 1.0, True), ValueError, "(2, 3, 4)")
    e("softmax_backward with grad_scores of another shape",
      lambda: am.softmax_backward(dev(f32((2, 3, 3))), dev(f32((2, 3, 3))), dev(f32((2, 3, 4))), 1.0),
      ValueError, "(2, 3, 3)", "(2, 3, 4)")
    e("split_heads of part 3 of rows of 3 parts",
      lambda: am.split_heads(dev(f32((2, 5, 12))), dev(f32((2, 2, 5, 2))), 3), ValueError, "12")
    e("split_heads into heads of another sequence length",
      lambda: am.split_heads(dev(f32((2, 5, 12))), dev(f32((2, 2, 4, 2))), 0), ValueError, "(2, 2, 5, 2)",
      "(2, 2, 4, 2)")
    e("sum_squares into a total of 2 elements", lambda: cm.sum_squares(dev(f32(5)), dev(f32(2))), ValueError, "2")
    e("clip_coefficient with max_norm 0",
      lambda: cm.clip_coefficient(dev(f32(1)), dev(f32(1)), dev(f32(1)), 0.0), ValueError, "max_norm")
    e("scale_by of a float64 x", lambda: cm.scale_by(dev(np.zeros(5)), dev(f32(1))), TypeError, "float64")


def _replay_case(name: str) -> tuple[str, Any, tuple, tuple, tuple]:
    """(what, call, inputs, outputs, in_place) of one launcher call on fresh data."""
    r = checks.rng("replay", name)
    normal = lambda *shape: dev(r.standard_normal(shape).astype(np.float32))  # noqa: E731
    gm, lm, em, am, cm = (module(n) for n in ("gelu.py", "layernorm.py", "embedding.py", "attention.py", "clip.py"))
    if name == "gelu_forward":
        x, out = normal(3001), checks.poison(3001)
        return name, partial(gm.gelu_forward, x, out), (x,), (out,), ()
    if name == "gelu_backward":
        x, g, out = normal(3001), normal(3001), checks.poison(3001)
        return name, partial(gm.gelu_backward, x, g, out), (x, g), (out,), ()
    if name == "layernorm_forward":
        x, w, b = normal(70, 33), normal(33), normal(33)
        out, mean, rstd = checks.poison((70, 33)), checks.poison(70), checks.poison(70)
        return name, partial(lm.layernorm_forward, x, w, b, out, mean, rstd, 1e-5), (x, w, b), (out, mean, rstd), ()
    if name == "layernorm_backward":
        x, w, b, g = normal(70, 33), normal(33), normal(33), normal(70, 33)
        mean, rstd = backend.empty(70), backend.empty(70)
        lm.layernorm_forward(x, w, b, backend.empty((70, 33)), mean, rstd, 1e-5)
        dx, dw, db = checks.poison((70, 33)), checks.poison(33), checks.poison(33)
        return name, partial(lm.layernorm_backward, g, x, w, mean, rstd, dx, dw, db), (g, x, w, mean, rstd), (
            dx, dw, db), ()
    if name == "embedding_forward":
        ids, table, out = dev(r.integers(0, 9, 40).astype(np.int32)), normal(9, 5), checks.poison((40, 5))
        return name, partial(em.embedding_forward, ids, table, out), (ids, table), (out,), ()
    if name == "embedding_backward":
        ids, g, grad = dev(r.integers(0, 9, 40).astype(np.int32)), normal(40, 5), checks.poison((9, 5))
        return name, partial(em.embedding_backward, ids, g, grad), (ids, g), (grad,), ()
    if name == "bmm":
        a, b, out = normal(3, 17, 9), normal(3, 11, 9), checks.poison((3, 17, 11))
        return name, partial(am.bmm, a, b, out, False, True), (a, b), (out,), ()
    if name == "softmax_forward":
        s, p = normal(3, 17, 17), checks.poison((3, 17, 17))
        return name, partial(am.softmax_forward, s, p, 0.5, True), (s,), (p,), ()
    if name == "softmax_backward":
        p = dev(softmax_reference(r.standard_normal((3, 17, 17)), 0.5, True).astype(np.float32))
        dp, ds = normal(3, 17, 17), checks.poison((3, 17, 17))
        return name, partial(am.softmax_backward, p, dp, ds, 0.5, True), (p, dp), (ds,), ()
    if name == "split_heads":
        x, out = normal(2, 9, 24), checks.poison((2, 2, 9, 4))
        return name, partial(am.split_heads, x, out, 1), (x,), (out,), ()
    if name == "merge_heads":
        y, out = normal(2, 2, 9, 4), normal(2, 9, 8)
        return name, partial(am.merge_heads, y, out, 0), (y,), (), (out,)
    if name == "sum_squares":
        x, total = normal(5001), dev(np.array([1.5], np.float32))
        return name, partial(cm.sum_squares, x, total), (x,), (), (total,)
    if name == "scale_by":
        x, coef = normal(5001), dev(np.array([0.25], np.float32))
        return name, partial(cm.scale_by, x, coef), (coef,), (), (x,)
    raise KeyError(name)


@pytest.mark.parametrize("launcher", ["gelu_forward", "gelu_backward", "layernorm_forward", "layernorm_backward",
                                      "embedding_forward", "embedding_backward", "bmm", "softmax_forward",
                                      "softmax_backward", "split_heads", "merge_heads", "sum_squares", "scale_by"])
@pytest.mark.hint("compute the result with your kernels, on the device: nothing computed with NumPy, CuPy or "
                  "PyTorch and copied in after (or instead of) the launch")
def test_results_come_from_your_kernels(launcher):
    what, call, inputs, outputs, in_place = _replay_case(launcher)
    # Sums made of atomicAdds (LayerNorm's weight and bias gradients when a learner adds them so, the embedding's,
    # sum_squares) come out in another order on every run of a GPU: a replay differs in the last bits (1e-4 relative
    # seen on an H100). A result written from the host is still caught: the replay starts from poisoned outputs.
    atomic = launcher in ("layernorm_backward", "embedding_backward", "sum_squares")
    checks.assert_computed_on_device(what, call, inputs=inputs, outputs=outputs, in_place=in_place,
                                     rtol=1e-3 if atomic else 1e-5, atol=1e-5 if atomic else 1e-6)


# ---------------------------------------------------------------- performance (GPU only)


def _gpu():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    return cupy


def _copy_reference(cupy, nbytes_each: int):
    src, dst = cupy.empty(nbytes_each // 4, np.float32), cupy.empty(nbytes_each // 4, np.float32)
    return lambda: cupy.copyto(dst, src)


PERF_ROWS, PERF_COLS = 16384, 768  # GPT-2's width, 16 sequences of 1,024 tokens: 48 MiB a matrix


@LN_FWD
@pytest.mark.perf
@pytest.mark.hint("a warp per row reads each row once from DRAM (its second and third passes hit the cache): enough "
                  "rows in flight to fill the GPU, coalesced loads")
def test_perf_layernorm_forward_against_copy(record_property):
    cupy = _gpu()
    rows, cols = PERF_ROWS, PERF_COLS
    x = cupy.random.RandomState(0).standard_normal((rows, cols), dtype=np.float32)
    w, b = cupy.ones(cols, np.float32), cupy.zeros(cols, np.float32)
    out, mean, rstd = cupy.empty_like(x), cupy.empty(rows, np.float32), cupy.empty(rows, np.float32)
    lm = module("layernorm.py")
    nbytes = 8 * rows * cols  # x read, out written
    checks.perf_ratio(f"layernorm_forward {rows} x {cols}", lambda: lm.layernorm_forward(x, w, b, out, mean, rstd),
                      _copy_reference(cupy, 4 * rows * cols), nbytes, "phase7.layernorm_forward", record_property,
                      reference_name="cupy.copyto (bytes read + written)")


@LN_BWD
@pytest.mark.perf
@pytest.mark.hint("grad_out and x are read once, grad_x written once; the parameter sums go through shared memory, "
                  "one partial row per block")
def test_perf_layernorm_backward_against_copy(record_property):
    cupy = _gpu()
    rows, cols = PERF_ROWS, PERF_COLS
    rs = cupy.random.RandomState(1)
    x, g = rs.standard_normal((rows, cols), dtype=np.float32), rs.standard_normal((rows, cols), dtype=np.float32)
    w, b = cupy.ones(cols, np.float32), cupy.zeros(cols, np.float32)
    mean, rstd = cupy.empty(rows, np.float32), cupy.empty(rows, np.float32)
    lm = module("layernorm.py")
    lm.layernorm_forward(x, w, b, cupy.empty_like(x), mean, rstd)
    dx, dw, db = cupy.empty_like(x), cupy.empty(cols, np.float32), cupy.empty(cols, np.float32)
    nbytes = 12 * rows * cols  # grad_out and x read, grad_x written
    checks.perf_ratio(f"layernorm_backward {rows} x {cols}",
                      lambda: lm.layernorm_backward(g, x, w, mean, rstd, dx, dw, db),
                      _copy_reference(cupy, 6 * rows * cols), nbytes, "phase7.layernorm_backward", record_property,
                      reference_name="cupy.copyto (bytes read + written)")


@SOFTMAX
@pytest.mark.perf
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.hint("a warp per row, loads coalesced, the row's second and third passes from the cache; enough "
                  "rows in flight to fill the GPU")
def test_perf_softmax_forward_against_copy(causal, record_property):
    cupy = _gpu()
    bh, t = 64, 1024  # 64 M floats: 256 MiB of scores
    s = cupy.random.RandomState(2).standard_normal((bh, t, t), dtype=np.float32)
    p = cupy.empty_like(s)
    am = module("attention.py")
    n = bh * t * t
    read = bh * t * (t + 1) // 2 if causal else n  # a causal row reads its visible keys only
    key = "phase7.softmax_forward" if not causal else "phase7.softmax_forward_causal"
    checks.perf_ratio(f"softmax_forward {bh} x {t} x {t}{' causal' if causal else ''}",
                      lambda: am.softmax_forward(s, p, 0.125, causal), _copy_reference(cupy, 4 * n),
                      4 * (read + n), key, record_property, reference_name="cupy.copyto (bytes read + written)",
                      reference_nbytes=8 * n)


@pytest.mark.kernel("attention.cu", "bmm")
@pytest.mark.perf
@pytest.mark.parametrize("b, h, t, d", [(64, 4, 64, 16), (4, 8, 1024, 64)], ids=["model", "long"])
@pytest.mark.hint("reported, not required: materialised attention (Q Kᵀ, softmax, P V) against PyTorch's fused "
                  "scaled_dot_product_attention; Phase 8b's FlashAttention closes the gap")
def test_perf_attention_against_pytorch_sdpa(b, h, t, d, record_property):
    cupy = _gpu()
    try:
        import torch
    except ImportError:
        pytest.skip('not measured: PyTorch is not installed, so there is no SDPA to race (`pip install -e ".[gpu]"`)')
    if not torch.cuda.is_available():
        pytest.skip("not measured (PyTorch has no CUDA)")
    import minitorch
    from minitorch import ops

    qkv = minitorch.tensor(cupy.asnumpy(cupy.random.RandomState(3).standard_normal((b, t, 3 * h * d),
                                                                                 dtype=np.float32)))
    q, k, v = (torch.randn(b, h, t, d, device="cuda") for _ in range(3))
    flops = 4 * b * h * t * t * d  # Q Kᵀ and P V, as the FlashAttention papers count (causal or not)
    checks.perf_ratio(f"causal attention forward B={b} H={h} T={t} D={d}", lambda: ops.attention(qkv, h),
                      lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), flops,
                      "phase7.attention_vs_sdpa", record_property, unit="GFLOP/s",
                      reference_name="torch scaled_dot_product_attention (fp32)")
