"""The known-bad fixtures on a real GPU (`make test-gpu`): the same mistakes, as CUDA reports them.

On a GPU a write just past a buffer usually lands in the memory pool's rounding and does not fault,
so the graded tests poison padding and look for it; a write far away is an illegal address that
poisons the CUDA context, which the grader must survive and attribute to the kernel.
"""

from __future__ import annotations

import json

import pytest

from tests.grader.test_grader_fixtures import (
    COPY_LOOP,
    FILL_LOOP,
    SOLUTION,
    grade,
    replace_once,
    results,
    solution_sources,
)

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def test_empty_kernel(tmp_path):
    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, "        ;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes", device="cuda")
    for check in results(report, "test_fill_odd_sizes"):
        assert check["result"] == "FAIL" and "first bad index 0" in check["reason"], check


def test_missing_bounds_check_is_caught_by_the_poisoned_padding(tmp_path):
    files = solution_sources()
    cu = files["memory.cu"]
    start, end = cu.index('extern "C" __global__ void fill'), cu.index('extern "C" __global__ void copy')
    files["memory.cu"] = cu[:start] + (
        'extern "C" __global__ void fill(float* out, float value, long long n) {\n'
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    out[i] = value;\n"
        "}\n\n") + cu[end:]
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_kernel_no_write_past_n", device="cuda")
    checks = results(report, "test_fill_kernel_no_write_past_n")
    assert all(c["result"] in ("FAIL", "CRASH") for c in checks), checks
    assert any("wrote past the end" in c["reason"] for c in checks), checks


def test_numpy_instead_of_the_kernel(tmp_path):
    files = solution_sources()
    files["memory.py"] = replace_once(
        files["memory.py"],
        '    kernel((blocks_for(n),), (THREADS,), (out, np.float32(value), np.int64(n)))\n',
        '    out.set(np.full(out.shape, value, dtype=np.float32))\n')
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes", device="cuda")
    for check in results(report, "test_fill_odd_sizes"):
        assert "no launch of `fill` from memory.cu was recorded" in check["reason"], check


def test_low_precision(tmp_path):
    files = solution_sources()
    cu = replace_once(files["memory.cu"], COPY_LOOP, "        dst[i] = __half2float(__float2half(src[i]));\n")
    files["memory.cu"] = "#include <cuda_fp16.h>\n" + cu
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_copy_values", device="cuda")
    assert any("max rel error" in c["reason"] for c in results(report, "test_copy_values") if c["result"] == "FAIL")


def test_hanging_kernel_is_killed_and_named(tmp_path):
    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, "        while (true) { }\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_kernel_small_grid_covers_all",
                   timeout=8, device="cuda")
    [check] = results(report, "test_fill_kernel_small_grid_covers_all")
    assert check["result"] == "TIMEOUT" and "`fill` from memory.cu" in check["reason"], check


def test_illegal_address_is_a_crash_naming_the_kernel(tmp_path):
    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, "        out[i + (1LL << 36)] = value;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes or test_copy_values", device="cuda")
    crashes = [c for c in results(report, "test_fill_odd_sizes") if c["result"] == "CRASH"]
    assert crashes, results(report, "test_fill_odd_sizes")
    for check in crashes:
        assert "kernel `fill` from memory.cu" in check["reason"], check
        assert "illegal" in check["reason"].lower() or "address" in check["reason"].lower(), check
    # the context is poisoned after the crash; the copy tests still run, in a fresh process, and pass
    assert all(c["result"] == "PASS" for c in results(report, "test_copy_values")), results(report, "test_copy_values")


