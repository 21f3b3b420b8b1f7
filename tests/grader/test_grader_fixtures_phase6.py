"""Known-bad Phase 6 learner code must be rejected, each for the right reason.

Every fixture is the reference solution (with the earlier phases' files, which the framework uses) with one
deliberate mistake, graded from a prepared workspace on the emulator: only the tests that matter run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import (
    _emu_available,
    assert_kernel_never_ran,
    grade_workspace,
    replace_once,
    results,
)

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase6_cnn.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase6_cnn.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and Phase 6's."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase6":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str) -> dict:
    return grade_workspace(tmp_path, "phase6", files, "--no-notebook", *args, timeout=120)


# ---------------------------------------------------------------- softmax.cu / softmax.py


def test_softmax_without_the_max_subtracted_fails_on_large_logits(tmp_path):
    """exp(x) / sum(exp(x)): right for ordinary logits, inf / inf = NaN for logits of ±1e4."""
    files = solution_sources()
    files["softmax.cu"] = replace_once(files["softmax.cu"], "    m = row_reduce(m, true, scratch);\n",
                                       "    m = 0.0f;  // no maximum subtracted\n")
    report = grade(tmp_path, files, "-k", "test_forward_values and 7-10 or stable_for_large_logits")
    assert all(c["result"] == "PASS" for c in results(report, "test_forward_values")), report["checks"]
    for check in results(report, "test_forward_stable_for_large_logits") + results(
            report, "test_cross_entropy_stable_for_large_logits"):
        assert check["result"] == "FAIL", check
        assert "not finite" in check["reason"] and "Subtract the row's maximum" in check["reason"], check


def test_cross_entropy_means_over_the_wrong_axis_are_named(tmp_path):
    """Two mistakes in one workspace (each test sees one): the backward's scale divided by the number of classes
    instead of the batch size (softmax.py), and the mean kernel writing the sum of the rows' losses (softmax.cu)."""
    files = solution_sources()
    files["softmax.py"] = replace_once(files["softmax.py"], "np.float32(grad_loss / rows) if rows",
                                       "np.float32(grad_loss / cols) if rows")
    files["softmax.cu"] = replace_once(files["softmax.cu"], "        loss[0] = s / rows;\n", "        loss[0] = s;\n")
    report = grade(tmp_path, files, "-k", "test_cross_entropy_backward_values or test_cross_entropy_values or "
                   "test_functional_cross_entropy")
    backward = {c["name"]: c for c in results(report, "test_cross_entropy_backward_values")}
    square = [c for name, c in backward.items() if "[1-1-" in name]
    assert square and all(c["result"] == "PASS" for c in square), backward  # rows == cols: no difference
    wrong = [c for name, c in backward.items() if "[7-10-" in name or "[64-10-" in name]
    assert wrong and all(c["result"] == "FAIL" for c in wrong), wrong
    assert all("divided by the classes" in c["reason"] and "instead of the rows" in c["reason"] for c in wrong), wrong
    forward = {c["name"]: c for c in results(report, "test_cross_entropy_values")}
    one_row = [c for name, c in forward.items() if "[1-" in name]
    assert one_row and all(c["result"] == "PASS" for c in one_row), forward  # one row: the sum is the mean
    wrong = [c for name, c in forward.items() if "[64-10-" in name]
    assert wrong and all(c["result"] == "FAIL" and "summed over the rows instead of averaged" in c["reason"]
                         for c in wrong), wrong
    [functional] = results(report, "test_functional_cross_entropy_and_its_gradient")
    assert functional["result"] == "FAIL" and "F.cross_entropy" in functional["reason"], functional


def test_row_reduce_without_its_second_barrier_is_a_race(tmp_path):
    files = solution_sources()
    cu = files["softmax.cu"]
    marker = "        r = is_max ? fmaxf(r, scratch[first + i]) : r + scratch[first + i];\n    }\n    __syncthreads();\n"
    files["softmax.cu"] = replace_once(cu, marker, marker.replace("    __syncthreads();\n", ""))
    report = grade(tmp_path, files, "-k", "test_block_per_row_has_no_shared_memory_race")
    checks = {c["name"].split("[")[1].rstrip("]"): c for c in results(
        report, "test_block_per_row_has_no_shared_memory_race")}
    for name in ("softmax", "cross_entropy"):  # two row reductions in a row: the second overwrites scratch
        assert checks[name]["result"] in ("FAIL", "CRASH"), checks[name]
        reason = checks[name]["reason"]
        assert "shared-memory race" in reason and "softmax.cu:" in reason, reason
    assert checks["softmax_backward"]["result"] == "PASS", checks  # one reduction only: no race to find


