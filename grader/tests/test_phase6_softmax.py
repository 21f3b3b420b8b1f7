"""Graded tests of Phase 6, the row kernels of classification: softmax.cu / softmax.py.

Run by `grader check phase6`, on the active device (cuda or emu), with fresh random inputs (seed printed in
the report), rows and columns that are no multiple of any block, both layouts (a warp per row, a block per
row), outputs poisoned with NaN before every launch, and a check that the learner's kernel ran. Every value
is compared with a float64 NumPy reference. Logits of ±1e4 check that the row's maximum is subtracted first.
Performance (GPU only): bytes read + written per second, against `cupy.copyto` in the same run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError
from minitorch import backend, kernels

ON_GPU = backend.get_device() == "cuda"
# (rows, cols): one element, a row shorter than a warp, rows past the last full block, a prime number of
# columns, rows longer than a warp's limit (1024) that get a block each, and a long prime row.
SHAPES = [(1, 1), (1, 7), (7, 10), (33, 65), (257, 3), (5, 1000), (3, 1025), (2, 4099)]
if ON_GPU:
    SHAPES += [(4099, 10), (1000, 1000), (17, 50_021)]
# threads a row: None (the launcher's choice), a warp, blocks of 2, 8 and 32 warps.
LAYOUTS = [None, 32, 64, 256, 1024]
LARGE = 1e4  # logits this large overflow exp() in float32 unless the row's maximum is subtracted first
KERNEL_OF = {"softmax": "softmax_forward", "log_softmax": "log_softmax_forward",
             "softmax_backward": "softmax_backward", "log_softmax_backward": "log_softmax_backward",
             "cross_entropy": "cross_entropy_forward", "cross_entropy_backward": "cross_entropy_backward"}


def sm():
    return kernels.load_module("softmax.py")


def op(name: str, *extra: Any) -> Any:
    return pytest.param(name, *extra, marks=pytest.mark.kernel("softmax.cu", KERNEL_OF[name]),
                        id="-".join(str(v) for v in (name, *extra)))


def layout_id(threads: int | None) -> str:
    return "auto" if threads is None else f"t{threads}"


# ---------------------------------------------------------------- float64 references


def ref_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ref_log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def ref_cross_entropy(x: np.ndarray, t: np.ndarray) -> float:
    return float(-ref_log_softmax(x)[np.arange(len(t)), t].mean())


def ref_cross_entropy_grad(x: np.ndarray, t: np.ndarray, grad_loss: float) -> np.ndarray:
    g = ref_softmax(x)
    g[np.arange(len(t)), t] -= 1.0
    return g * grad_loss / len(t)


def logits(rows: int, cols: int, *salt: object, scale: float = 4.0) -> np.ndarray:
    return (checks.rng("logits", rows, cols, *salt).standard_normal((rows, cols)) * scale).astype(np.float32)


def targets(rows: int, cols: int, *salt: object) -> np.ndarray:
    return checks.rng("targets", rows, cols, *salt).integers(0, cols, rows).astype(np.int32)


def large_logits(rows: int, cols: int, *salt: object) -> np.ndarray:
    """Logits of ±1e4 (and values near the maximum, so that the result is not one-hot only)."""
    r = checks.rng("large", rows, cols, *salt)
    x = r.choice([-LARGE, LARGE], size=(rows, cols)) + r.standard_normal((rows, cols)) * 3
    return x.astype(np.float32)


def call(what: str, name: str, fn) -> None:
    """Run a launcher (captured: no copy between host and device inside it) and require that its kernel ran."""
    checks.reset_launches()
    checks.run_without_host_transfers(what, fn)
    checks.require_launch("softmax.cu", KERNEL_OF[name])


def check_finite(got: np.ndarray, what: str) -> None:
    got = np.asarray(got).reshape(len(got), -1)
    bad = ~np.isfinite(got)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise GradeError(f"{what}: {int(bad.sum())} of {got.size} values are not finite (first at [{r}][{c}]: "
                         f"{float(got[r, c])!r}) for logits of ±{LARGE:g}: "
                         f"expf overflows to inf past 88.7 in float32, and inf / inf is NaN. Subtract the row's "
                         f"maximum before expf: every exponent is then <= 0")


# ---------------------------------------------------------------- forward values


@pytest.mark.parametrize("threads", LAYOUTS, ids=layout_id)
@pytest.mark.parametrize("rows, cols", SHAPES, ids=str)
@pytest.mark.parametrize("name", [op("softmax"), op("log_softmax")])
@pytest.mark.hint("every thread of a row takes part in its reductions (a strided loop over the row, then "
                  "row_reduce), and a row past the last one still reaches every barrier")
def test_forward_values(name, rows, cols, threads):
    x_host = logits(rows, cols, name)
    x, out = backend.asarray(x_host), checks.poison((rows, cols))
    what = f"{name}(x of shape {(rows, cols)}, threads={threads})"
    call(what, name, lambda: getattr(sm(), name)(x, out, threads=threads))
    expected = ref_softmax(x_host) if name == "softmax" else ref_log_softmax(x_host)
    checks.assert_close(out, expected, rtol=2e-5, atol=1e-6 if name == "softmax" else 2e-5, what=what)
    checks.assert_bitwise_equal(x, x_host, what=f"{what}: x after the call (must not change)")


@pytest.mark.parametrize("threads", [32, 256], ids=layout_id)
@pytest.mark.parametrize("name", [op("softmax"), op("log_softmax")])
@pytest.mark.hint("subtract the row's maximum before expf: softmax(x) = softmax(x - max)")
def test_forward_stable_for_large_logits(name, threads):
    rows, cols = 9, 37
    x_host = large_logits(rows, cols, name)
    x, out = backend.asarray(x_host), checks.poison((rows, cols))
    what = f"{name} of logits of ±{LARGE:g} (threads={threads})"
    call(what, name, lambda: getattr(sm(), name)(x, out, threads=threads))
    got = checks.to_host(out)
    check_finite(got, what)
    expected = ref_softmax(x_host) if name == "softmax" else ref_log_softmax(x_host)
    # log_softmax of -1e4 against a maximum of 1e4: -2e4 in float32 is exact to about 1e-3
    checks.assert_close(got, expected, rtol=1e-5, atol=1e-6 if name == "softmax" else 4e-3, what=what)


@pytest.mark.parametrize("name", [op("softmax"), op("log_softmax")])
@pytest.mark.hint("a row's values are its own: a row of equal logits gives 1/cols everywhere")
def test_forward_of_equal_logits_is_uniform(name):
    rows, cols = 3, 1000
    x_host = np.full((rows, cols), -3.25, np.float32)
    out = checks.poison((rows, cols))
    what = f"{name} of rows of equal logits"
    x = backend.asarray(x_host)
    call(what, name, lambda: getattr(sm(), name)(x, out, threads=256))
    value = 1.0 / cols if name == "softmax" else -np.log(cols)
    checks.assert_close(out, np.full((rows, cols), value), rtol=2e-5, what=what)


# ---------------------------------------------------------------- backward values


@pytest.mark.parametrize("threads", [None, 32, 256], ids=layout_id)
@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 10), (33, 65), (3, 1025), (2, 4099)], ids=str)
@pytest.mark.parametrize("name", [op("softmax_backward"), op("log_softmax_backward")])
@pytest.mark.hint("softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy); y is the "
                  "forward's OUTPUT and the sums are over the row")
def test_backward_values(name, rows, cols, threads):
    x_host = logits(rows, cols, name, "x")
    y64 = ref_softmax(x_host) if name == "softmax_backward" else ref_log_softmax(x_host)
    y_host = y64.astype(np.float32)
    dy_host = checks.rng("dy", rows, cols).standard_normal((rows, cols)).astype(np.float32)
    y, dy, dx = backend.asarray(y_host), backend.asarray(dy_host), checks.poison((rows, cols))
    what = f"{name}(y, dy of shape {(rows, cols)}, threads={threads})"
    call(what, name, lambda: getattr(sm(), name)(y, dy, dx, threads=threads))
    y_, dy_ = y_host.astype(np.float64), dy_host.astype(np.float64)
    if name == "softmax_backward":
        expected = y_ * (dy_ - (dy_ * y_).sum(axis=1, keepdims=True))
        scale = np.abs(y_) * (np.abs(dy_) + (np.abs(dy_) * y_).sum(axis=1, keepdims=True))
    else:
        expected = dy_ - np.exp(y_) * dy_.sum(axis=1, keepdims=True)
        scale = np.abs(dy_) + np.exp(y_) * np.abs(dy_).sum(axis=1, keepdims=True)
    # float32 sums over a row: the error is a small multiple of eps times the magnitudes involved
    checks.assert_close(checks.to_host(dx), expected, rtol=0, atol=float(np.max(scale)) * 2e-6 + 1e-7, what=what)


# ---------------------------------------------------------------- cross-entropy


def axis_note(got: float, expected: float, rows: int, cols: int) -> str:
    """Why a mean may be off: averaged over the classes, or summed, instead of averaged over the batch."""
    for wrong, factor in ((f"divided by the classes ({cols}) instead of the rows ({rows})", rows / cols),
                          ("summed over the rows instead of averaged", float(rows)),
                          ("averaged over every element instead of over the rows", 1.0 / cols)):
        if abs(got - expected * factor) <= 1e-4 * abs(expected * factor) and factor != 1.0:
            return f" — that is the loss {wrong}: the mean is over the BATCH (the rows)"
    return ""


# 3000 rows: more than a block of the mean's reduction can have threads (1024), so a thread sums several.
@pytest.mark.parametrize("threads", [None, 32, 256], ids=layout_id)
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 10), (7, 10), (64, 10), (10, 3), (33, 65), (3, 1025),
                                        (3000, 10)], ids=str)
@pytest.mark.kernel("softmax.cu", "cross_entropy_forward")
@pytest.mark.hint("each row's loss is max + log(sum(exp(x - max))) - x[target]; the result is the MEAN over the "
                  "rows (the batch)")
def test_cross_entropy_values(rows, cols, threads):
    x_host, t_host = logits(rows, cols, "ce"), targets(rows, cols, "ce")
    x, t, loss = backend.asarray(x_host), backend.asarray(t_host), checks.poison(1)
    what = f"cross_entropy(logits of shape {(rows, cols)}, threads={threads})"
    call(what, "cross_entropy", lambda: sm().cross_entropy(x, t, loss, threads=threads))
    checks.require_launch("softmax.cu", "cross_entropy_mean")
    got, expected = float(checks.to_host(loss).reshape(-1)[0]), ref_cross_entropy(x_host, t_host)
    if not abs(got - expected) <= 2e-5 * max(1.0, abs(expected)):
        raise GradeError(f"{what}: got {got!r}, expected {expected!r} (float64){axis_note(got, expected, rows, cols)}")


@pytest.mark.parametrize("grad_loss", [1.0, 0.375])
@pytest.mark.parametrize("threads", [None, 32, 256], ids=layout_id)
@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 10), (64, 10), (10, 3), (33, 65), (3, 1025), (3000, 10)],
                         ids=str)
@pytest.mark.kernel("softmax.cu", "cross_entropy_backward")
@pytest.mark.hint("the gradient of the MEAN over the rows: grad_loss * (softmax(x) - onehot(t)) / rows")
def test_cross_entropy_backward_values(rows, cols, threads, grad_loss):
    x_host, t_host = logits(rows, cols, "ceb"), targets(rows, cols, "ceb")
    x, t, g = backend.asarray(x_host), backend.asarray(t_host), checks.poison((rows, cols))
    what = f"cross_entropy_backward(logits of shape {(rows, cols)}, grad_loss={grad_loss}, threads={threads})"
    call(what, "cross_entropy_backward", lambda: sm().cross_entropy_backward(x, t, g, grad_loss, threads=threads))
    got, expected = checks.to_host(g), ref_cross_entropy_grad(x_host, t_host, grad_loss)
    try:
        checks.assert_close(got, expected, rtol=1e-5, atol=1e-7 * grad_loss, what=what)
    except GradeError as err:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.nanmedian(got.astype(np.float64) / expected)
        for wrong, factor in ((f"divided by the classes ({cols}) instead of the rows ({rows})", rows / cols),
                              ("not divided by the rows: the gradient of a sum, not of the mean", float(rows))):
            if factor != 1.0 and abs(ratio - factor) <= 1e-3 * factor:
                raise GradeError(f"{err}\n  every value is {factor:g} x the expected one: {wrong}") from None
        raise


@pytest.mark.parametrize("threads", [32, 256], ids=layout_id)
@pytest.mark.parametrize("name", [op("cross_entropy"), op("cross_entropy_backward")])
@pytest.mark.hint("subtract the row's maximum before expf, and take the log of the sum, never of a probability")
def test_cross_entropy_stable_for_large_logits(name, threads):
    rows, cols = 6, 11
    x_host, t_host = large_logits(rows, cols, name), targets(rows, cols, "large")
    x, t = backend.asarray(x_host), backend.asarray(t_host)
    what = f"{name} of logits of ±{LARGE:g} (threads={threads})"
    if name == "cross_entropy":
        loss = checks.poison(1)
        call(what, name, lambda: sm().cross_entropy(x, t, loss, threads=threads))
        got = checks.to_host(loss).reshape(1, 1)
        check_finite(got, what)
        expected = ref_cross_entropy(x_host, t_host)
        # the loss is about 1e4 here: float32 holds it to about 1e-3
        checks.assert_close(got, np.array([[expected]]), rtol=1e-6, atol=2e-3, what=what)
    else:
        g = checks.poison((rows, cols))
        call(what, name, lambda: sm().cross_entropy_backward(x, t, g, 1.0, threads=threads))
        got = checks.to_host(g)
        check_finite(got, what)
        checks.assert_close(got, ref_cross_entropy_grad(x_host, t_host, 1.0), rtol=1e-5, atol=1e-7, what=what)


@pytest.mark.kernel("softmax.cu", "cross_entropy_forward")
@pytest.mark.hint("a target outside 0 .. cols - 1 names no class: write NaN for its row, and never read "
                  "logits[row * cols + t] outside the row")
def test_cross_entropy_target_out_of_range_is_nan():
    rows, cols = 4, 10
    x = backend.asarray(logits(rows, cols, "bad-target"))
    for bad in (-1, cols, 1 << 20):
        t_host = targets(rows, cols, "bad-target")
        t_host[rows - 1] = bad
        loss = checks.poison(1)
        what = f"cross_entropy with a target of {bad} for {cols} classes"
        t = backend.asarray(t_host)
        call(what, "cross_entropy", lambda t=t, loss=loss: sm().cross_entropy(x, t, loss))
        got = float(checks.to_host(loss)[0])
        if not np.isnan(got) or checks.is_poison(checks.to_host(loss))[0]:
            raise GradeError(f"{what}: the loss is {got!r}; a row whose target names no class has no loss: "
                             f"its row_loss must be NaN (and so the mean), and the kernel must write it")


# ---------------------------------------------------------------- barriers, arguments, host writes


@pytest.mark.parametrize("name", [op("softmax"), op("softmax_backward"), op("cross_entropy")])
@pytest.mark.hint("row_reduce: a barrier after the warps store their results and another before scratch is "
                  "written again", on="fault")
def test_block_per_row_has_no_shared_memory_race(name):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase6 --device emu)")
    from minitorch import emu

    rows, cols = 3, 300
    x_host = logits(rows, cols, "race")
    x = backend.asarray(x_host)
    with emu.check_mode():
        what = f"{name} with a block of 256 threads per row, in the emulator's check mode"
        if name == "softmax":
            out = checks.poison((rows, cols))
            call(what, name, lambda: sm().softmax(x, out, threads=256))
            checks.assert_close(out, ref_softmax(x_host), rtol=2e-5, atol=1e-6, what=what)
        elif name == "softmax_backward":
            y = backend.asarray(ref_softmax(x_host).astype(np.float32))
            out = checks.poison((rows, cols))
            call(what, name, lambda: sm().softmax_backward(y, x, out, threads=256))
        else:
            loss = checks.poison(1)
            t = backend.asarray(targets(rows, cols, "race"))
            call(what, name, lambda: sm().cross_entropy(x, t, loss, threads=256))


@pytest.mark.hint("softmax.py checks its arguments and names what it expected and what it got, before launching")
def test_launchers_reject_bad_arguments():
    m = sm()
    x, out = backend.asarray(np.ones((3, 4), np.float32)), backend.empty((3, 4))
    t = backend.asarray(np.zeros(3, np.int32))
    checks.expect_error("softmax into an out of another shape", lambda: m.softmax(x, backend.empty((4, 3))),
                        ValueError, "(3, 4)", "(4, 3)")
    checks.expect_error("softmax of a float64 array", lambda: m.softmax(backend.asarray(np.ones((3, 4))), out),
                        TypeError, "float64")
    checks.expect_error("softmax of a NumPy array", lambda: m.softmax(np.ones((3, 4), np.float32), out),
                        TypeError, "numpy")
    checks.expect_error("log_softmax of a 1-D array", lambda: m.log_softmax(backend.empty((4,)), out),
                        ValueError, "(4,)")
    checks.expect_error("softmax_backward with dy of another shape",
                        lambda: m.softmax_backward(x, backend.empty((3, 5)), out), ValueError, "(3, 5)")
    checks.expect_error("cross_entropy with int64 targets",
                        lambda: m.cross_entropy(x, backend.asarray(np.zeros(3, np.int64)), backend.empty((1,))),
                        ValueError, "int32", "int64")
    checks.expect_error("cross_entropy with 4 targets for 3 rows",
                        lambda: m.cross_entropy(x, backend.asarray(np.zeros(4, np.int32)), backend.empty((1,))),
                        ValueError, "(3,)", "(4,)")
    checks.expect_error("cross_entropy into a loss of 2 elements",
                        lambda: m.cross_entropy(x, t, backend.empty((2,))), ValueError, "(2,)")
    checks.expect_error("cross_entropy_backward into a grad of another shape",
                        lambda: m.cross_entropy_backward(x, t, backend.empty((4, 3))), ValueError, "(4, 3)")
    checks.expect_error("a layout of 48 threads a row", lambda: m.softmax(x, out, threads=48), ValueError, "48")


@pytest.mark.parametrize("name", [op("softmax"), op("log_softmax"), op("softmax_backward"), op("cross_entropy"),
                                  op("cross_entropy_backward")])
@pytest.mark.hint("compute the result with your kernels, on the device: no NumPy/CuPy result copied in after "
                  "the launch")
def test_results_come_from_your_kernels(name):
    rows, cols = 37, 1030
    x_host = logits(rows, cols, "host-writes")
    x = backend.asarray(x_host)
    t = backend.asarray(targets(rows, cols, "host-writes"))
    m = sm()
    if name in ("softmax", "log_softmax"):
        out = checks.poison((rows, cols))
        checks.assert_computed_on_device(name, partial(getattr(m, name), x, out), inputs=(x,), outputs=(out,))
    elif name == "softmax_backward":
        y = backend.asarray(ref_softmax(x_host).astype(np.float32))
        out = checks.poison((rows, cols))
        checks.assert_computed_on_device(name, partial(m.softmax_backward, y, x, out), inputs=(y, x),
                                         outputs=(out,))
    elif name == "cross_entropy":
        loss = checks.poison(1)
        checks.assert_computed_on_device(name, partial(m.cross_entropy, x, t, loss), inputs=(x, t),
                                         outputs=(loss,))
    else:
        g = checks.poison((rows, cols))
        checks.assert_computed_on_device(name, partial(m.cross_entropy_backward, x, t, g, 0.5), inputs=(x, t),
                                         outputs=(g,))


# ---------------------------------------------------------------- through the framework


@pytest.mark.kernel("softmax.cu", "cross_entropy_backward")
@pytest.mark.hint("F.cross_entropy runs cross_entropy (forward) and cross_entropy_backward from softmax.py")
def test_functional_cross_entropy_and_its_gradient():
    import minitorch
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)

    rows, cols = 64, 10  # a batch of MNIST
    x_host, t_host = logits(rows, cols, "functional"), targets(rows, cols, "functional")
    x = minitorch.tensor(x_host, requires_grad=True)
    checks.reset_launches()
    loss = F.cross_entropy(x, F.class_indices(t_host))
    loss.backward()
    checks.require_launch("softmax.cu", "cross_entropy_forward")
    checks.require_launch("softmax.cu", "cross_entropy_backward")
    checks.assert_close(loss, ref_cross_entropy(x_host, t_host), rtol=2e-5, what="F.cross_entropy")
    checks.assert_close(x.grad, ref_cross_entropy_grad(x_host, t_host, 1.0), rtol=1e-5, atol=1e-8,
                        what="the gradient of F.cross_entropy")


@pytest.mark.parametrize("name", [op("softmax_backward"), op("log_softmax_backward")])
@pytest.mark.hint("F.softmax / F.log_softmax save their output and run softmax_backward / log_softmax_backward")
def test_functional_softmax_gradient(name):
    import minitorch
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)

    rows, cols = 5, 70
    x_host = logits(rows, cols, "functional", name)
    w_host = checks.rng("weights", name).standard_normal((rows, cols)).astype(np.float32)
    x = minitorch.tensor(x_host, requires_grad=True)
    checks.reset_launches()
    fn = F.softmax if name == "softmax_backward" else F.log_softmax
    y = fn(x)
    y.backward(minitorch.tensor(w_host))
    checks.require_launch("softmax.cu", KERNEL_OF[name])
    w = w_host.astype(np.float64)
    if name == "softmax_backward":
        p = ref_softmax(x_host)
        expected = p * (w - (w * p).sum(axis=1, keepdims=True))
    else:
        expected = w - ref_softmax(x_host) * w.sum(axis=1, keepdims=True)
    checks.assert_close(x.grad, expected, rtol=1e-4, atol=1e-6, what=f"the gradient of F.{fn.__name__}")


# ---------------------------------------------------------------- performance (GPU only)


@pytest.mark.perf
@pytest.mark.parametrize("rows, cols, key", [
    pytest.param(1 << 16, 128, "softmax_warp", id="warp-65536x128"),
    pytest.param(4096, 8192, "softmax_block", id="block-4096x8192"),
])
@pytest.mark.kernel("softmax.cu", "softmax_forward")
@pytest.mark.hint("a row is read three times (max, sum, write): the second and third reads must come from the "
                  "caches, so keep a row's work on one warp or block, and its loads coalesced")
def test_perf_softmax_against_copy(rows, cols, key, record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    x = cupy.random.RandomState(checks.seed()).standard_normal((rows, cols), dtype=np.float32)
    y, dst = cupy.empty_like(x), cupy.empty_like(x)
    m = sm()
    m.softmax(x, y)
    if not bool(cupy.allclose(y.sum(axis=1), 1.0, atol=1e-4)):
        raise GradeError(f"softmax {rows} x {cols}: rows do not sum to 1")
    checks.perf_ratio(f"softmax {rows} x {cols} (bytes read + written)", lambda: m.softmax(x, y),
                      lambda: cupy.copyto(dst, x), 8 * x.size, f"phase6.{key}", record_property,
                      reference_name="cupy.copyto (bytes read + written)")
