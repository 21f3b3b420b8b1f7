"""Known-bad Phase 5 learner code (the GEMM ladder) must be rejected, each for the right reason.

Every fixture is the reference solution (with the earlier phases' files, which the framework uses) with
one deliberate mistake, graded from a prepared workspace on the emulator: only the tests that matter
run. The last ones need a GPU: a "tiled" rung that is the naive (or the coalesced) kernel under another name
must fail the speed-up the course promises.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.checks import threshold
from tests.grader.test_grader_fixtures import (
    HOST_COPY,
    _emu_available,
    assert_kernel_never_ran,
    grade_workspace,
    replace_once,
    results,
)

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase5_fast.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase5_fast.ipynb not written yet"),
    pytest.mark.timeout(300),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

SECOND_BARRIER = "        __syncthreads();  // everyone is done with the tile before it is overwritten\n"
RUNG5_LOADS = """            As[r * R5_BK + a_col] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.0f;"""
RUNG5_LOADS_B = """            Bs[r * R5_BN + b_col] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.0f;"""
RUNG5_STORE = """            if (row < M && col < N) {
                C[(size_t)row * N + col] = acc[i][j];
            }"""
LAUNCH = "    load(name)(grid, block, args)\n"
RUNG10_STORE = """            if (row0 + i < M && col0 + j < N) {
                C[(size_t)(row0 + i) * N + col0 + j] = acc[i][j];
            }"""
RUNG10_A_STRIDES = "    const size_t a_row = ta ? 1 : K, a_k = ta ? M : 1;"
NAIVE_BODY = """    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
"""


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and gemm.cu / gemm.py."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase5":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str, device: str = "emu", expect_pass: bool = False) -> dict:
    return grade_workspace(tmp_path, "phase5", files, *args, timeout=120, device=device, expect_pass=expect_pass)


def body_of(source: str, kernel: str) -> tuple[int, int]:
    """Start and end of the SOLUTION region inside `kernel` of gemm.cu."""
    start = source.index(kernel)
    begin = source.index("    // ### BEGIN SOLUTION\n", start)
    end = source.index("    // ### END SOLUTION\n", begin)
    return begin, end + len("    // ### END SOLUTION\n")


@needs_emu
@pytest.mark.slow
def test_tiled_rung_without_its_second_barrier_is_a_race(tmp_path):
    files = solution_sources()
    files["gemm.cu"] = replace_once(files["gemm.cu"], SECOND_BARRIER, "")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_rung_has_no_shared_memory_race or (test_rung_values and shared)")
    [race] = [c for c in results(report, "test_rung_has_no_shared_memory_race") if c["name"].endswith("[shared]")]
    assert race["result"] in ("FAIL", "CRASH") and "shared-memory race" in race["reason"], race
    assert "__syncthreads() is missing" in race["reason"] and "gemm.cu:" in race["reason"], race
    # the other tiled rungs keep their barriers: no race there
    assert all(c["result"] == "PASS" for c in results(report, "test_rung_has_no_shared_memory_race")
               if not c["name"].endswith("[shared]")), report["checks"]


@needs_emu
@pytest.mark.slow
def test_blocktiled_rung_right_only_at_tile_multiples_is_rejected(tmp_path):
    """Rung 5 without its bounds checks: right for 256 x 64 @ 64 x 128 (whole 128 x 128 x 8 tiles), a memory
    fault at every other size."""
    files = solution_sources()
    cu = files["gemm.cu"]
    cu = replace_once(cu, RUNG5_LOADS, "            As[r * R5_BK + a_col] = A[(size_t)gr * K + gk];")
    cu = replace_once(cu, RUNG5_LOADS_B, "            Bs[r * R5_BN + b_col] = B[(size_t)gk * N + gc];")
    cu = replace_once(cu, RUNG5_STORE, "            C[(size_t)row * N + col] = acc[i][j];")
    files["gemm.cu"] = cu
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_rung_values and blocktile_2d and (256-64-128 or 7-7-7 or 129-1-130)")
    checks = {c["name"]: c for c in results(report, "test_rung_values")}
    multiple = [c for name, c in checks.items() if name.endswith("-256-64-128]")]
    assert multiple and multiple[0]["result"] == "PASS", checks
    odd = [c for name, c in checks.items() if name.endswith(("-7-7-7]", "-129-1-130]"))]
    assert len(odd) == 2 and all(c["result"] in ("FAIL", "CRASH") for c in odd), odd
    assert all("out-of-bounds" in c["reason"] for c in odd), odd


@needs_emu
@pytest.mark.slow
def test_register_tile_rung_storing_its_whole_tile_is_rejected(tmp_path):
    """Rung 10 storing all of its 8 x 16 tile, without the test of C's edges: right where M and N are multiples of
    the tile (256 x 128), out of bounds of C or over other threads' outputs elsewhere."""
    files = solution_sources()
    files["gemm.cu"] = replace_once(files["gemm.cu"], RUNG10_STORE,
                                    "            C[(size_t)(row0 + i) * N + col0 + j] = acc[i][j];")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_rung_values and regtile and (256-64-128 or 7-7-7 or 129-1-130 or 1000-33-7)")
    checks = {c["name"]: c for c in results(report, "test_rung_values")}
    multiple = [c for name, c in checks.items() if name.endswith("-256-64-128]")]
    assert multiple and multiple[0]["result"] == "PASS", checks
    odd = [c for name, c in checks.items() if name.endswith(("-7-7-7]", "-129-1-130]", "-1000-33-7]"))]
    assert len(odd) == 3 and all(c["result"] in ("FAIL", "CRASH") for c in odd), odd
    assert any("out-of-bounds" in c["reason"] for c in odd), odd