def test_softmax_launcher_computing_with_numpy_is_rejected(tmp_path):
    files = solution_sources()
    files["softmax.py"] = replace_once(
        files["softmax.py"], '    _rows("softmax_forward", (x, out), *x.shape, threads)\n',
        "    h = backend.asnumpy(x).astype(np.float64)  # NumPy, not the kernel\n"
        "    e = np.exp(h - h.max(axis=1, keepdims=True))\n"
        "    out.set((e / e.sum(axis=1, keepdims=True)).astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", "(test_forward_values and softmax and 7-10) or "
                   "(test_results_come_from_your_kernels and softmax)")
    values = [c for c in results(report, "test_forward_values") if "log_softmax" not in c["name"]]
    [replay] = [c for c in results(report, "test_results_come_from_your_kernels") if c["name"].endswith("[softmax]")]
    assert_kernel_never_ran(values, replay, "softmax_forward")


# ---------------------------------------------------------------- conv.cu / conv.py, maxpool.cu / maxpool.py


def test_flipped_filter_and_pooling_gradient_to_the_whole_window_are_named(tmp_path):
    """Two mistakes in one workspace (no test runs both files): the textbook convolution, filter flipped, instead
    of the cross-correlation every framework computes (conv.cu); the pooling gradient sent to every element of a
    window instead of its maximum (maxpool.cu)."""
    files = solution_sources()
    files["conv.cu"] = replace_once(files["conv.cu"], "acc += wk[r * S + s] * x_at(",
                                    "acc += wk[(R - 1 - r) * S + (S - 1 - s)] * x_at(")
    files["maxpool.cu"] = replace_once(files["maxpool.cu"], "if (argmax[o] == h * W + w) {", "if (true) {")
    report = grade(tmp_path, files, "-k", "(test_conv_forward_values and direct) or test_maxpool_backward_values "
                   "or test_maxpool_forward_values")
    checks = {c["name"]: c for c in results(report, "test_conv_forward_values")}
    one_by_one = [c for name, c in checks.items() if "r1s" in name]
    assert one_by_one and all(c["result"] == "PASS" for c in one_by_one), checks  # a 1x1 filter is its own flip
    wider = [c for name, c in checks.items() if "r1s" not in name]
    assert wider and all(c["result"] == "FAIL" and "FLIPPED" in c["reason"] for c in wider), wider
    assert all(c["result"] == "PASS" for c in results(report, "test_maxpool_forward_values")), report["checks"]
    checks = {c["name"]: c for c in results(report, "test_maxpool_backward_values")}
    assert checks["test_maxpool_backward_values[1x1x1x1-k1s1p0]"]["result"] == "PASS"  # a window of one
    wrong = [c for name, c in checks.items() if "k1s1p0" not in name]
    assert wrong and all(c["result"] == "FAIL" and "were no window's maximum received a gradient" in c["reason"]
                         for c in wrong), wrong


def test_convolution_reading_the_padding_from_memory_is_rejected(tmp_path):
    """x_at without its bounds check: the padding is read from whatever lies beside the image."""
    files = solution_sources()
    files["conv.cu"] = replace_once(files["conv.cu"], "    if (h < 0 || h >= H || w < 0 || w >= W) {\n"
                                    "        return 0.0f;\n    }\n", "")
    report = grade(tmp_path, files, "-k", "test_conv_forward_values and direct and (1x2x5x4 or 2x3x7x9 or 1x2x9x8)")
    checks = {c["name"]: c for c in results(report, "test_conv_forward_values")}
    unpadded = [c for name, c in checks.items() if name.endswith("p0]")]
    assert unpadded and all(c["result"] == "PASS" for c in unpadded), checks
    padded = [c for name, c in checks.items() if not name.endswith("p0]")]
    assert padded and all(c["result"] in ("FAIL", "CRASH") for c in padded), padded
    assert all("padding" in c["reason"] or "out-of-bounds" in c["reason"] for c in padded), padded


def test_conv_launcher_computing_with_numpy_is_rejected(tmp_path):
    files = solution_sources()
    files["conv.py"] = replace_once(
        files["conv.py"],
        '        load_kernel("conv.cu", "conv2d_direct")((blocks_for(y.size),), (THREADS,), args)\n',
        "        xh, wh = backend.asnumpy(x).astype(np.float64), backend.asnumpy(w).astype(np.float64)\n"
        "        xh = np.pad(xh, ((0, 0), (0, 0), (padding, padding), (padding, padding)))\n"
        "        win = np.lib.stride_tricks.sliding_window_view(xh, (r, s), axis=(2, 3))\n"
        "        out = np.einsum('ncpqrs,kcrs->nkpq', win[:, :, ::stride, ::stride], wh)\n"
        "        y.set((out + backend.asnumpy(b)[None, :, None, None]).astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", "(test_conv_forward_values and direct and 2x3x7x9) or "
                   "test_conv_results_come_from_your_kernels")
    checks = {c["name"]: c for c in results(report, "test_conv_results_come_from_your_kernels")}
    bad = checks["test_conv_results_come_from_your_kernels[forward-direct]"]
    [values] = results(report, "test_conv_forward_values")
    assert_kernel_never_ran([values], bad, "conv2d_direct")
    assert all(c["result"] == "PASS" for name, c in checks.items() if "forward-direct" not in name), checks


