"""Known-bad Phase 2 learner code must be rejected, each for the right reason (`grader check phase2`).

Every fixture is the reference solution of Phase 2 with one deliberate mistake, graded from a prepared
workspace on the emulator (fast: only the tests that matter run, with a short timeout). The last one
needs a GPU: a correct but naive transpose, launched as the tiled one, must fail the bandwidth threshold.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import HOST_COPY, _emu_available, grade_workspace, replace_once, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase2_kernels.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase2_kernels.ipynb not written yet"),
    pytest.mark.timeout(300),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

MATMUL_ACC = "            acc += A[(long long)row * K + k] * B[(long long)k * N + col];\n"
ADD_LOOP = """    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = a[i] + b[i];
    }
"""
RELU_STORE = "        out[i] = x > 0.0f ? x : 0.0f;\n"
SYNC = "    __syncthreads();  // the whole tile is in shared memory before any thread reads another's element\n"
TILED_WRITE = """        if (out_row < cols && out_col < rows) {
            out[(long long)out_row * rows + out_col] = tile[threadIdx.x][j];
        }
"""


def solution_sources() -> dict[str, str]:
    """The six Phase 2 files, from the %%kernel / %%module cells of the solution notebook."""
    from grader.labs import learner_files

    return learner_files(SOLUTION)


def grade(tmp_path: Path, files: dict[str, str], *args: str, timeout: float = 60, device: str = "emu") -> dict:
    """`grader check phase2` on a workspace holding `files`; the check must reject it (exit 1)."""
    return grade_workspace(tmp_path, "phase2", files, *args, timeout=timeout, device=device)


def by_case(report: dict, prefix: str) -> dict[str, dict]:
    """{check name: check} for the checks named prefix*."""
    return {c["name"]: c for c in results(report, prefix)}


@needs_emu
@pytest.mark.slow
@pytest.mark.parametrize("wrong_a", ["A[(long long)k * M + row]", "A[(long long)k * K + row]"])
def test_matmul_swapped_indices_is_a_value_mismatch(tmp_path, wrong_a):
    files = solution_sources()
    files["matmul.cu"] = replace_once(files["matmul.cu"], MATMUL_ACC,
                                      f"            acc += {wrong_a} * B[(long long)k * N + col];\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_matmul_values")
    checks = by_case(report, "test_matmul_values")
    ragged = next(c for name, c in checks.items() if "33-17-65" in name)
    assert ragged["result"] in ("FAIL", "CRASH"), ragged
    failing = [c for c in checks.values() if c["result"] == "FAIL"]
    assert failing, checks
    for check in failing:
        assert "differ from A·B (float64)" in check["reason"] and "first bad element C[" in check["reason"], check
    if "M + row" in wrong_a:  # A read as a column-major matrix: the grader names the mistake
        assert ragged["result"] == "FAIL" and "A read as if it were column-major" in ragged["reason"], ragged
    # a wild index may also leave A: the emulator stops it as an out-of-bounds read
    for check in checks.values():
        if check["result"] == "CRASH":
            assert "KernelFault" in check["reason"] and "matmul_naive" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_transpose_without_bounds_check_is_out_of_bounds_at_the_ragged_edge(tmp_path):
    files = solution_sources()
    files["transpose.cu"] = replace_once(
        files["transpose.cu"], TILED_WRITE,
        "        out[(long long)out_row * rows + out_col] = tile[threadIdx.x][j];  // no bounds check\n")
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_transpose_kernel_no_write_past_end or test_transpose_values")
    for prefix in ("test_transpose_kernel_no_write_past_end", "test_transpose_values"):
        for name, check in by_case(report, prefix).items():
            ragged = re.search(r"\((\d+), (\d+)\)", name)
            rows, cols = int(ragged.group(1)), int(ragged.group(2))
            if "transpose_naive" in name or (rows % 32 == 0 and cols % 32 == 0):
                assert check["result"] == "PASS", check  # the naive kernel, and shapes without a ragged edge
            elif prefix == "test_transpose_kernel_no_write_past_end":
                assert check["result"] in ("FAIL", "CRASH"), check
                assert "out-of-bounds" in check["reason"], check
                assert "transpose_tiled" in check["reason"], check
    square = by_case(report, "test_transpose_kernel_no_write_past_end")
    assert any("out-of-bounds memory access" in c["reason"] and "KernelFault" in c["reason"]
               for c in square.values()), square  # the emulator's guard page stops the write past the end


@needs_emu
@pytest.mark.slow
def test_tiled_transpose_without_barrier_depends_on_thread_order(tmp_path):
    files = solution_sources()
    files["transpose.cu"] = replace_once(files["transpose.cu"], SYNC, "")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_transpose_tiled_does_not_depend_on_thread_order")
    [check] = results(report, "test_transpose_tiled_does_not_depend_on_thread_order")
    assert check["result"] == "FAIL", check
    assert "depends on the order in which threads run" in check["reason"], check
    assert "__syncthreads() is probably missing" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_elementwise_without_grid_stride_leaves_elements_unwritten(tmp_path):
    files = solution_sources()
    files["elementwise.cu"] = replace_once(files["elementwise.cu"], ADD_LOOP, (
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one element a thread, no loop\n"
        "    if (i < n) {\n"
        "        out[i] = a[i] + b[i];\n"
        "    }\n"))
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_elementwise_kernel_small_grid_covers_all or (test_elementwise_values and add)")
    checks = by_case(report, "test_elementwise_kernel_small_grid_covers_all")
    for name, check in checks.items():
        if "[add]" in name:
            assert check["result"] == "FAIL", check
            assert "only 192 of 10007 elements were written" in check["reason"], check
            assert "grid-stride loop" in check["reason"], check
        else:
            assert check["result"] == "PASS", check
    # the launcher gives every element a thread at these sizes: the values are right
    assert all(c["result"] == "PASS" for c in results(report, "test_elementwise_values")), report["checks"]


@needs_emu
@pytest.mark.slow
def test_relu_that_leaves_negatives_is_named(tmp_path):
    files = solution_sources()
    files["elementwise.cu"] = replace_once(files["elementwise.cu"], RELU_STORE, "        out[i] = x;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_elementwise_values and relu")
    checks = by_case(report, "test_elementwise_values")
    for n in (7, 31, 257, 4099, 1000003):
        [check] = [c for name, c in checks.items() if name.endswith(f"[relu-{n}]")]
        assert check["result"] == "FAIL", check
        assert "outputs are negative" in check["reason"] and "relu must turn every negative value into 0" in \
            check["reason"], check


@needs_emu
@pytest.mark.slow
def test_matmul_computed_without_the_kernel_is_rejected(tmp_path):
    files = solution_sources()
    launch = "    kernel(grid, (BLOCK, BLOCK), (a, b, out, np.int32(M), np.int32(N), np.int32(K)))\n"
    files["matmul.py"] = replace_once(files["matmul.py"], launch,
                                      "    out.set(backend.asnumpy(a) @ backend.asnumpy(b))  # NumPy, not the kernel\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_matmul_values")
    for check in results(report, "test_matmul_values"):
        assert check["result"] == "FAIL", check
        assert "no launch of `matmul_naive` from matmul.cu was recorded" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_untouched_lab_fails_pointing_at_the_todos(tmp_path):
    from grader import labs

    lab = tmp_path / "phase2_kernels.ipynb"
    lab.write_text(labs.generate_lab(SOLUTION))
    report = grade(tmp_path, {}, "--notebook", str(lab), "-k", "test_matmul_values or test_transpose_empty")
    cells = {c["name"]: c for c in report["checks"] if c["step"] == "notebook" and c["result"] == "FAIL"}
    for exercise in ("Exercise 1", "Exercise 3", "Exercise 5"):
        cell = next(c for name, c in cells.items() if exercise in name)
        assert "MINITORCH_TODO" in cell["reason"] and "TODO" in cell["hint"], cell
    for check in results(report, "test_matmul_values") + results(report, "test_transpose_empty"):
        assert check["result"] == "FAIL", check
        assert "NotImplementedError" in check["reason"] or "has not been written yet" in check["reason"], check


@pytest.mark.gpu
def test_naive_transpose_as_tiled_fails_the_bandwidth_threshold(tmp_path):
    """Correct but slow: the naive body under the tiled name (same 32 x 8 launch) writes `rows` floats apart."""
    files = solution_sources()
    cu = files["transpose.cu"]
    naive = cu[cu.index('extern "C" __global__ void transpose_naive'):cu.index('extern "C" __global__ void transpose_tiled')]
    start = cu.index('extern "C" __global__ void transpose_tiled')
    files["transpose.cu"] = cu[:start] + naive.replace("transpose_naive", "transpose_tiled")
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k",
                   "test_perf_transpose_tiled_bandwidth or test_transpose_values", device="cuda")
    assert all(c["result"] == "PASS" for c in results(report, "test_transpose_values"))  # still correct
    [check] = results(report, "test_perf_transpose_tiled_bandwidth")
    assert check["result"] == "FAIL", check
    assert re.search(r"at least \d\.\d\dx is needed \(phase2\.transpose_tiled", check["reason"]), check


@needs_emu
@pytest.mark.slow
def test_transpose_launched_with_32_by_32_blocks_is_rejected(tmp_path):
    """Exercise 4 read as 'blocks of TILE x TILE threads': right values (four threads write each element,
    the same value), a race all the same; the launch shape is checked."""
    files = solution_sources()
    files["transpose.py"] = replace_once(files["transpose.py"],
                                         "    kernel(grid, (TILE, BLOCK_ROWS), (a, out, np.int32(rows), np.int32(cols)))\n",
                                         "    kernel(grid, (TILE, TILE), (a, out, np.int32(rows), np.int32(cols)))\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_transpose_launches_32_by_8_blocks")
    found = results(report, "test_transpose_launches_32_by_8_blocks")
    assert len(found) == 2, report
    for check in found:
        assert check["result"] == "FAIL" and "expected (32, 8)" in check["reason"], check
        assert "32 x 8" in check["hint"]


@needs_emu
@pytest.mark.slow
def test_launcher_that_overwrites_the_result_from_the_host_is_rejected(tmp_path):
    """It launches the kernel (the launch count is satisfied), then writes NumPy's answer into out."""
    files = solution_sources()
    files["elementwise.py"] = replace_once(
        files["elementwise.py"],
        '    kernel = load_kernel("elementwise.cu", "add")\n'
        "    kernel((blocks_for(out.size),), (THREADS,), (a, b, out, np.int64(out.size)))\n",
        '    kernel = load_kernel("elementwise.cu", "add")\n'
        "    kernel((1,), (1,), (a, b, out, np.int64(min(out.size, 1))))\n"
        "    out.set(backend.asnumpy(a) + backend.asnumpy(b))  # the answer, computed on the host\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels or test_elementwise_values")
    [check] = [c for c in results(report, "test_results_come_from_your_kernels") if c["name"].endswith("[add]")]
    assert check["result"] == "FAIL" and HOST_COPY in check["reason"], check
    adds = [c for c in results(report, "test_elementwise_values") if "[add" in c["name"]]
    assert adds and all(c["result"] == "FAIL" and HOST_COPY in c["reason"] for c in adds), adds  # each call captured


