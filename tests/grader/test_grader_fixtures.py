"""Known-bad learner code must be rejected, each for the right reason (`grader check phase1 --device emu`).

Every fixture is the reference solution of Phase 1 with one deliberate mistake, graded from a
prepared workspace (fast: only the tests that matter run, with a short timeout). One fixture goes
through the whole pipeline: a lab notebook variant executed by nbval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader import checks

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase1_memory.ipynb"


def _emu_available() -> bool:
    try:
        from minitorch import emu  # noqa: F401
    except Exception:
        return False
    return hasattr(emu, "RawModule")


pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase1_memory.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]


def solution_sources() -> dict[str, str]:
    """{'memory.cu': ..., 'memory.py': ...} from the %%kernel / %%module cells of the solution."""
    from grader.labs import learner_files

    return learner_files(SOLUTION)


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"fixture out of date with the solution: {old!r} not found exactly once"
    return text.replace(old, new)


FILL_LOOP = "        out[i] = value;\n"
COPY_LOOP = "        dst[i] = src[i];\n"


def grade_workspace(tmp_path: Path, phase: str, files: dict[str, str], *args: str, timeout: float = 60,
                    device: str = "emu", env_extra: dict[str, str] | None = None, expect_pass: bool = False) -> dict:
    """`grader check <phase>` on a workspace holding `files`: it must reject them (exit 1) unless expect_pass.

    Gates are lifted (the previous phase's pass is not what a fixture tests); progress goes to tmp_path."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    for name, text in files.items():
        (workspace / name).write_text(text)
    cmd = [sys.executable, "-m", "grader", "check", phase, "--device", device, "--workspace", str(workspace),
           "--no-record", "--json", "--timeout", str(timeout), *args]
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "GRADER_PROGRESS": str(tmp_path / "progress.json"), "PYTHONPATH": pythonpath,
           "GRADER_SKIP_GATES": "1", **(env_extra or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=280)
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    expected = 0 if expect_pass else 1
    assert proc.returncode == expected and report is not None, \
        f"expected exit {expected}, got {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert report["passed"] is expect_pass
    return report


def grade(tmp_path: Path, files: dict[str, str], *args: str, timeout: float = 60, device: str = "emu") -> dict:
    return grade_workspace(tmp_path, "phase1", files, *args, timeout=timeout, device=device)


def results(report: dict, prefix: str) -> list[dict]:
    found = [c for c in report["checks"] if c["name"].startswith(prefix)]
    assert found, f"no check named {prefix}*: {[c['name'] for c in report['checks']]}"
    return found


# What the replay checks say of a launcher that copies between host and device around its launches.
HOST_COPY = "the launcher copied data between the host and the device during the call"
HOST_COPY_HINT = checks.HOST_COPY_HINT


def assert_kernel_never_ran(values: list[dict], replay: dict, kernel: str, source: str = "") -> None:
    """What a launcher that computes with NumPy or CuPy instead of launching `kernel` gets: every value check
    fails saying the kernel never ran, and the replay check finds no launch to replay."""
    said = f"no launch of `{kernel}`" + (f" from {source}" if source else "")
    assert values and all(c["result"] == "FAIL" and said in c["reason"] for c in values), values
    assert replay["result"] == "FAIL" and "no kernel launch was recorded" in replay["reason"], replay


def test_empty_kernel_values_mismatch_with_first_bad_index(tmp_path):
    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, "        ;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes")
    for check in results(report, "test_fill_odd_sizes"):
        assert check["result"] == "FAIL"
        assert "first bad index 0" in check["reason"] and "never written" in check["reason"], check["reason"]