def test_compile_error_names_file_and_line(tmp_path):
    nb = json.loads(SOLUTION.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if src.startswith("%%kernel memory.cu"):
            cell["source"] = replace_once(src, FILL_LOOP, "        out[i] = value\n")
            bad_line = cell["source"].split("\n")[1:].index("        out[i] = value") + 1
    notebook = tmp_path / "phase1_memory.ipynb"
    notebook.write_text(json.dumps(nb))
    report = grade(tmp_path, {}, "--notebook", str(notebook), "-k", "test_fill_odd_sizes", device="cuda")
    for check in results(report, "test_fill_odd_sizes"):
        assert f"memory.cu({bad_line + 1})" in check["reason"] or f"memory.cu({bad_line})" in check["reason"] \
            or f"memory.cu:{bad_line}" in check["reason"], check["reason"]


def test_too_few_blocks_fails_the_bandwidth_threshold(tmp_path):
    """Correct but slow: 8 blocks of 256 threads leave most of the GPU's multiprocessors idle."""
    files = solution_sources()
    files["memory.py"] = replace_once(files["memory.py"], "    return max(1, min((n + THREADS - 1) // THREADS, MAX_BLOCKS))\n",
                                      "    return 8\n")
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k",
                   "test_perf_fill_bandwidth or test_perf_copy_bandwidth or test_fill_odd_sizes", device="cuda")
    assert all(c["result"] == "PASS" for c in results(report, "test_fill_odd_sizes"))  # still correct
    for name in ("test_perf_fill_bandwidth", "test_perf_copy_bandwidth"):
        [check] = results(report, name)
        assert check["result"] == "FAIL" and "at least 0.70x is needed" in check["reason"], check


def test_32_bit_indices_fail_past_2_to_the_31_elements(tmp_path):
    """int indices: right at every size the other tests use, wrong (or an illegal address) past 2^31."""
    files = solution_sources()
    files["memory.cu"] = files["memory.cu"].replace("long long stride", "int stride").replace(
        "for (long long i = (long long)blockIdx.x", "for (int i = blockIdx.x")
    assert "for (int i = blockIdx.x" in files["memory.cu"]
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_past_2_to_the_31 or test_fill_odd_sizes",
                   device="cuda", timeout=120)
    assert all(c["result"] == "PASS" for c in results(report, "test_fill_odd_sizes"))
    [check] = results(report, "test_fill_past_2_to_the_31_elements")
    if check["result"] == "SKIP":
        pytest.skip(check["reason"])
    assert check["result"] in ("FAIL", "CRASH"), check
    assert "64-bit" in check["hint"] or "illegal" in check["reason"].lower() or "differ" in check["reason"], check


def test_a_stride_of_one_block_fails_the_bandwidth_threshold(tmp_path):
    """i += blockDim.x: every block redoes the whole array. Right values, and 16,384 times the work."""
    files = solution_sources()
    cu = files["memory.cu"]
    copy_at = cu.index('extern "C" __global__ void copy')  # fill's loop only
    files["memory.cu"] = replace_once(cu[:copy_at], "    long long stride = (long long)gridDim.x * blockDim.x;\n",
                                      "    long long stride = blockDim.x;\n") + cu[copy_at:]
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k", "test_fill_odd_sizes or test_perf_fill",
                   device="cuda", timeout=240)
    assert all(c["result"] == "PASS" for c in results(report, "test_fill_odd_sizes"))
    [check] = results(report, "test_perf_fill_bandwidth")
    assert check["result"] in ("FAIL", "TIMEOUT"), check


# A plain `+=` where threads of different blocks add into one element of device memory needs atomicAdd. The
# emulator does not interleave threads between barriers, so it loses no update (its check mode reports the race:
# test_grader_fixtures_phase7.py); a GPU loses them.
NON_ATOMIC_ADDS = {
    "embedding backward": (
        "embedding.cu", "            atomicAdd(&grad_weight[(long long)token * dim + d], grad_out[e]);\n",
        "            grad_weight[(long long)token * dim + d] += grad_out[e];  // not atomic\n",
        "test_embedding_backward_accumulates_repeated_ids", "embedding_backward"),
    "sum of squares": (
        "clip.cu", "            atomicAdd(total, s);\n", "            *total += s;  // not atomic\n",
        "test_clip_grad_norm_values", "the global norm is"),
}


@pytest.mark.parametrize("case", NON_ATOMIC_ADDS)
def test_a_plain_add_where_atomic_add_is_needed_fails_on_a_gpu(tmp_path, case):
    from tests.grader.test_grader_fixtures import grade_workspace
    from tests.grader.test_grader_fixtures_phase7 import solution_sources as phase7_sources

    name, old, new, test, reason = NON_ATOMIC_ADDS[case]
    files = phase7_sources()
    files[name] = replace_once(files[name], old, new)
    report = grade_workspace(tmp_path, "phase7", files, "--no-notebook", "-k", test, timeout=120, device="cuda")
    failed = [c for c in results(report, test) if c["result"] == "FAIL"]
    assert failed and all(reason in c["reason"] for c in failed), results(report, test)