@needs_emu
@pytest.mark.slow
def test_a_read_just_past_the_end_is_caught_by_the_bounds_test(tmp_path):
    """relu reads a[i + 1] (multiplied by 0: the values stay right). For n = 1 that read lands in the few
    alignment bytes after the array, where the emulator's default guard cannot see it: the bounds tests
    run in check mode, which does."""
    files = solution_sources()
    files["elementwise.cu"] = replace_once(files["elementwise.cu"], RELU_STORE,
                                           "        out[i] = (x > 0.0f ? x : 0.0f) + 0.0f * fabsf(a[i + 1]);\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_elementwise_kernel_no_write_past_n")
    bad = [c for c in results(report, "test_elementwise_kernel_no_write_past_n") if "relu" in c["name"]]
    by_n = {c["name"].rsplit("-", 1)[-1].rstrip("]"): c for c in bad}
    for n in ("1", "31"):  # 4 and 124 bytes: the read lands in the alignment bytes, before the guard page
        assert by_n[n]["result"] in ("FAIL", "CRASH") and "out-of-bounds read" in by_n[n]["reason"], by_n[n]


@needs_emu
@pytest.mark.slow
def test_tiled_transpose_returning_before_the_barrier_is_rejected(tmp_path):
    """Threads past the last column return before __syncthreads() while the rest of their block waits
    there: undefined behaviour in CUDA (today's GPUs happen to run it). The emulator sees it at the barrier
    and the grader fails the test with the barrier named, whatever the values."""
    files = solution_sources()
    cu = files["transpose.cu"]
    start = cu.index("void transpose_tiled(")
    old = "    int col = blockIdx.x * TILE + threadIdx.x;\n"
    files["transpose.cu"] = cu[:start] + cu[start:].replace(
        old, old + "    if (col >= cols) return;  // no column to load\n", 1)
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_transpose_values and transpose_tiled and 31")
    ragged = [c for c in results(report, "test_transpose_values") if c["result"] != "PASS"]
    assert ragged and all(c["result"] in ("FAIL", "CRASH") for c in ragged), report["checks"]
    assert all(re.search(r"barrier divergence|returned before a __syncthreads", c["reason"]) for c in ragged), ragged