def test_missing_bounds_check_is_reported_out_of_bounds(tmp_path):
    files = solution_sources()
    cu = files["memory.cu"]
    start = cu.index("extern \"C\" __global__ void fill")
    end = cu.index("extern \"C\" __global__ void copy")
    files["memory.cu"] = cu[:start] + (
        'extern "C" __global__ void fill(float* out, float value, long long n) {\n'
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    out[i] = value;  // no `if (i < n)`, no loop\n"
        "}\n\n") + cu[end:]
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_kernel_no_write_past_n or test_fill_odd_sizes")
    for check in results(report, "test_fill_kernel_no_write_past_n"):
        assert check["result"] in ("FAIL", "CRASH")
        assert "out-of-bounds" in check["reason"], check["reason"]
    # the launcher rounds the grid up: the emulator faults on the write past an n-element buffer
    assert any("out-of-bounds" in c["reason"] for c in results(report, "test_fill_odd_sizes"))


def test_result_computed_without_the_kernel_is_rejected(tmp_path):
    files = solution_sources()
    files["memory.py"] = replace_once(
        files["memory.py"],
        '    kernel((blocks_for(n),), (THREADS,), (out, np.float32(value), np.int64(n)))\n',
        '    out.set(np.full(out.shape, value, dtype=np.float32))  # NumPy, not the kernel\n')
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes or test_tensor_full")
    for check in results(report, "test_fill_odd_sizes"):
        assert check["result"] == "FAIL"
        assert "no launch of `fill` from memory.cu was recorded" in check["reason"], check["reason"]


def test_low_precision_copy_is_a_precision_failure(tmp_path):
    files = solution_sources()
    cu = replace_once(files["memory.cu"], COPY_LOOP, "        dst[i] = __half2float(__float2half(src[i]));\n")
    files["memory.cu"] = "#include <cuda_fp16.h>\n" + cu
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_copy_values")
    failing = [c for c in results(report, "test_copy_values") if c["result"] == "FAIL"]
    assert failing
    big = failing[-1]["reason"]
    assert "max rel error" in big and "precision loss" in big, big


def test_hanging_kernel_times_out_naming_test_and_kernel(tmp_path):
    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, "        while (true) { }\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_kernel_small_grid_covers_all",
                   timeout=4)
    [check] = results(report, "test_fill_kernel_small_grid_covers_all")
    assert check["result"] == "TIMEOUT"
    assert "test_fill_kernel_small_grid_covers_all did not finish within 4 s" in check["reason"]
    assert "`fill` from memory.cu" in check["reason"]


@pytest.mark.parametrize("offset, names", [
    ("n", r"argument #0 \(`out`\)"),  # a whole length past the end: the buffer is named
    ("(1LL << 24)", r"outside every device buffer|argument #0"),  # 64 MiB away: no buffer is there
])
def test_far_out_of_bounds_write_is_a_fault_naming_kernel_and_line(tmp_path, offset, names):
    import re

    files = solution_sources()
    files["memory.cu"] = replace_once(files["memory.cu"], FILL_LOOP, f"        out[i + {offset}] = value;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_odd_sizes")
    checks = results(report, "test_fill_odd_sizes")
    assert all(c["result"] in ("CRASH", "FAIL") for c in checks), checks  # a stray write may land in another buffer
    crashes = [c for c in checks if c["result"] == "CRASH"]
    assert crashes, checks
    for check in crashes:
        reason = check["reason"]
        assert "KernelFault" in reason and "kernel `fill` from memory.cu" in reason, reason
        assert re.search(names, reason), reason
        assert "an index past n?" in check["hint"]  # the out-of-bounds advice, not a barrier's
    assert any(re.search(r"\.cu:\d+", c["reason"]) for c in crashes), crashes  # the source line of the bad write


