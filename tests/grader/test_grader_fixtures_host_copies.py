"""Known-bad launchers that run their kernels and still hand back a result made on the host, one or more per phase,
each written another way: a NumPy result written with `.set()` over the kernel's (equal to it to float32, so no
comparison of values tells them apart), the host's mean of a kernel's per-row losses, a host value passed to a kernel
of the learner's own as an argument, a host result copied in with `asarray` and moved by a kernel, `copy_into` of a
host array, a softmax masked on the host. `grader check <phase> --no-notebook` (the README's Colab route, without
the notebook's captured training step) must reject each, in the graded test of that launcher, by the copy between
host and device it makes (the launcher's call is captured into a graph, which refuses one).

Also here: diagnostics that follow the evidence, not the test's name (a sum whose second stage reads shared slots
no warp wrote: the emulator's check mode says so; a softmax masked after it was taken: the output says so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader import (
    test_grader_fixtures_phase2 as phase2,
)
from tests.grader import (
    test_grader_fixtures_phase3 as phase3,
)
from tests.grader import (
    test_grader_fixtures_phase4 as phase4,
)
from tests.grader import (
    test_grader_fixtures_phase5 as phase5,
)
from tests.grader import (
    test_grader_fixtures_phase6 as phase6,
)
from tests.grader import (
    test_grader_fixtures_phase7 as phase7,
)
from tests.grader.test_grader_fixtures import HOST_COPY, _emu_available, grade_workspace, replace_once, results

pytestmark = [
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]


def rejected_for_the_copy(checks: list[dict]) -> None:
    assert checks and all(c["result"] == "FAIL" and HOST_COPY in c["reason"] for c in checks), [
        (c["name"], c["result"], c["reason"][:300]) for c in checks]
    assert all("device" in c["hint"] or "host" in c["hint"] for c in checks), checks


def test_phase4_sum_overwritten_with_numpys_sum(tmp_path: Path) -> None:
    """The whole two-pass sum runs, then NumPy's sum (float64, rounded to float32: within 1e-5 of the kernel's)
    is written over it with .set()."""
    files = phase4.solution_sources()
    two_pass = '    _two_pass(SUM_KERNELS[variant], x, out, zero_first=variant == "atomic")\n'
    files["reduce.py"] = replace_once(files["reduce.py"], two_pass, two_pass +
                                      "    out.set(np.array([backend.asnumpy(x).astype(np.float64).sum()], np.float32))\n")
    report = phase4.grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels and sum")
    sums = [c for c in results(report, "test_results_come_from_your_kernels") if "[sum-" in c["name"]]
    assert len(sums) == 3, sums
    rejected_for_the_copy(sums)


def test_phase6_cross_entropy_overwritten_with_the_hosts_mean(tmp_path: Path) -> None:
    """Both kernels run; then the mean of the per-row losses is taken by NumPy and written over the loss."""
    files = phase6.solution_sources()
    mean = 'cross_entropy_mean")(\n        (1,), (MEAN_THREADS,), (row_loss, loss, np.int32(rows)))\n'
    files["softmax.py"] = replace_once(files["softmax.py"], mean, mean +
                                       "    loss.set(np.array([backend.asnumpy(row_loss).mean()], np.float32))\n")
    report = phase6.grade(tmp_path, files, "-k", "test_results_come_from_your_kernels and cross_entropy")
    rejected_for_the_copy([c for c in results(report, "test_results_come_from_your_kernels")
                           if c["name"].endswith("[cross_entropy]")])


def test_phase2_matmul_copied_in_by_the_learners_own_kernel(tmp_path: Path) -> None:
    """The matmul kernel runs; NumPy's product is copied to the device with asarray and moved into out by the
    learner's scalar_mul kernel (times 1)."""
    files = phase2.solution_sources()
    launch = "    kernel(grid, (BLOCK, BLOCK), (a, b, out, np.int32(M), np.int32(N), np.int32(K)))\n"
    files["matmul.py"] = replace_once(
        files["matmul.py"], launch, launch +
        "    from minitorch import backend\n"
        "    product = backend.asarray(backend.asnumpy(a) @ backend.asnumpy(b))\n"
        '    load_kernel("elementwise.cu", "scalar_mul")((64,), (256,), (product, np.float32(1), out, '
        "np.int64(out.size)))\n")
    report = phase2.grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels and matmul")
    rejected_for_the_copy(results(report, "test_results_come_from_your_kernels"))


def test_phase3b_mse_loss_from_the_host_passed_to_a_fill_kernel(tmp_path: Path) -> None:
    """The mse_loss kernel runs; then the loss is computed on the host and written by the learner's own fill
    kernel (Phase 1), as an argument: replaying the launches writes the same frozen value again."""
    files = phase3.solution_sources()
    launch = "    kernel((blocks_for(pred.size, LOSS_BLOCKS),), (THREADS,), (pred, target, loss, np.int64(pred.size)))\n"
    files["backward.py"] = replace_once(
        files["backward.py"], launch, launch +
        "    d = pred.get().astype(np.float64) - target.get()\n"
        '    load_kernel("memory.cu", "fill")((1,), (32,), (loss, np.float32((d * d).mean()), np.int64(1)))\n')
    report = phase3.grade(tmp_path, "phase3b", files, "test_results_come_from_your_kernels and mse_loss")
    rejected_for_the_copy(results(report, "test_results_come_from_your_kernels"))