def test_winograd_filter_transform_with_one_wrong_coefficient_is_named(tmp_path):
    """Row 2 of G with a + where the matrix has a -: the filter transform alone is graded wrong (its own test names
    U), the other two transforms pass, and so does every rung that is not Winograd F(2x2) (F(4x4) included)."""
    files = solution_sources()
    files["conv.cu"] = replace_once(files["conv.cu"], "t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);",
                                    "t[2][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);")
    report = grade(tmp_path, files, "-k", "test_winograd_transforms or (test_conv_forward_values and "
                   "(winograd or igemm) and 2x3x7x9)")
    checks = {c["name"]: c for c in results(report, "test_winograd_transforms")}
    bad = checks["test_winograd_transforms[winograd_filter]"]
    assert bad["result"] == "FAIL" and "winograd_filter" in bad["reason"] and ": U" in bad["reason"], bad
    assert all(c["result"] == "PASS" for name, c in checks.items() if "filter" not in name), checks
    forward = {c["name"]: c for c in results(report, "test_conv_forward_values")}
    assert [c["result"] for name, c in forward.items() if "winograd-" in name] == ["FAIL"], forward
    assert all(c["result"] == "PASS" for name, c in forward.items() if "igemm" in name or "winograd4" in name), \
        forward


def test_implicit_gemm_reading_padding_as_data_and_split_k_without_final_reduction_are_named(tmp_path):
    """Two mistakes in one workspace (no test runs both kernels): conv2d_igemm staging the nearest pixel of the
    image where the window leaves it (replicate padding) instead of 0, right without padding and wrong exactly at
    the outputs whose window reaches into the padding; and the weight gradient's chunks each written straight into
    dw, no partial buffer and no splitk_reduce, right where the positions fit one chunk and a partial sum (the last
    chunk's) where they do not."""
    files = solution_sources()
    files["conv.cu"] = replace_once(
        files["conv.cu"],
        "                if (h >= 0 && h < H && wc >= 0 && wc < W) {\n                    v = xn[",
        "                h = min(max(h, 0), H - 1);\n                wc = min(max(wc, 0), W - 1);\n"
        "                {\n                    v = xn[")
    files["conv.py"] = replace_once(files["conv.py"], "        partial = dw if n_chunks == 1 else "
                                    "backend.empty((n_chunks, k, crs))\n", "        partial = dw\n")
    files["conv.py"] = replace_once(files["conv.py"], "        if n_chunks > 1:\n"
                                    "            splitk_reduce(partial, dw, n_chunks, k * crs)\n", "")
    files["conv.cu"] = replace_once(files["conv.cu"], "float* out = partial + (size_t)blockIdx.z * K * CRS;",
                                    "float* out = partial;")
    report = grade(tmp_path, files, "-k", "(test_conv_forward_values and igemm and (1x2x5x4 or 2x3x7x9 or 1x2x9x8 "
                   "or 3x5x13x11)) or (test_conv_backward_weight_values and igemm and (3x5x13x11 or 1x2x9x8 or "
                   "2x1x28x28))")
    checks = {c["name"]: c for c in results(report, "test_conv_forward_values")}
    unpadded = [c for name, c in checks.items() if name.endswith("p0]")]
    assert len(unpadded) == 2 and all(c["result"] == "PASS" for c in unpadded), checks
    padded = [c for name, c in checks.items() if not name.endswith("p0]")]
    assert padded and all(c["result"] == "FAIL" and "only the outputs whose window reaches into the padding"
                          in c["reason"] for c in padded), padded
    checks = {c["name"]: c for c in results(report, "test_conv_backward_weight_values")}
    one_chunk = [c for name, c in checks.items() if "2x1x28x28" not in name]  # at most 128 positions (MIN_CHUNK)
    assert len(one_chunk) == 2 and all(c["result"] == "PASS" for c in one_chunk), checks
    [split] = [c for name, c in checks.items() if "2x1x28x28" in name]     # 1568 positions: 13 chunks
    assert split["result"] == "FAIL" and "the final reduction" in split["reason"], split