def test_compile_error_through_the_notebook_names_file_and_line(tmp_path):
    nb = json.loads(SOLUTION.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if src.startswith("%%kernel memory.cu"):
            cell["source"] = replace_once(src, FILL_LOOP, "        out[i] = value\n")  # missing ';'
            bad_line = cell["source"].split("\n")[1:].index("        out[i] = value") + 1
    notebook = tmp_path / "phase1_memory.ipynb"
    notebook.write_text(json.dumps(nb))
    before = notebook.read_bytes()
    report = grade(tmp_path, {}, "--notebook", str(notebook), "-k", "test_fill_odd_sizes")
    assert notebook.read_bytes() == before  # the grader never edits a learner's notebook
    cells = [c for c in report["checks"] if c["step"] == "notebook" and c["result"] == "FAIL"
             and not c["name"].startswith("lab notebook:")]  # the summary row says FAIL too
    assert cells and "KernelCompileError" in cells[0]["reason"]
    assert "Exercise 2" in cells[0]["name"]
    for check in results(report, "test_fill_odd_sizes"):
        assert check["result"] == "FAIL" and "did not compile" in check["reason"]
        assert f"memory.cu:{bad_line}" in check["reason"] or f"memory.cu({bad_line})" in check["reason"], check["reason"]


def test_untouched_lab_fails_pointing_at_the_todos(tmp_path):
    from grader import labs

    lab = tmp_path / "phase1_memory.ipynb"
    lab.write_text(labs.generate_lab(SOLUTION))
    report = grade(tmp_path, {}, "--notebook", str(lab), "-k", "test_fill_odd_sizes or test_copy_values")
    cells = {c["name"]: c for c in report["checks"] if c["step"] == "notebook" and c["result"] == "FAIL"}
    kernel_cell = next(c for name, c in cells.items() if "Exercise 2" in name)
    assert "MINITORCH_TODO" in kernel_cell["reason"] and "TODO" in kernel_cell["hint"]
    for check in results(report, "test_fill_odd_sizes"):
        assert check["result"] == "FAIL"
        assert "NotImplementedError" in check["reason"] or "has not been written yet" in check["reason"], check


def test_grade_all_writes_one_row_per_submission(tmp_path):
    import csv
    import shutil

    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)
    (subs / "bob").mkdir()
    shutil.copy(SOLUTION, subs / "alice" / "phase1_memory.ipynb")
    out = tmp_path / "grades.csv"
    env = {**os.environ, "GRADER_PROGRESS": str(tmp_path / "progress.json"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade-all", str(subs), "--phase", "phase1", "--csv", str(out),
                           "--device", "emu", "--timeout", "60"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    assert rows["alice"]["passed"] == "True", rows["alice"]
    assert rows["bob"]["passed"] == "False" and "no phase1_memory.ipynb" in rows["bob"]["failed_checks"]
    assert not (tmp_path / "progress.json").exists()  # instructors' runs record nothing


# ---------------------------------------------------------------- blind spots (issue 15, kinds 1 and 3)


def test_one_thread_per_element_fill_is_rejected_by_the_small_grid(tmp_path):
    """A bounds check and no loop: right whenever the launcher gives one thread per element, wrong once n
    outgrows the capped grid. The graded kernel launch with a 3 x 64 grid shows it on the emulator."""
    files = solution_sources()
    files["memory.cu"] = replace_once(
        files["memory.cu"],
        "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {\n"
        "        out[i] = value;\n",
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) {  // one element a thread, no loop\n"
        "        out[i] = value;\n")
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_fill_kernel_small_grid_covers_all")
    [check] = results(report, "test_fill_kernel_small_grid_covers_all")
    assert check["result"] == "FAIL", check
    assert "only 192 of" in check["reason"] and "grid-stride loop" in check["reason"], check["reason"]


def test_fill_launcher_overwriting_the_result_from_the_host_is_rejected(tmp_path):
    """The kernel is launched (the launch record is satisfied, the values are right), then NumPy's answer is
    copied in: replaying the recorded launches into a fresh output tells the two apart."""
    files = solution_sources()
    files["memory.py"] = replace_once(
        files["memory.py"],
        '    kernel((blocks_for(n),), (THREADS,), (out, np.float32(value), np.int64(n)))\n',
        '    kernel((1,), (THREADS,), (out, np.float32(value), np.int64(min(n, 1))))\n'
        '    out.set(np.full(out.shape, value, dtype=np.float32))  # from the host\n')
    report = grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels")
    fills = [c for c in results(report, "test_results_come_from_your_kernels") if "fill" in c["name"]]
    assert fills and all(c["result"] == "FAIL" for c in fills), fills
    assert all(HOST_COPY in c["reason"] for c in fills), fills
    assert all(c["hint"] == HOST_COPY_HINT for c in fills), fills  # the copy's own advice
