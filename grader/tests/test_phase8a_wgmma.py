"""Graded tests of Phase 8a's rung 6: wgmma fed by the TMA (hgemm_wgmma.cu, launched by hgemm.py's variant="wgmma").

Rung 6 is built for sm_90a and runs on an sm_90 GPU only (H100, H200). Every test here that runs it is marked
``needs_arch("sm_90a")``: on any other device (the emulator, an older GPU) the grader's plugin skips it before it
starts, from the device alone, and the report shows it NOT MEASURED with that reason; such a check never blocks
the phase, even with ``--require-perf``. On an sm_90 GPU it is graded like the other rungs.

What rung 6 supports: any M, N, K >= 1 (multiples of no tile), as long as every stored row length (a.shape[1],
b.shape[1]) is a multiple of 8 elements and both arrays are 16-byte aligned (the TMA copies rows that start at
16-byte boundaries); the launcher hands every other product to rung 5. The tests decide which products rung 6
must compute by that rule, independently of the launcher's ``wgmma_fits``, and check that its kernel (or rung 5's,
for the others) ran. Values against the float64 product of the same 16-bit inputs within test_phase8a's bound.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from test_phase8a import (
    FORMATS,
    LAYOUTS,
    STORAGE,
    _cublas,
    _device_operands,
    assert_hgemm_close,
    hgemm_module,
    launches_of,
    operands,
    run_bias,
)

from grader import checks
from grader.checks import GradeError, launch_checked
from minitorch import backend

WGMMA_FILE, WGMMA_KERNEL = "hgemm_wgmma.cu", "hgemm_6_wgmma"
HOPPER = pytest.mark.needs_arch("sm_90a")  # elsewhere NOT MEASURED, never blocking (grader/pytest_plugin.py)
RUNG6 = pytest.mark.kernel(WGMMA_FILE, WGMMA_KERNEL)
# (M, K, N): none a multiple of rung 6's 128 x 256 x 64 tiles (but 1024); stored rows multiples of 8 in all four
# layouts where M, K and N are, and in some layouts only (M = 1, 129, 1000 + 3, K = 1): the others run on rung 5.
# K = 4096: the ring of 4 stages turns 16 times a tile; 1024^3: 32 tiles on a persistent grid of <= 132 blocks.
SHAPES = [(1, 8, 8), (8, 8, 8), (129, 72, 136), (136, 72, 264), (17, 1, 33), (1000, 136, 72), (8, 40, 3000),
          (1003, 40, 8), (520, 1000, 264), (384, 4096, 512), (1024, 1024, 1024)]


def rung6_runs(stored_a: np.ndarray, stored_b: np.ndarray) -> bool:
    """Does rung 6 compute this product? (The TMA's rule; the arrays are 16-byte aligned allocations, K >= 1.)"""
    return stored_a.shape[1] % 8 == 0 and stored_b.shape[1] % 8 == 0


def run_wgmma(m: int, k: int, n: int, dtype: str, ta: bool, tb: bool, out16: bool, salt: object = "") -> None:
    """hgemm(variant="wgmma") of fresh operands into a poisoned C with a poisoned guard past its end: rung 6's
    kernel ran where it must (rung 5's elsewhere), the values are within the bound, nothing past C was written,
    A and B are unchanged."""
    stored_a, stored_b, a64, b64 = operands(m, k, n, dtype, ta, tb, "wgmma", salt)
    a, b = backend.asarray(stored_a), backend.asarray(stored_b)
    out_dtype = STORAGE[dtype] if out16 else np.dtype(np.float32)
    guard_n = 64
    whole = checks.poison((m * n + guard_n,), out_dtype)
    out = whole[: m * n].reshape(m, n)
    what = (f"hgemm(variant='wgmma', dtype={dtype!r}) of op(A) {m} x {k} @ op(B) {k} x {n} into {out_dtype}"
            + (", A stored K x M" if ta else "") + (", B stored N x K" if tb else ""))
    checks.reset_launches()
    checks.run_without_host_transfers(what, lambda: hgemm_module().hgemm(a, b, out, dtype, "wgmma", transpose_a=ta,
                                                                          transpose_b=tb))
    if rung6_runs(stored_a, stored_b):
        if launches_of(WGMMA_FILE, WGMMA_KERNEL) == 0:
            raise GradeError(f"{what}: no launch of `{WGMMA_KERNEL}` from {WGMMA_FILE} was recorded; rung 6 must "
                             f"compute every product whose stored rows are multiples of 8 elements (here a is "
                             f"{stored_a.shape}, b {stored_b.shape}): is wgmma_fits right?")
    elif launches_of("hgemm.cu", "hgemm_5_pipeline") == 0:
        raise GradeError(f"{what}: the TMA cannot copy rows of {stored_a.shape[1]} and {stored_b.shape[1]} "
                         f"elements (not 16-byte multiples): rung 5 (hgemm_5_pipeline) must compute it, and it "
                         f"did not run")
    assert_hgemm_close(out, a64, b64, dtype, out16, what)
    tail = checks.to_host(whole)[m * n:]
    untouched = tail == 0xFFFF if out_dtype == np.uint16 else checks.is_poison(tail)
    if not untouched.all():
        raise GradeError(f"{what}: wrote past the end of C (the elements after it changed)")
    checks.assert_bitwise_equal(a, stored_a, what=f"{what}: A after the call (must not change)")
    checks.assert_bitwise_equal(b, stored_b, what=f"{what}: B after the call (must not change)")


@HOPPER
@RUNG6
@pytest.mark.parametrize("m, k, n", SHAPES, ids=lambda v: str(v))
@pytest.mark.hint("the producer waits on a stage's `empty` barrier (parity flipped: a fresh barrier counts as done "
                  "with the phase before its first), announces STAGE_BYTES with expect_tx, then issues the copies; "
                  "a consumer waits on `full` with the ring's parity, and frees a stage only after wgmma.wait_group "
                  "says the group reading it is done")
def test_wgmma_values(m, k, n):
    for dtype in FORMATS:
        for out16 in (False, True):
            for ta, tb in LAYOUTS:
                run_wgmma(m, k, n, dtype, ta, tb, out16)



@HOPPER
@RUNG6
@pytest.mark.parametrize("m, k, n", [(129, 72, 136), (1000, 384, 1152), (8, 40, 3000)], ids=str)
@pytest.mark.hint("with has_bias, add bias[col] to the fp32 accumulators of column col before the epilogue "
                  "stores (or rounds) them; a column past N has no bias to read")
def test_wgmma_bias_added_as_c_is_stored(m, k, n):
    for dtype in FORMATS:
        for out16 in (False, True):
            for tb in (False, True):
                checks.reset_launches()
                run_bias("wgmma", m, k, n, dtype, tb, out16)
                if launches_of(WGMMA_FILE, WGMMA_KERNEL) == 0:
                    raise GradeError(f"hgemm(variant='wgmma', bias=) of {m} x {k} x {n}: no launch of "
                                     f"`{WGMMA_KERNEL}` was recorded")


@HOPPER
@RUNG6
@pytest.mark.parametrize("batch, m, k, n", [(8, 384, 2048, 1152), (3, 136, 192, 264), (3, 129, 192, 264),
                                            (2, 136, 72, 264)], ids=str)
@pytest.mark.hint("a stack whose k runs on into the next matrix (A stored (batch, K, M), B (batch, K, N), K a "
                  "multiple of 64) is one launch of rung 6: grid z the matrix, block z's copies start at row z K of "
                  "the maps (k0 = k_first + kt * BK), its C at z M N; other stacks go to rung 5")
def test_wgmma_stack_along_k_in_one_launch(batch, m, k, n):
    """The pieces of a split weight gradient: out[z] = A[z]ᵀ B[z] for each z, on rung 6 when K % 64 == 0 (the
    stack seen as two matrices of batch K rows) and the TMA can copy the rows (M and N multiples of 8), on rung 5
    otherwise (K = 72: a k-step would read the next matrix's rows; M = 129)."""
    hg = hgemm_module()
    for dtype in FORMATS:
        stacks = [operands(m, k, n, dtype, True, False, "stack", z) for z in range(batch)]
        a = backend.asarray(np.stack([s[0] for s in stacks]))
        b = backend.asarray(np.stack([s[1] for s in stacks]))
        whole = checks.poison((batch * m * n + 64,))
        out = whole[: batch * m * n].reshape(batch, m, n)
        what = (f"hgemm(variant='wgmma', dtype={dtype!r}) of a stack of {batch} products Aᵀ B, A stored "
                f"({batch}, {k}, {m}), B ({batch}, {k}, {n})")
        checks.reset_launches()
        checks.run_without_host_transfers(what, lambda a=a, b=b, out=out, dtype=dtype: hg.hgemm(
            a, b, out, dtype, "wgmma", transpose_a=True))
        on_rung6 = k % 64 == 0 and m % 8 == 0 and n % 8 == 0  # the stacks' stored rows: M and N elements
        ran = launches_of(WGMMA_FILE, WGMMA_KERNEL) if on_rung6 else launches_of("hgemm.cu", "hgemm_5_pipeline")
        if ran != 1:
            raise GradeError(f"{what}: {ran} launches of `{WGMMA_KERNEL if on_rung6 else 'hgemm_5_pipeline'}`, "
                             f"expected one for the whole stack" + (f" (K = {k} is a multiple of 64: rung 6)"
                                                                    if on_rung6 else f" (K = {k}: rung 5)"))
        for z, (_, _, a64, b64) in enumerate(stacks):
            assert_hgemm_close(out[z], a64, b64, dtype, False, f"{what}, matrix {z}")
        if not checks.is_poison(checks.to_host(whole)[batch * m * n:]).all():
            raise GradeError(f"{what}: wrote past the end of the stack of C")


@HOPPER
@RUNG6
@pytest.mark.hint("with K = 0, C is a sum of no products: every element written as 0 (a tensor map has no empty "
                  "dimension: rung 5 does it); an empty C needs no launch")
def test_wgmma_empty_products():
    hg = hgemm_module()
    for dtype in FORMATS:
        out = checks.poison((8, 16))
        launch_checked("hgemm(variant='wgmma') of (8 x 0) @ (0 x 16)", partial(
            hg.hgemm, backend.empty((8, 0), STORAGE[dtype]), backend.empty((0, 16), STORAGE[dtype]), out, dtype,
            "wgmma"))
        checks.assert_close(out, np.zeros((8, 16)), rtol=0, what="hgemm(variant='wgmma') with K = 0")
        for m, n in ((0, 8), (8, 0)):
            hg.hgemm(backend.empty((m, 8), STORAGE[dtype]), backend.empty((8, n), STORAGE[dtype]),
                     backend.empty((m, n)), dtype, "wgmma")



@HOPPER
@RUNG6
@pytest.mark.hint("the launcher launches your kernels (the maps' writer, then the GEMM) and lets them write C: "
                  "nothing computed on the host, no cupy.matmul")
def test_wgmma_results_come_from_your_kernels():
    hg = hgemm_module()
    for dtype, (ta, tb) in zip(FORMATS * 2, LAYOUTS, strict=True):
        stored_a, stored_b, _, _ = operands(72, 40, 80, dtype, ta, tb, "wgmma replay")
        a, b, out = backend.asarray(stored_a), backend.asarray(stored_b), checks.poison((72, 80))
        call = partial(hg.hgemm, a, b, out, dtype, "wgmma", transpose_a=ta, transpose_b=tb)
        checks.assert_computed_on_device(f"hgemm(variant='wgmma', dtype={dtype!r}, transpose_a={ta}, "
                                         f"transpose_b={tb})", call, inputs=(a, b), outputs=(out,))
        if launches_of(WGMMA_FILE, WGMMA_KERNEL) == 0:
            raise GradeError("hgemm(variant='wgmma') of a 72 x 40 x 80 product did not launch hgemm_6_wgmma")



# ---------------------------------------------------------------- performance (sm_90 GPUs only)


@HOPPER
@RUNG6
@pytest.mark.perf
@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.hint("rung 6 keeps the tensor cores busy only if the copies of the next stages are in flight while "
                  "wgmma works: the producer runs STAGES ahead, a consumer keeps one wgmma group in flight "
                  "(wait_group 1) and frees each stage as soon as its group is done")
def test_perf_wgmma_against_cublas(dtype, record_property):
    import cupy

    size = 4096
    reference, name = _cublas(cupy, size, dtype)
    a, out = _device_operands(cupy, size, dtype)
    hg = hgemm_module()
    run_wgmma(136, 72, 264, dtype, False, False, True, salt="perf")  # right before it is fast
    checks.perf_ratio(f"wgmma ({dtype}) at {size}^3", lambda: hg.hgemm(a, a, out, dtype, "wgmma"), reference,
                      2 * size ** 3, "phase8a.wgmma_4096", record_property, unit="GFLOP/s", reference_name=name)


# The GPT's training products (test_phase8a's GPT_SHAPES, d_model 768 at B·T = 4096) and the course GPT's (d_model
# 64): (name, M, K, N, transpose_a, transpose_b). Reported, never required: few tiles, or a long K, leave SMs idle.
GPT_SHAPES = [("fc_fwd", 4096, 768, 3072, False, False), ("fc_dx", 4096, 3072, 768, False, True),
              ("fc_dw", 768, 4096, 3072, True, False), ("d64_fc_fwd", 4096, 64, 256, False, False),
              ("d64_fc_dw", 64, 4096, 256, True, False)]


@HOPPER
@RUNG6
@pytest.mark.perf
@pytest.mark.parametrize("name, m, k, n, ta, tb", GPT_SHAPES, ids=[s[0] for s in GPT_SHAPES])
def test_perf_wgmma_at_the_gpt_training_shapes(name, m, k, n, ta, tb, record_property):
    """variant='wgmma' (bf16, 16-bit output) on the products of a GPT's training step, against torch.matmul on the
    same layouts: reported, never required."""
    import cupy

    try:
        import torch
    except ImportError:
        pytest.skip("not measured: PyTorch is not installed (cuBLAS bf16 through torch.matmul)")
    x = torch.empty((k, m) if ta else (m, k), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    y = torch.empty((n, k) if tb else (k, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    z = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    op_x, op_y = (x.t() if ta else x), (y.t() if tb else y)
    rs = cupy.random.RandomState(4)
    a = (rs.uniform(-1, 1, x.shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (rs.uniform(-1, 1, y.shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out = cupy.empty((m, n), np.uint16)
    hg = hgemm_module()
    checks.perf_ratio(f"wgmma (bf16) at the GPT's {name} ({m} x {k} x {n})",
                      lambda: hg.hgemm(a, b, out, "bfloat16", "wgmma", transpose_a=ta, transpose_b=tb),
                      lambda: torch.matmul(op_x, op_y, out=z), 2 * m * n * k, "phase8a.reported_only",
                      record_property, unit="GFLOP/s", reference_name="torch.matmul (bf16, cuBLAS)")

