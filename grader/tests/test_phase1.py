"""Graded tests of Phase 1 (GPU memory): memory.cu (`fill`, `copy`) and memory.py (their launchers).

Run by `grader check phase1`, on the active device (cuda or emu), with fresh random inputs (seed
printed in the report), odd sizes, outputs poisoned with NaN before every launch.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import minitorch
from grader import checks
from grader.checks import ODD_SIZES, GradeError, launch_checked
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, kernels

FILL = pytest.mark.kernel("memory.cu", "fill")
COPY = pytest.mark.kernel("memory.cu", "copy")
BLOCK = 256

ROUNDTRIP_SHAPES = [(), (1,), (7,), (257,), (31, 33), (2, 3, 5, 7), (0,), (3, 0, 2), (1_000_003,)]
TENSOR_SHAPES = [(), (1,), (4099,), (3, 5), (2, 3, 4, 5)]


def memory():
    return kernels.load_module("memory.py")


def device() -> str:
    return minitorch.get_device()


def special_values(shape: tuple[int, ...], *salt: object) -> np.ndarray:
    """Random float32 values over many magnitudes, with NaN, ±inf, -0.0 and denormals mixed in."""
    r = checks.rng("special", shape, *salt)
    values = np.asarray(r.standard_normal(shape) * 10.0 ** r.uniform(-30, 30, shape), dtype=np.float32)
    flat = values.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-45, 3.4e38, -3.4e38,
                         np.float32(1.17549435e-38)], dtype=np.float32)
    if flat.size:
        where = r.integers(0, flat.size, size=min(flat.size, 4 * specials.size))
        flat[where] = np.resize(specials, where.size)
    return values


def expect_tensor(t, shape: tuple[int, ...], what: str) -> None:
    if t.device != device() or t.shape != shape:
        raise GradeError(f"{what}: got a tensor of shape {t.shape} on {t.device!r}, "
                         f"expected shape {shape} on {device()!r}")


def random_value(*salt: object) -> float:
    """A float32-representable value (so the expected result is exact)."""
    return float(np.float32(checks.rng("value", *salt).standard_normal() * 100))




# ---------------------------------------------------------------- host <-> device


@pytest.mark.parametrize("shape", ROUNDTRIP_SHAPES, ids=str)
@pytest.mark.hint("Tensor.to / .numpy must copy every byte unchanged")
def test_roundtrip_lossless(shape):
    host = special_values(shape)
    t = minitorch.from_numpy(host)
    expect_tensor(t, shape, "minitorch.from_numpy")
    checks.assert_bitwise_equal(t.numpy(), host, what=f"host -> {device()} -> host, shape {shape}")
    via_cpu = minitorch.from_numpy(host, device="cpu").to(device()).to("cpu").numpy()
    checks.assert_bitwise_equal(via_cpu, host, what=f"cpu tensor -> .to({device()!r}) -> .to('cpu'), shape {shape}")


# ---------------------------------------------------------------- fill


@FILL
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("every element in [0, n) must be written once with the value")
def test_fill_odd_sizes(n):
    value = random_value("fill", n)
    out = checks.poison(n)
    with checks.expect_launch("memory.cu", "fill"):
        on_device(f"memory.fill(n={n})", partial(memory().fill, out, value))
    checks.assert_close(out, np.full(n, value), rtol=0, what=f"memory.fill(out, {value!r}) with n={n}")


@FILL
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5, 7), (1, 1, 1)], ids=str)
@pytest.mark.hint("fill every one of out.size elements, whatever the shape")
def test_fill_multidimensional(shape):
    value = random_value("fill-md", shape)
    out = checks.poison(shape)
    with checks.expect_launch("memory.cu", "fill"):
        on_device(f"memory.fill(shape={shape})", partial(memory().fill, out, value))
    checks.assert_close(out, np.full(shape, value), rtol=0, what=f"memory.fill on shape {shape}")


@FILL
@pytest.mark.hint("use a grid-stride loop: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_fill_kernel_small_grid_covers_all():
    n, value = 10_007, random_value("fill-grid")
    out = checks.poison(n)
    checks.assert_grid_stride(f"fill kernel launched with grid 3 x block 64 for n={n}",
                              kernels.load_kernel("memory.cu", "fill"), (out, np.float32(value), np.int64(n)),
                              {"out": (out, np.full(n, value))}, rtol=0)


@FILL
@pytest.mark.parametrize("n", [1, 31, 1000, 4099])
@pytest.mark.hint("check `i < n` before writing: the last block has threads past the end")
def test_fill_kernel_no_write_past_n(n):
    pad = 4 * BLOCK
    value = random_value("fill-bounds", n)
    kernel = kernels.load_kernel("memory.cu", "fill")
    blocks = (n + pad) // BLOCK  # more threads than n, none past the padded buffer
    buf = checks.poison(n + pad)
    launch_checked(f"fill n={n} (grid {blocks} x block {BLOCK})",
                   lambda: kernel((blocks,), (BLOCK,), (buf, np.float32(value), np.int64(n))))
    host = checks.to_host(buf)
    checks.assert_close(host[:n], np.full(n, value), rtol=0, what=f"fill n={n}")
    written = np.flatnonzero(~np.isnan(host[n:]))
    if written.size:
        raise GradeError(f"fill with n={n} wrote past the end: out-of-bounds write at index {n + written[0]} "
                           f"({written.size} elements past n were written; the bounds check `i < n` is missing?)")
    exact = checks.poison(n)  # exactly n elements: the emulator faults on any write past them
    launch_checked(f"fill n={n} into a buffer of exactly n elements",
                   lambda: kernel((blocks,), (BLOCK,), (exact, np.float32(value), np.int64(n))))


# ---------------------------------------------------------------- copy


@COPY
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("dst[i] = src[i] for every i in [0, n), nothing else")
def test_copy_values(n):
    src_host = (checks.rng("copy", n).standard_normal(n) * 1000).astype(np.float32)
    src, dst = backend.asarray(src_host), checks.poison(n)
    with checks.expect_launch("memory.cu", "copy"):
        on_device(f"memory.copy(n={n})", partial(memory().copy, src, dst))
    checks.assert_close(dst, src_host.astype(np.float64), rtol=0, what=f"memory.copy with n={n}")
    checks.assert_close(src, src_host.astype(np.float64), rtol=0, what=f"src after memory.copy with n={n} (must not change)")


@COPY
@pytest.mark.parametrize("shape", [(7,), (4099,), (2, 3, 5, 7), (1_000_003,)], ids=str)
@pytest.mark.hint("copy the float32 bits as they are: NaN, inf, -0.0 and denormals included")
def test_copy_bitwise_specials(shape):
    src_host = special_values(shape, "copy")
    src, dst = backend.asarray(src_host), checks.poison(shape)
    with checks.expect_launch("memory.cu", "copy"):
        on_device(f"memory.copy(shape={shape})", partial(memory().copy, src, dst))
    checks.assert_bitwise_equal(dst, src_host, what=f"memory.copy of special values, shape {shape}")


@COPY
@pytest.mark.hint("use a grid-stride loop: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_copy_kernel_small_grid_covers_all():
    n = 10_007
    src_host = checks.rng("copy-grid").standard_normal(n).astype(np.float32)
    src, dst = backend.asarray(src_host), checks.poison(n)
    checks.assert_grid_stride(f"copy kernel launched with grid 3 x block 64 for n={n}",
                              kernels.load_kernel("memory.cu", "copy"), (src, dst, np.int64(n)),
                              {"dst": (dst, src_host.astype(np.float64))}, rtol=0)


@pytest.mark.parametrize("launcher", [pytest.param("fill", marks=FILL), pytest.param("copy", marks=COPY)])
@pytest.mark.hint("past 16,384 blocks the launcher caps the grid: each thread must then loop over several elements")
def test_launchers_past_the_grid_cap(launcher):
    n = checks.GRID_CAP_ELEMENTS
    out = checks.poison(n)
    if launcher == "fill":
        value = random_value("fill-cap")
        on_device(f"memory.fill(n={n})", partial(memory().fill, out, value))
        expected = np.full(n, value)
    else:
        src_host = checks.rng("copy-cap").standard_normal(n).astype(np.float32)
        src = backend.asarray(src_host)
        on_device(f"memory.copy(n={n})", partial(memory().copy, src, out))
        expected = src_host.astype(np.float64)
    checks.assert_close(out, expected, rtol=0, what=f"memory.{launcher} with n={n}, past the launcher's grid cap")


@COPY
@pytest.mark.parametrize("n", [1, 31, 1000, 4099])
@pytest.mark.hint("check `i < n` before reading or writing: the last block has threads past the end")
def test_copy_kernel_no_write_past_n(n):
    pad = 4 * BLOCK
    kernel = kernels.load_kernel("memory.cu", "copy")
    blocks = (n + pad) // BLOCK
    src_host = checks.rng("copy-bounds", n).standard_normal(n + pad).astype(np.float32)
    src, dst = backend.asarray(src_host), checks.poison(n + pad)
    launch_checked(f"copy n={n} (grid {blocks} x block {BLOCK})",
                   lambda: kernel((blocks,), (BLOCK,), (src, dst, np.int64(n))))
    host = checks.to_host(dst)
    checks.assert_close(host[:n], src_host[:n].astype(np.float64), rtol=0, what=f"copy n={n}")
    written = np.flatnonzero(~np.isnan(host[n:]))
    if written.size:
        raise GradeError(f"copy with n={n} wrote past the end: out-of-bounds write at index {n + written[0]} "
                           f"({written.size} elements past n were written; the bounds check `i < n` is missing?)")
    exact_src, exact_dst = backend.asarray(src_host[:n].copy()), checks.poison(n)
    launch_checked(f"copy n={n} between buffers of exactly n elements",
                   lambda: kernel((blocks,), (BLOCK,), (exact_src, exact_dst, np.int64(n))))


# ---------------------------------------------------------------- the Tensor API on your kernels


@FILL
@pytest.mark.parametrize("shape", TENSOR_SHAPES, ids=str)
@pytest.mark.hint("minitorch.full and ones run your memory.fill: it must work for every shape, 0-d included")
def test_tensor_full_ones_zeros(shape):
    value = random_value("full", shape)
    with checks.expect_launch("memory.cu", "fill"):
        t = minitorch.full(shape, value)
    expect_tensor(t, shape, "minitorch.full")
    checks.assert_close(t.numpy(), np.full(shape, value), rtol=0, what=f"minitorch.full({shape}, {value!r})")
    checks.assert_close(minitorch.ones(shape).numpy(), np.ones(shape), rtol=0, what=f"minitorch.ones({shape})")
    checks.assert_close(minitorch.zeros(shape).numpy(), np.zeros(shape), rtol=0, what=f"minitorch.zeros({shape})")


@FILL
@pytest.mark.hint("Tensor.fill_ runs your memory.fill on the tensor's own buffer")
def test_tensor_fill_in_place():
    t = minitorch.randn((33, 7), seed=checks.seed())
    value = random_value("fill_")
    with checks.expect_launch("memory.cu", "fill"):
        same = t.fill_(value)
    if same is not t:
        raise GradeError("Tensor.fill_ must return the tensor itself (it works in place)")
    checks.assert_close(t.numpy(), np.full((33, 7), value), rtol=0, what="Tensor.fill_")
    checks.assert_close(t.to("cpu").numpy(), np.full((33, 7), value), rtol=0, what="Tensor.fill_ then .to('cpu')")


@COPY
@pytest.mark.parametrize("shape", TENSOR_SHAPES, ids=str)
@pytest.mark.hint("Tensor.clone runs your memory.copy into a new buffer")
def test_tensor_clone(shape):
    t = minitorch.from_numpy(special_values(shape, "clone"))
    with checks.expect_launch("memory.cu", "copy"):
        c = t.clone()
    if c is t:
        raise GradeError("Tensor.clone returned the tensor itself, not a copy")
    expect_tensor(c, shape, "Tensor.clone")
    checks.assert_bitwise_equal(c.numpy(), t.numpy(), what=f"Tensor.clone, shape {shape}")
    t.data.set(np.zeros(shape, np.float32))  # the clone owns its memory (not fill_: this test is about copy)
    checks.assert_bitwise_equal(c.numpy(), special_values(shape, "clone"), what="clone after the original changed")


@pytest.mark.hint("copies between host and device must keep every bit")
def test_tensor_randn_same_values_on_every_device():
    s = checks.seed()
    on_device = minitorch.randn((17, 3), seed=s)
    on_cpu = minitorch.randn((17, 3), device="cpu", seed=s)
    checks.assert_bitwise_equal(on_device.numpy(), on_cpu.numpy(), what="randn on the device vs on the cpu")
    checks.assert_bitwise_equal(on_device.to("cpu").numpy(), on_cpu.numpy(), what="randn(...).to('cpu')")


# ---------------------------------------------------------------- performance (GPU only)

PERF_N = checks.PERF_BYTES // 4


@FILL
@pytest.mark.perf
@pytest.mark.hint("launch enough blocks to fill the GPU; keep the loop simple (one store per iteration)")
def test_perf_fill_bandwidth(record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    # The reference is a device-to-device copy, the bandwidth the memory system gives a simple kernel:
    # CuPy's own ndarray.fill reached only ~850 GB/s on an H200 (benchmarks/results/phase1_kernels-*),
    # far too easy a bar.
    out, src = cupy.empty(PERF_N, np.float32), cupy.ones(PERF_N, np.float32)
    mem = memory()
    checks.perf_ratio("fill bandwidth", lambda: mem.fill(out, 1.0), lambda: cupy.copyto(out, src),
                      4 * PERF_N, "phase1.fill", record_property, reference_name="cupy.copyto (bytes read + written)",
                      reference_nbytes=8 * PERF_N)


@COPY
@pytest.mark.perf
@pytest.mark.hint("launch enough blocks to fill the GPU; one load and one store per iteration")
def test_perf_copy_bandwidth(record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    src, dst = cupy.ones(PERF_N, np.float32), cupy.empty(PERF_N, np.float32)
    mem = memory()
    checks.perf_ratio("copy bandwidth", lambda: mem.copy(src, dst), lambda: cupy.copyto(dst, src),
                      8 * PERF_N, "phase1.copy", record_property, reference_name="cupy.copyto")


@pytest.mark.perf
@pytest.mark.parametrize("direction", ["host-to-device", "device-to-host"])
def test_perf_transfer_bandwidth(direction, record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    host = np.ones(PERF_N // 4, np.float32)  # 64 MiB, pageable
    if direction == "host-to-device":
        learner, reference = (lambda: minitorch.from_numpy(host)), (lambda: cupy.asarray(host))
    else:
        t = minitorch.from_numpy(host)
        dev = cupy.asarray(host)
        learner, reference = t.numpy, dev.get
    checks.perf_ratio(f"{direction} transfer", learner, reference, host.nbytes, "phase1.transfer",
                      record_property, reference_name="CuPy", flush_l2=False, hide_host_overhead=False)


# ---------------------------------------------------------------- results written by your kernels


@pytest.mark.parametrize("launcher", ["fill", "copy"])
@pytest.mark.hint("compute the result with your kernel, on the device: no NumPy/CuPy result copied in after the launch")
def test_results_come_from_your_kernels(launcher):
    n = 4099
    out = checks.poison(n)
    if launcher == "fill":
        checks.assert_computed_on_device("memory.fill", partial(memory().fill, out, 1.5), outputs=(out,))
    else:
        src = backend.asarray(np.arange(n, dtype=np.float32))
        checks.assert_computed_on_device("memory.copy", partial(memory().copy, src, out), inputs=(src,), outputs=(out,))


# ---------------------------------------------------------------- past 2^31 elements (a GPU with the memory)

HUGE = (1 << 31) + 4099  # more elements than a 32-bit int can index


def _huge_arrays(count: int) -> None:
    """Skip, saying why, unless this is a GPU with room for `count` arrays of HUGE floats."""
    if backend.get_device() != "cuda":
        pytest.skip("32-bit index overflow shows only at 2^31 elements, 8 GiB an array: checked on a GPU "
                    "(the emulator does not have the memory)")
    import cupy

    free, _total = cupy.cuda.runtime.memGetInfo()
    if free < count * HUGE * 4 + (1 << 30):
        pytest.skip(f"needs {count * HUGE * 4 / 2**30:.0f} GiB of free GPU memory for 2^31 + 4099 floats "
                    f"x {count}; this GPU has {free / 2**30:.0f} GiB free")


@FILL
@pytest.mark.hint("index with 64-bit integers (long long): an int overflows past 2^31 elements")
def test_fill_past_2_to_the_31_elements():
    _huge_arrays(1)
    import cupy

    out = cupy.full(HUGE, np.nan, dtype=np.float32)
    launch_checked(f"memory.fill of {HUGE:,} elements", partial(memory().fill, out, 3.0))
    tail = checks.to_host(out[(1 << 31) - 4096:])
    checks.assert_close(tail, np.full(tail.size, 3.0), rtol=0,
                        what=f"the last {tail.size} of {HUGE:,} elements after memory.fill (around index 2^31)")


@pytest.mark.kernel("memory.cu", "copy")
@pytest.mark.hint("index with 64-bit integers (long long): an int overflows past 2^31 elements")
def test_copy_past_2_to_the_31_elements():
    _huge_arrays(2)
    import cupy

    src = cupy.arange(HUGE, dtype=np.float32)  # float32 of the index: distinct enough near 2^31 to spot a shift
    dst = cupy.full(HUGE, np.nan, dtype=np.float32)
    launch_checked(f"memory.copy of {HUGE:,} elements", partial(memory().copy, src, dst))
    lo = (1 << 31) - 4096
    got, expected = checks.to_host(dst[lo:]), checks.to_host(src[lo:])
    checks.assert_close(got, expected, rtol=0, what=f"the last {got.size} of {HUGE:,} elements after memory.copy")