def test_phase5_gemm_result_copied_over_with_copy_into(tmp_path: Path) -> None:
    """The GEMM runs; then NumPy's product, rounded to float32, is put over it with the backend's copy_into."""
    files = phase5.solution_sources()
    files["gemm.py"] = replace_once(
        files["gemm.py"], phase5.LAUNCH, phase5.LAUNCH +
        "    a_h, b_h = backend.asnumpy(a), backend.asnumpy(b)\n"
        "    product = (a_h.T if transpose_a else a_h).astype(np.float64) @ (b_h.T if transpose_b else b_h)\n"
        "    backend.get_backend().copy_into(out, backend.asarray(product.astype(np.float32)))\n")
    report = phase5.grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels")
    rejected_for_the_copy(results(report, "test_results_come_from_your_kernels"))


SOFTMAX_CAUSAL_ARG = "(scores, probs, np.int64(rows), np.int32(cols), np.float32(scale),\n         np.int32(bool(causal))))\n"
SUM_SQUARES_SLOTS = "s = lane < blockDim.x / WARP ? warp_sums[lane] : 0.0f;"


def test_phase7_softmax_masked_on_the_host_and_a_sum_reading_unwritten_slots(tmp_path: Path) -> None:
    """- softmax_forward launched without the mask, the masked keys zeroed on the host and each row normalised
      again: refused for the copy, in the test of large scores too, which no longer says "subtract the row's
      maximum" (what its output shows when the kernel itself is wrong: tests/grader/test_grader_evidence.py);
    - sum_squares whose second stage reads 8 warp slots whatever the block: with 2 warps a block, 6 slots no warp
      wrote. The failure says what the emulator's check mode found, not "a grid-stride loop covers any n"."""
    files = phase7.solution_sources()
    files["attention.py"] = replace_once(
        files["attention.py"], SOFTMAX_CAUSAL_ARG,
        "(scores, probs, np.int64(rows), np.int32(cols), np.float32(scale), np.int32(0)))\n"
        "    if causal:  # the mask, on the host\n"
        "        p = probs.get()\n"
        "        t = p.shape[-1]\n"
        "        p = np.where(np.tril(np.ones((t, t), bool)), p, 0)\n"
        "        probs.set((p / p.sum(axis=-1, keepdims=True)).astype(np.float32))\n")
    files["clip.cu"] = replace_once(files["clip.cu"], SUM_SQUARES_SLOTS, "s = lane < 8 ? warp_sums[lane] : 0.0f;")
    report = phase7.grade(tmp_path, files, "-k", "test_softmax_large_scores or (test_results_come_from_your_kernels "
                                                 "and softmax_forward) or test_clip_kernels_any_grid")
    rejected_for_the_copy(results(report, "test_results_come_from_your_kernels"))
    [large] = results(report, "test_softmax_large_scores")  # its launcher call is captured too: the copy shows
    assert large["result"] == "FAIL" and HOST_COPY in large["reason"], large
    assert "subtract the row's maximum" not in large["reason"] + large["hint"], large
    checks = {c["name"].split("[")[1].rstrip("]"): c for c in results(report, "test_clip_kernels_any_grid")}
    assert checks["scale_by"]["result"] == "PASS", checks
    slots = checks["sum_squares"]
    assert slots["result"] == "FAIL" and "emulator's check mode" in slots["reason"], slots
    assert "uninitialised shared memory" in slots["reason"] and "clip.cu:" in slots["reason"], slots
    assert "grid-stride" not in slots["reason"] and "blockDim.x / 32" in slots["hint"], slots


@pytest.mark.gpu
def test_on_a_gpu_a_sum_overwritten_from_the_host_is_refused_and_a_wrong_sum_explained(tmp_path: Path) -> None:
    """The same refusals from CUDA itself: a capturing stream cannot be read back or synchronised. And a wrong
    value on the GPU is explained by the emulator's check mode, run in a subprocess on copies of the arrays."""
    files = phase4.solution_sources()
    two_pass = '    _two_pass(SUM_KERNELS[variant], x, out, zero_first=variant == "atomic")\n'
    files["reduce.py"] = replace_once(files["reduce.py"], two_pass, two_pass +
                                      "    out.set(np.array([backend.asnumpy(x).astype(np.float64).sum()], np.float32))\n")
    report = phase4.grade(tmp_path, files, "--no-notebook", "-k", "test_results_come_from_your_kernels and sum",
                          device="cuda")
    rejected_for_the_copy([c for c in results(report, "test_results_come_from_your_kernels") if "[sum-" in c["name"]])
    files = phase7.solution_sources()
    files["clip.cu"] = replace_once(files["clip.cu"], SUM_SQUARES_SLOTS, "s = lane < 8 ? warp_sums[lane] : 0.0f;")
    (tmp_path / "slots").mkdir()
    report = grade_workspace(tmp_path / "slots", "phase7", files, "--no-notebook", "-k",
                             "test_clip_kernels_any_grid and sum_squares", timeout=120, device="cuda")
    [slots] = results(report, "test_clip_kernels_any_grid")
    if slots["result"] == "FAIL":  # a GPU's shared memory may happen to hold zeros in the slots no warp wrote
        assert "emulator's check mode" in slots["reason"] and "uninitialised shared memory" in slots["reason"], slots