@needs_emu
@pytest.mark.slow
def test_register_tile_rung_reading_a_transposed_operand_with_the_wrong_stride_is_rejected(tmp_path):
    """Rung 10 stepping along k through A stored K x M by K floats (the stride of A's rows untransposed): right
    only where M = K."""
    files = solution_sources()
    files["gemm.cu"] = replace_once(files["gemm.cu"], RUNG10_A_STRIDES,
                                    "    const size_t a_row = ta ? 1 : K, a_k = ta ? K : 1;")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_transposed_operands and regtile and At- and (7-7-7 or 131-67-260 or 1000-33-7)")
    checks = {c["name"]: c for c in results(report, "test_transposed_operands")}
    square = [c for name, c in checks.items() if name.endswith("-7-7-7]")]
    assert square and square[0]["result"] == "PASS", checks
    other = [c for name, c in checks.items() if not name.endswith("-7-7-7]")]
    assert len(other) == 2 and all(c["result"] in ("FAIL", "CRASH") for c in other), other


@needs_emu
@pytest.mark.slow
def test_launcher_computing_with_numpy_is_rejected(tmp_path):
    files = solution_sources()
    files["gemm.py"] = replace_once(
        files["gemm.py"], LAUNCH,
        "    a_h, b_h = backend.asnumpy(a), backend.asnumpy(b)  # NumPy, not the kernels\n"
        "    out.set(((a_h.T if transpose_a else a_h) @ (b_h.T if transpose_b else b_h)).astype(np.float32))\n")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "(test_rung_values and double_buffered) or test_results_come_from_your_kernels")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_rung_values"), replay, "sgemm_9_double_buffered")


@pytest.mark.gpu
def test_launcher_calling_cupy_matmul_is_rejected(tmp_path):
    """On a GPU the tempting shortcut is cuBLAS itself: the launcher hands the product to cupy.matmul."""
    files = solution_sources()
    files["gemm.py"] = replace_once(
        files["gemm.py"], LAUNCH,
        "    import cupy  # cuBLAS, not the kernels\n"
        "    cupy.matmul(a.T if transpose_a else a, b.T if transpose_b else b, out=out)\n")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "(test_rung_values and double_buffered and 129) or test_results_come_from_your_kernels",
                   device="cuda")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_rung_values"), replay, "sgemm_9_double_buffered")


