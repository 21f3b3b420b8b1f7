"""Known-bad Phase 4 learner code must be rejected, each for the right reason (`grader check phase4`).

Every fixture is the reference solution of Phase 4 (with Phase 1's files, which its launcher uses) with
one deliberate mistake, graded from a prepared workspace on the emulator: only the tests that matter
run. The last one needs a GPU: a correct launcher that only has the atomic kernel must fail the
bandwidth threshold. The deliverable's checks grade a saved model against a sales.tsv in a temporary
data directory (never the repository's).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.grader.test_grader_fixtures import HOST_COPY, _emu_available, grade_workspace, replace_once, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase4_reductions.ipynb"
PHASE1 = REPO / "solutions" / "phase1_memory.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase4_reductions.ipynb not written yet"),
    pytest.mark.timeout(300),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

TREE_STEP = """        if (tid < s) {
            cache[tid] += cache[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {"""
SHARED_STORE = "    cache[tid] = thread_sum(x, n);\n    __syncthreads();\n    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
TWO_PASS_VARIANCE = """    float mu = sum_over_rows(s, cache) / (last - first);
    float squares = 0.0f;
    if (active) {
        for (int r = first + threadIdx.y; r < last; r += blockDim.y) {
            float d = x[(long long)r * cols + c] - mu;
            squares += d * d;
        }
    }
    float m2 = sum_over_rows(squares, cache);
    if (active && threadIdx.y == 0) {
        chunk_mean[slot] = mu;
        chunk_m2[slot] = m2;
    }"""
# E[x^2] - E[x]^2, one pass over each chunk, in float32: the textbook formula (the merge of the chunks is left as
# it is: each chunk's m2 is already wrong).
NAIVE_VARIANCE = """    float sq = 0.0f;
    if (active) {
        for (int r = first + threadIdx.y; r < last; r += blockDim.y) {
            float v = x[(long long)r * cols + c];
            sq += v * v;
        }
    }
    float mu = sum_over_rows(s, cache) / (last - first);
    float ex2 = sum_over_rows(sq, cache) / (last - first);
    if (active && threadIdx.y == 0) {
        chunk_mean[slot] = mu;
        chunk_m2[slot] = (ex2 - mu * mu) * (last - first);
    }"""


def solution_sources() -> dict[str, str]:
    """reduce.cu and reduce.py from the solution notebook, with Phase 1's memory.cu / memory.py."""
    from grader.labs import learner_files

    return {**learner_files(PHASE1), **learner_files(SOLUTION)}


def grade(tmp_path: Path, files: dict[str, str], *args: str, timeout: float = 60, device: str = "emu",
          env_extra: dict[str, str] | None = None, expect_pass: bool = False) -> dict:
    """`grader check phase4` on a workspace holding `files`; it must reject it (exit 1) unless expect_pass."""
    return grade_workspace(tmp_path, "phase4", files, *args, timeout=timeout, device=device, env_extra=env_extra,
                           expect_pass=expect_pass)


def checks_named(report: dict, prefix: str) -> list[dict]:
    return results(report, prefix)


@needs_emu
@pytest.mark.slow
def test_tree_without_barrier_is_a_race_and_a_wrong_sum(tmp_path):
    files = solution_sources()
    files["reduce.cu"] = replace_once(files["reduce.cu"], TREE_STEP,
                                      TREE_STEP.replace("        __syncthreads();\n    }\n", "    }\n", 1))
    report = grade(tmp_path, files, "--no-notebook", "-k",
                   "test_sum_has_no_shared_memory_race or test_sum_every_element_once")
    [race] = [c for c in checks_named(report, "test_sum_has_no_shared_memory_race") if c["name"].endswith("[shared]")]
    assert race["result"] in ("FAIL", "CRASH") and "shared-memory race" in race["reason"], race
    assert "__syncthreads() is missing" in race["reason"] and "reduce.cu:" in race["reason"], race
    wrong = [c for c in checks_named(report, "test_sum_every_element_once") if "-shared]" in c["name"]]
    assert any(c["result"] == "FAIL" and "got" in c["reason"] for c in wrong), wrong
    # the warp variant has its own (correct) tree: still right
    assert all(c["result"] == "PASS" for c in checks_named(report, "test_sum_every_element_once")
               if "-warp]" in c["name"])


@needs_emu
@pytest.mark.slow
def test_tail_threads_not_storing_zero_leave_nan_in_the_sum(tmp_path):
    files = solution_sources()
    files["reduce.cu"] = replace_once(
        files["reduce.cu"], SHARED_STORE,
        "    if ((long long)blockIdx.x * blockDim.x + tid < n) {  // threads past the end store nothing\n"
        "        cache[tid] = thread_sum(x, n);\n    }\n" + SHARED_STORE.split("\n", 1)[1])
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_every_element_once and shared")
    small = {c["name"]: c for c in checks_named(report, "test_sum_every_element_once")}
    # n = 7: one block of 256 threads, 249 of them with no element: their slots stay NaN (the emulator's poison)
    failing = [c for name, c in small.items() if "-7]" in name or "[7-" in name]
    assert failing and failing[0]["result"] == "FAIL", small
    assert "got NaN" in failing[0]["reason"] and "shared memory nobody initialised" in failing[0]["reason"], failing


@needs_emu
@pytest.mark.slow
def test_naive_variance_formula_fails_the_stability_test(tmp_path):
    files = solution_sources()
    files["reduce.cu"] = replace_once(files["reduce.cu"], TWO_PASS_VARIANCE, NAIVE_VARIANCE)
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_column_variance or test_column_mean_var_values")
    for check in checks_named(report, "test_column_variance_is_stable_with_a_large_mean"):
        assert check["result"] == "FAIL", check
        assert "var" in check["reason"] and ("negative" in check["reason"] or "differ" in check["reason"]), check
    assert checks_named(report, "test_column_variance_of_constant_columns")[0]["result"] == "FAIL"
    # ordinary data (mean and spread of one size) still passes: the formula is right on paper
    assert any(c["result"] == "PASS" for c in checks_named(report, "test_column_mean_var_values"))


@needs_emu
@pytest.mark.slow
def test_max_starting_at_zero_fails_on_negative_data(tmp_path):
    files = solution_sources()
    files["reduce.cu"] = replace_once(files["reduce.cu"], "    float v = minus_inf;\n", "    float v = 0.0f;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_max_all_negative")
    for check in checks_named(report, "test_max_all_negative"):
        assert check["result"] == "FAIL" and "starting value 0 instead of -infinity" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_one_pass_launcher_is_rejected_as_not_two_pass(tmp_path):
    files = solution_sources()
    files["reduce.py"] = replace_once(files["reduce.py"], "    if blocks == 1:\n", "    if True:  # always one block\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_is_two_pass")
    for check in checks_named(report, "test_sum_is_two_pass"):
        assert check["result"] == "FAIL" and "expected two passes" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_sum_computed_with_numpy_is_rejected(tmp_path):
    files = solution_sources()
    files["reduce.py"] = replace_once(
        files["reduce.py"], '    _two_pass(SUM_KERNELS[variant], x, out, zero_first=variant == "atomic")\n',
        "    out.set(np.array([backend.asnumpy(x).sum()], dtype=np.float32))  # NumPy, not the kernel\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_every_element_once")
    for check in checks_named(report, "test_sum_every_element_once"):
        assert check["result"] == "FAIL" and "no launch of `sum_" in check["reason"], check


# ---------------------------------------------------------------- the deliverable


@pytest.fixture(scope="module")
def sales_dir(tmp_path_factory) -> Path:
    """A data directory with the generated sales.tsv (the repository's data/ is never touched)."""
    folder = tmp_path_factory.mktemp("sales-data")
    subprocess.run([sys.executable, str(REPO / "data" / "make_sales.py"), "--out", str(folder / "sales.tsv")],
                   check=True, capture_output=True, timeout=120)
    return folder


def _saved_model(workspace: Path, sales: Path, *, perfect: bool) -> None:
    """A model file as the lab writes it: `perfect` computes log total = log quantity + log unit price
    exactly (a Linear layer can, a ReLU passes positive values); otherwise it always predicts one price."""
    from minitorch.data import load_sales, sales_features, sha256_file
    from minitorch.nn import save_deliverable

    features, _, names = sales_features(load_sales(sales / "sales.tsv"))
    n = len(names)
    mean, std = np.zeros(n), np.ones(n)
    w1, b1 = np.zeros((n, 2)), np.array([50.0, 0.0])  # hidden 0 = 50 + log q + log p > 0: ReLU passes it
    if perfect:
        w1[names.index("quantity"), 0] = w1[names.index("unit_price"), 0] = 1.0
    w2, b2 = np.array([[1.0], [0.0]]), np.array([-50.0 if perfect else -47.0])
    record = {"format": 1, "features": names, "log_features": ["quantity", "unit_price"], "log_target": True,
              "feature_mean": mean.tolist(), "feature_std": std.tolist(), "target_mean": 0.0, "target_std": 1.0,
              "sales_sha256": sha256_file(sales / "sales.tsv")}
    save_deliverable(workspace, "sales_model.json", record, {"sales_model.npz": {
        "hidden.weight": w1, "hidden.bias": b1, "out.weight": w2, "out.bias": b2}})
    assert features.shape[1] == n


def _deliverable(report: dict) -> dict:
    [check] = checks_named(report, "test_sales_model_beats_the_mean_predictor")
    return check


@pytest.mark.slow
def test_deliverable_without_a_saved_model_names_the_lab_section(tmp_path, sales_dir):
    report = grade(tmp_path, solution_sources(), "--no-notebook", "-k", "test_sales_model",
                   env_extra={"MINITORCH_DATA_DIR": str(sales_dir)})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "no saved sales model" in check["reason"], check
    assert "The deliverable: predicting sales" in check["reason"] and "sales_model.npz" in check["reason"], check


@pytest.mark.slow
def test_deliverable_is_evaluated_not_trusted(tmp_path, sales_dir):
    """A model that always predicts one price is rejected, whatever its record claims; an exact one passes."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace, sales_dir, perfect=False)
    record = json.loads((workspace / "sales_model.json").read_text())
    record["test_mae"] = 0.001  # a printed number the grader must not believe
    (workspace / "sales_model.json").write_text(json.dumps(record))
    report = grade(tmp_path, solution_sources(), "--no-notebook", "-k", "test_sales_model",
                   env_extra={"MINITORCH_DATA_DIR": str(sales_dir)})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "x the mean predictor's" in check["reason"], check

    _saved_model(workspace, sales_dir, perfect=True)
    report = grade(tmp_path, solution_sources(), "--no-notebook", "-k", "test_sales_model",
                   env_extra={"MINITORCH_DATA_DIR": str(sales_dir)}, expect_pass=False)
    assert _deliverable(report)["result"] == "PASS", _deliverable(report)  # (the phase fails: -k ran a part)


@pytest.mark.slow
def test_deliverable_trained_on_another_file_is_rejected(tmp_path, sales_dir):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace, sales_dir, perfect=True)
    record = json.loads((workspace / "sales_model.json").read_text())
    record["sales_sha256"] = "0" * 64
    (workspace / "sales_model.json").write_text(json.dumps(record))
    report = grade(tmp_path, solution_sources(), "--no-notebook", "-k", "test_sales_model",
                   env_extra={"MINITORCH_DATA_DIR": str(sales_dir)})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "trained on another sales.tsv" in check["reason"], check


def test_deliverable_is_locked_until_phase3b_passes(tmp_path, monkeypatch):
    import json

    import grader

    monkeypatch.delenv("GRADER_SKIP_GATES", raising=False)
    progress_path = tmp_path / "progress.json"
    passed = {"when": "2026-11-21T00:00:00+00:00", "device": "emu", "workspace": str(tmp_path), "files": {},
              "passed": True}
    progress_path.write_text(json.dumps({"phases": {p: {"last_pass": passed} for p in ("phase1", "phase2", "phase3a")}}))
    with pytest.raises(grader.PhaseLocked, match=r"sales\.tsv regression deliverable is locked: Phase 3b .* "
                                                 r"has not passed yet .*Run `grader check phase3b`"):
        grader.require("sales", progress_path=progress_path)


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_atomic_only_launcher_fails_the_bandwidth_threshold(tmp_path):
    """Correct but slow: every element an atomicAdd (sum_atomic launched for the warp variant)."""
    files = solution_sources()
    files["reduce.py"] = replace_once(
        files["reduce.py"], '    _two_pass(SUM_KERNELS[variant], x, out, zero_first=variant == "atomic")\n',
        '    _two_pass("sum_atomic", x, out, zero_first=True)  # atomics only, whatever the variant\n')
    report = grade(tmp_path, files, "--no-notebook", "--require-perf", "-k", "test_perf_sum_against_copy_bandwidth",
                   device="cuda")
    [check] = checks_named(report, "test_perf_sum_against_copy_bandwidth")
    assert check["result"] == "FAIL" and "at least 0.70x is needed" in check["reason"], check


def test_sum_overwritten_from_the_host_after_the_launch_is_rejected(tmp_path):
    """One launch over one element (the launch count is satisfied), then NumPy's sum is copied into out."""
    files = solution_sources()
    files["reduce.py"] = replace_once(
        files["reduce.py"], '    _two_pass(SUM_KERNELS[variant], x, out, zero_first=variant == "atomic")\n',
        '    load_kernel("reduce.cu", SUM_KERNELS[variant])((1,), (THREADS,), (x, out, np.int64(min(x.size, 1))))\n'
        '    out.set(np.array([backend.asnumpy(x).astype(np.float64).sum()], np.float32))  # from the host\n')
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels")
    sums = [c for c in checks_named(report, "test_results_come_from_your_kernels") if "[sum-" in c["name"]]
    assert len(sums) == 3 and all(c["result"] == "FAIL" for c in sums), sums
    assert all(HOST_COPY in c["reason"] for c in sums), sums


def test_early_return_before_a_barrier_is_rejected_on_the_emulator(tmp_path):
    """Idle threads leave the tree with `return` while the others still reach __syncthreads(): the values
    are right (and a current GPU runs it), but it is undefined behaviour, and Lab 4 forbids it."""
    files = solution_sources()
    files["reduce.cu"] = replace_once(
        files["reduce.cu"],
        "    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "        if (tid < s) {\n"
        "            cache[tid] += cache[tid + s];\n"
        "        }\n"
        "        __syncthreads();\n"
        "    }\n",
        "    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "        if (tid >= s) return;  // idle threads leave early\n"
        "        cache[tid] += cache[tid + s];\n"
        "        __syncthreads();\n"
        "    }\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_kernel_any_grid_and_block")
    shared = [c for c in checks_named(report, "test_sum_kernel_any_grid_and_block") if "shared" in c["name"]]
    assert shared and all(c["result"] in ("FAIL", "CRASH") for c in shared), shared
    # Whether the emulator sees a divergence (a thread gone while others wait) or an early return (a warning
    # the grader turns into a failure), the report names barriers and the advice is never to return early.
    assert all(re.search(r"barrier divergence|returned before a __syncthreads", c["reason"]) for c in shared), shared
    assert all(re.search(r"never return early|keep every thread alive", c["hint"]) for c in shared), shared


def test_idle_threads_returning_at_the_start_are_rejected_on_the_emulator(tmp_path):
    """Threads with no element return before the first __syncthreads() that the others reach: the emulator
    warns (today's GPUs run it), and the grader turns that warning into a failure naming the line."""
    files = solution_sources()
    cu = files["reduce.cu"]
    start = cu.index("void sum_shared(")  # its first lines (sum_warp has the same two)
    old = "    cache[tid] = thread_sum(x, n);\n    __syncthreads();\n"
    new = "    if ((long long)blockIdx.x * blockDim.x + tid >= n) return;  // no element: nothing to add\n" + old
    files["reduce.cu"] = cu[:start] + cu[start:].replace(old, new, 1)
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_every_element_once")
    shared = [c for c in checks_named(report, "test_sum_every_element_once")
              if "shared" in c["name"] and c["result"] != "PASS"]
    assert shared, checks_named(report, "test_sum_every_element_once")
    assert all(c["result"] in ("FAIL", "CRASH") for c in shared), shared
    assert all(re.search(r"barrier divergence|returned before", c["reason"]) for c in shared), shared


@needs_emu
def test_one_thread_per_element_sum_is_rejected_by_the_small_grid(tmp_path):
    """thread_sum adding one element a thread (a bounds check, no grid-stride loop): every sum the launcher
    makes below its 16,384-block cap is right; a kernel launched with a 3 x 64 grid misses elements."""
    files = solution_sources()
    cu = files["reduce.cu"]
    start = cu.index("float thread_sum(")
    old = "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    assert cu[start:].count(old) >= 1, "fixture out of date with the solution"
    # a stride of n: the unrolled loop never runs and the tail adds x[i] once, for i < n only
    files["reduce.cu"] = cu[:start] + cu[start:].replace(old, "    long long stride = n;  // one element a thread\n", 1)
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_kernel_any_grid_and_block")
    checks = checks_named(report, "test_sum_kernel_any_grid_and_block")
    bad = [c for c in checks if c["result"] != "PASS"]
    assert bad and all(c["result"] == "FAIL" for c in bad), checks
    assert all("grid-stride loop" in c["hint"] for c in bad), bad


@needs_emu
def test_a_read_one_element_past_the_end_is_caught_by_the_bounds_test(tmp_path):
    """thread_sum's tail loop runs to i <= n: it reads x[n]. For n = 7 (28 bytes) that byte lies in the
    alignment gap before the guard page, which the emulator's default mode does not watch; the bounds test
    runs its check mode, which names the out-of-bounds read."""
    files = solution_sources()
    files["reduce.cu"] = replace_once(files["reduce.cu"], "    for (; i < n; i += stride) {\n        a += x[i];\n",
                                      "    for (; i <= n; i += stride) {\n        a += x[i];\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_sum_kernel_no_read_past_end")
    checks = checks_named(report, "test_sum_kernel_no_read_past_end")
    trees = [c for c in checks if "shared" in c["name"] or "warp" in c["name"]]
    assert len(trees) == 4 and all(c["result"] in ("FAIL", "CRASH") for c in trees), checks
    assert all("out-of-bounds" in c["reason"] for c in trees), trees
    assert all(c["result"] == "PASS" for c in checks if "atomic" in c["name"]), checks  # no thread_sum there