# ---------------------------------------------------------------- the deliverable


def _mnist_workspace(tmp_path: Path, params: dict, record: dict) -> dict[str, str]:
    """The solution files, and a saved model written into the workspace the grader will read."""
    from minitorch.nn import save_deliverable

    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    save_deliverable(workspace, "mnist_model.json", record, {"mnist_model.npz": params})
    return solution_sources()


def _untrained(seed: int = 0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    shapes = {"0.weight": (8, 1, 3, 3), "0.bias": (8,), "3.weight": (16, 8, 3, 3), "3.bias": (16,),
              "7.weight": (784, 64), "7.bias": (64,), "9.weight": (64, 10), "9.bias": (10,)}
    return {k: rng.uniform(-0.1, 0.1, s).astype(np.float32) for k, s in shapes.items()}


RECORD = {"format": 1, "input_mean": 0.1307, "input_std": 0.3081, "full": False,
          "config": {"epochs": 2, "train_images": 3000, "monitor_images": 1000}, "test_accuracy": 0.99}


@pytest.mark.skipif(not (REPO / "grader" / "tests" / "test_phase6_mnist.py").exists(), reason="no deliverable test")
def test_untrained_mnist_model_reporting_99_percent_is_rejected(tmp_path):
    """The record claims 99%; the grader scores the parameters itself and finds chance."""
    files = _mnist_workspace(tmp_path, _untrained(), RECORD)
    report = grade(tmp_path, files, "-k", "test_mnist_model")
    [check] = results(report, "test_mnist_model_accuracy_on_the_test_set")
    assert check["result"] == "FAIL", check
    assert "the notebook reported 99.00%" in check["reason"] and "at least" in check["reason"], check


@pytest.mark.skipif(not (REPO / "grader" / "tests" / "test_phase6_mnist.py").exists(), reason="no deliverable test")
def test_mnist_model_of_another_network_is_rejected(tmp_path):
    """A first Linear layer stored PyTorch's way, (out, in), is not the course's network as minitorch saves it."""
    params = _untrained()
    params["7.weight"] = params["7.weight"].T.copy()
    files = _mnist_workspace(tmp_path, params, RECORD)
    report = grade(tmp_path, files, "-k", "test_mnist_model")
    [check] = results(report, "test_mnist_model_accuracy_on_the_test_set")
    assert check["result"] == "FAIL" and "is not the course's network" in check["reason"], check
    assert "7.weight (64, 784) (expected (784, 64))" in check["reason"], check


@pytest.mark.skipif(not (REPO / "grader" / "tests" / "test_phase6_mnist.py").exists(), reason="no deliverable test")
def test_a_model_saved_by_another_run_than_its_record_is_refused(tmp_path):
    """A run that saved the parameters and stopped before the record: the new model beside the old record is
    graded as neither (it once read "the saved model classifies 11.36% ... the notebook reported 85.30%")."""
    import numpy as np

    files = _mnist_workspace(tmp_path, _untrained(0), RECORD)
    np.savez(tmp_path / "workspace" / "mnist_model.npz", **_untrained(1))   # as Module.save writes it
    report = grade(tmp_path, files, "-k", "test_mnist_model")
    [check] = results(report, "test_mnist_model_accuracy_on_the_test_set")
    assert check["result"] == "FAIL", check
    assert "mnist_model.npz and mnist_model.json come from two different runs" in check["reason"], check
    assert "Run the saving cell" in check["reason"] and "reading handwritten digits" in check["reason"], check
    assert "the notebook reported" not in check["reason"], check


def test_tiled_input_gradient_without_its_second_barrier_is_a_race(tmp_path):
    """conv2d_backward_input_tiled staging the next group of dy's channels while slower threads still read the
    last: the emulator's check mode names the race (the launch stages 2 channels a step, 5 groups); the values
    test, through the launcher that stages all of a small layer's channels at once, still passes."""
    files = solution_sources()
    files["conv.cu"] = replace_once(
        files["conv.cu"], "        __syncthreads();  // every thread is done with the dy tiles before the next group's\n", "")
    report = grade(tmp_path, files, "-k", "test_conv_kernels_have_no_shared_memory_race and input_tiled "
                   "or (test_conv_backward_input_values and tiled and 2x3x7x9)")
    [race] = results(report, "test_conv_kernels_have_no_shared_memory_race")
    assert race["result"] in ("FAIL", "CRASH") and "shared-memory race" in race["reason"], race
    assert "conv.cu:" in race["reason"], race
    [values] = results(report, "test_conv_backward_input_values")
    assert values["result"] == "PASS", values