@needs_emu
@pytest.mark.slow
def test_launcher_overwriting_the_kernels_result_from_the_host_is_rejected(tmp_path):
    """The kernel runs (the launch count is satisfied), then NumPy's product is copied over its result."""
    files = solution_sources()
    files["gemm.py"] = replace_once(
        files["gemm.py"], LAUNCH, LAUNCH +
        "    a_h, b_h = backend.asnumpy(a), backend.asnumpy(b)\n"
        "    out.set(((a_h.T if transpose_a else a_h) @ (b_h.T if transpose_b else b_h)).astype(np.float32) * 1.0001)\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert replay["result"] == "FAIL" and HOST_COPY in replay["reason"], replay


@needs_emu
@pytest.mark.slow
def test_transposes_materialised_by_the_launcher_are_rejected(tmp_path):
    """gemm.py that copies a transposed operand with Phase 2's transpose kernel instead of reading it in place."""
    files = solution_sources()
    files["gemm.py"] = replace_once(
        files["gemm.py"], "    transposed = transpose_a or transpose_b\n",
        "    if transpose_a:  # materialise the transpose with Phase 2's kernel\n"
        "        from minitorch.kernels import load_module\n"
        "        a_t = backend.empty((a.shape[1], a.shape[0]))\n"
        "        load_module('transpose.py').transpose(a, a_t)\n"
        "        a, transpose_a = a_t, False\n"
        "    transposed = transpose_a or transpose_b\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_transposed_operands and At and double_buffered")
    for check in results(report, "test_transposed_operands"):
        assert check["result"] == "FAIL" and "read the operands in place" in check["reason"], check


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_tiled_rung_no_faster_than_naive_fails_the_speed_up(tmp_path):
    """Rung 3's body replaced by rung 1's (right values on square matrices, no tiles): not 3x rung 1."""
    files = solution_sources()
    cu = files["gemm.cu"]
    begin, end = body_of(cu, 'extern "C" __global__ void sgemm_3_shared')
    files["gemm.cu"] = cu[:begin] + NAIVE_BODY + cu[end:]
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k",
                   "test_perf_shared_memory_tiling_against_naive", device="cuda")
    [check] = results(report, "test_perf_shared_memory_tiling_against_naive")
    assert check["result"] == "FAIL" and "at least 3.00x is needed" in check["reason"], check


@pytest.mark.gpu
def test_tiled_rung_that_is_only_coalesced_fails_the_speed_up(tmp_path):
    """Rung 3's body replaced by a coalesced kernel without tiles (Phase 2's matmul): many times the naive
    kernel, but not faster than the grader's coalesced one; and rung 1 made slower does not lower the bar."""
    files = solution_sources()
    cu = files["gemm.cu"]
    begin, end = body_of(cu, 'extern "C" __global__ void sgemm_3_shared')
    coalesced = NAIVE_BODY.replace("const int row = blockIdx.x * blockDim.x + threadIdx.x;",
                                   "const int row = blockIdx.y * blockDim.y + threadIdx.y;").replace(
                                   "const int col = blockIdx.y * blockDim.y + threadIdx.y;",
                                   "const int col = blockIdx.x * blockDim.x + threadIdx.x;")
    assert coalesced != NAIVE_BODY
    cu = cu[:begin] + coalesced + cu[end:]
    begin, end = body_of(cu, 'extern "C" __global__ void sgemm_1_naive')
    slower = NAIVE_BODY.replace("for (int k = 0; k < K; ++k) {", "for (int k = 0; k < K; ++k) { __nanosleep(100);")
    files["gemm.cu"] = cu[:begin] + slower + cu[end:]
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k",
                   "test_perf_shared_memory_tiling_against_naive", device="cuda")
    [check] = results(report, "test_perf_shared_memory_tiling_against_naive")
    needed = f"at least {threshold('phase5.shared_vs_coalesced'):.2f}x is needed (phase5.shared_vs_coalesced"
    assert check["result"] == "FAIL" and needed in check["reason"], check


@pytest.mark.parametrize("device", [pytest.param("emu", marks=needs_emu), pytest.param("cuda", marks=pytest.mark.gpu)])
def test_float4_loads_of_misaligned_rows_fault(tmp_path, device):
    """Rung 9 checks A's alignment by its rows of K floats even when A is stored transposed (rows of M): with
    M = 129 the float4 loads are misaligned, which a GPU faults on, and so does the emulator."""
    files = solution_sources()
    files["gemm.cu"] = replace_once(files["gemm.cu"],
                                    "const bool vec_a = TA ? rows_aligned(A, M) : rows_aligned(A, K);",
                                    "const bool vec_a = rows_aligned(A, K);")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_transposed_operands and double_buffered and At-129-16-130", device=device)
    checks = results(report, "test_transposed_operands")
    assert checks and all(c["result"] != "PASS" and "misaligned" in c["reason"].lower() for c in checks), checks
    if device == "emu":
        assert all("gemm.cu:" in c["reason"] and "`float4`" in c["reason"] for c in checks), checks
