"""Known-bad learner code of Phases 3a and 3b must be rejected, each for the right reason (on emu).

Every fixture is the reference solution of Phases 1 to 3b with one deliberate mistake in a Phase 3 file,
graded from a prepared workspace (`grader check phase3a|phase3b --no-notebook -k ...`): only the tests
that matter run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import HOST_COPY, _emu_available, grade_workspace, results

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = ["phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward"]


pytestmark = [
    pytest.mark.skipif(not all((REPO / "solutions" / f"{n}.ipynb").exists() for n in NOTEBOOKS),
                       reason="the solution notebooks of phases 1 to 3b are not all written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]


def solution_sources() -> dict[str, str]:
    """Every file the solution notebooks of phases 1 to 3b write."""
    from grader.labs import learner_files

    files: dict[str, str] = {}
    for notebook in NOTEBOOKS:
        files.update(learner_files(REPO / "solutions" / f"{notebook}.ipynb"))
    return files


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"fixture out of date with the solution: {old!r} not found exactly once"
    return text.replace(old, new)


def mutate(name: str, old: str, new: str) -> dict[str, str]:
    files = solution_sources()
    files[name] = replace_once(files[name], old, new)
    return files


def grade(tmp_path: Path, phase: str, files: dict[str, str], select: str, timeout: float = 120) -> dict:
    return grade_workspace(tmp_path, phase, files, "--no-notebook", "-k", select, timeout=timeout)


def failed(report: dict, prefix: str, results_allowed: tuple[str, ...] = ("FAIL",)) -> list[dict]:
    """The checks named prefix*: at least one rejected, none crashed for another reason."""
    checks = results(report, prefix)
    bad = [c for c in checks if c["result"] != "PASS"]
    assert bad, f"{prefix}: the mistake was not caught: {checks}"
    assert all(c["result"] in results_allowed for c in bad), bad
    return bad


# ---------------------------------------------------------------- Phase 3a


def test_add_bias_indexed_by_row_is_rejected(tmp_path):
    files = mutate("forward.cu", "out[i] = x[i] + bias[i % cols];", "out[i] = x[i] + bias[i / cols];")
    report = grade(tmp_path, "phase3a", files, "test_add_bias_values or test_deliverable")
    for check in failed(report, "test_add_bias_values", ("FAIL", "CRASH")):
        assert "differ" in check["reason"] or "out-of-bounds" in check["reason"], check["reason"]
    [deliverable] = failed(report, "test_deliverable")
    assert "[[1, 2], [3, 4]]" in deliverable["reason"]


def test_unstable_sigmoid_is_rejected(tmp_path):
    files = mutate("forward.cu", "        if (v >= 0.0f) {\n", "        if (false) {  // e^x / (1 + e^x) everywhere\n")
    report = grade(tmp_path, "phase3a", files, "test_sigmoid_stable or test_sigmoid_values")
    [check] = failed(report, "test_sigmoid_stable_for_large_inputs")
    assert "nan" in check["reason"].lower(), check["reason"]
    assert "non-positive" in check["hint"]
    assert all(c["result"] == "PASS" for c in results(report, "test_sigmoid_values"))  # moderate inputs are fine


def test_add_bias_launcher_swapping_rows_and_cols_is_rejected(tmp_path):
    files = mutate("forward.py", "(x, bias, out, np.int32(rows), np.int32(cols))", "(x, bias, out, np.int32(cols), np.int32(rows))")
    report = grade(tmp_path, "phase3a", files, "test_add_bias_values")
    checks = failed(report, "test_add_bias_values", ("FAIL", "CRASH"))
    assert any("differ" in c["reason"] for c in checks), checks  # rows < cols: the wrong bias element
    assert any(c["result"] == "CRASH" and "argument #1 (`bias`)" in c["reason"] for c in checks), checks  # rows > cols


# ---------------------------------------------------------------- Phase 3b: kernels


def test_relu_backward_multiplying_by_the_output_is_rejected(tmp_path):
    files = mutate("backward.cu", "grad_in[i] = x[i] > 0.0f ? grad_out[i] : 0.0f;",
                   "grad_in[i] = x[i] > 0.0f ? grad_out[i] * x[i] : 0.0f;  // relu(x) as the multiplier")
    report = grade(tmp_path, "phase3b", files, "test_relu_backward")
    failed(report, "test_relu_backward_values")
    [check] = failed(report, "test_relu_backward_is_a_mask_not_a_product")
    assert "relu_backward(x=[2, 0.5, 3, -1]" in check["reason"] and "UNCHANGED" in check["hint"]


def test_sigmoid_backward_from_the_input_is_rejected(tmp_path):
    files = mutate("backward.cu", "grad_in[i] = grad_out[i] * y[i] * (1.0f - y[i]);",
                   "float s = 1.0f / (1.0f + expf(-y[i]));  // treats y as the input x\n"
                   "        grad_in[i] = grad_out[i] * s * (1.0f - s);")
    report = grade(tmp_path, "phase3b", files, "test_sigmoid_backward")
    failed(report, "test_sigmoid_backward_values")
    [check] = failed(report, "test_sigmoid_backward_uses_the_forward_output")
    assert "y is already sigma(x), the forward output" in check["reason"], check["reason"]


def test_bias_grad_summing_rows_is_rejected(tmp_path):
    files = mutate("backward.cu", "for (int r = r0 + ty; r < r1; r += blockDim.y) {\n"
                                  "                sum += grad_out[(long long)r * cols + c];",
                   "for (int j = ty; j < cols; j += blockDim.y) {\n"
                   "                sum += grad_out[(long long)c * cols + j];  // row c")
    report = grade(tmp_path, "phase3b", files, "test_bias_grad_values")
    checks = failed(report, "test_bias_grad_values", ("FAIL", "CRASH"))
    assert any("column sums" in c["reason"] and "differ" in c["reason"] for c in checks), checks
    assert any(c["result"] == "CRASH" and "KernelFault" in c["reason"] for c in checks), checks  # rows < cols


def test_mse_loss_not_zeroed_is_rejected(tmp_path):
    files = mutate("backward.py", "    loss.fill(0)\n", "")
    report = grade(tmp_path, "phase3b", files, "test_mse_loss_values")
    for check in failed(report, "test_mse_loss_values"):
        assert "never written" in check["reason"] or "differ" in check["reason"], check["reason"]


def test_sgd_without_momentum_is_rejected(tmp_path):
    files = mutate("sgd.cu", "        float v = momentum * velocity[i] + grad[i];\n        velocity[i] = v;\n"
                             "        param[i] -= lr * v;\n",
                   "        param[i] -= lr * grad[i];  // plain SGD: the velocity is ignored\n")
    report = grade(tmp_path, "phase3b", files, "test_sgd_momentum_several_steps")
    checks = results(report, "test_sgd_momentum_several_steps")
    momentum_cases = [c for c in checks if "0.0" not in c["name"]]
    assert momentum_cases and all(c["result"] == "FAIL" for c in momentum_cases), checks
    assert all("velocity after step 1" in c["reason"] for c in momentum_cases), momentum_cases


# ---------------------------------------------------------------- Phase 3b: autograd


def test_backpropagate_overwriting_a_shared_gradient_is_rejected(tmp_path):
    files = mutate("backprop.py", "grads[id(x)] = gx if id(x) not in grads else grads[id(x)] + gx",
                   "grads[id(x)] = gx  # the last use wins")
    report = grade(tmp_path, "phase3b", files, "test_shared_parameter or test_gradients_on_the_device")
    [check] = failed(report, "test_shared_parameter_gets_the_sum")
    assert "relative error" in check["reason"] and "SUM" in check["hint"], check
    assert all(c["result"] == "PASS" for c in results(report, "test_gradients_on_the_device[matmul]"))


def test_backpropagate_overwriting_leaf_grad_is_rejected(tmp_path):
    files = mutate("backprop.py", "t.grad = g if t.grad is None else t.grad + g", "t.grad = g  # no accumulation")
    report = grade(tmp_path, "phase3b", files, "test_gradients_accumulate or test_shared_parameter")
    [check] = failed(report, "test_gradients_accumulate_over_backward_calls")
    assert "twice the first" in check["reason"], check["reason"]
    assert all(c["result"] == "PASS" for c in results(report, "test_shared_parameter_gets_the_sum"))


def test_recursive_topological_order_is_rejected(tmp_path):
    files = solution_sources()
    text = files["backprop.py"]
    start, end = text.index("    ### BEGIN SOLUTION\n"), text.index("    ### END SOLUTION\n")
    files["backprop.py"] = text[:start] + (
        "    order, seen = [], set()\n\n"
        "    def visit(t):\n"
        "        if id(t) in seen:\n"
        "            return\n"
        "        seen.add(id(t))\n"
        "        for x in (t.grad_fn.inputs if t.grad_fn else ()):\n"
        "            visit(x)\n"
        "        order.append(t)\n\n"
        "    visit(root)\n"
        "    return order[::-1]\n") + text[end + len("    ### END SOLUTION\n"):]
    report = grade(tmp_path, "phase3b", files, "test_topological_order")
    assert all(c["result"] == "PASS" for c in results(report, "test_topological_order_of_a_diamond"))
    [check] = failed(report, "test_topological_order_of_a_deep_chain")
    assert "recursion limit" in check["reason"], check["reason"]


def test_breadth_first_order_is_rejected_by_the_ordering_test(tmp_path):
    """Breadth-first order passes a diamond; the ordering test itself must reject it (not blame the
    gradient accumulation, which the learner's backpropagate does right)."""
    files = solution_sources()
    text = files["backprop.py"]
    start, end = text.index("    ### BEGIN SOLUTION\n"), text.index("    ### END SOLUTION\n")
    files["backprop.py"] = text[:start] + (
        "    from collections import deque\n"
        "    order, seen, queue = [], {id(root)}, deque([root])\n"
        "    while queue:\n"
        "        t = queue.popleft()\n"
        "        order.append(t)\n"
        "        for x in (t.grad_fn.inputs if t.grad_fn else ()):\n"
        "            if id(x) not in seen:\n"
        "                seen.add(id(x))\n"
        "                queue.append(x)\n"
        "    return order\n") + text[end + len("    ### END SOLUTION\n"):]
    report = grade(tmp_path, "phase3b", files, "test_topological_order")
    assert all(c["result"] == "PASS" for c in results(report, "test_topological_order_of_a_diamond"))
    [check] = failed(report, "test_topological_order_with_a_short_and_a_long_path")
    assert "comes before c, which uses it" in check["reason"], check["reason"]
    assert "breadth-first" in check["hint"], check["hint"]


ONE_THREAD_PER_ELEMENT = "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {\n"


@pytest.mark.parametrize("phase, file, kernel, test", [
    ("phase3a", "forward.cu", "add_bias", "test_add_bias_kernel_small_grid_covers_all"),
    ("phase3b", "backward.cu", "sigmoid_backward", "test_backward_kernels_small_grid_cover_all[sigmoid_backward]"),
])
def test_one_thread_per_element_kernel_is_rejected_by_the_small_grid(tmp_path, phase, file, kernel, test):
    """A bounds check and no loop: right whenever the launcher gives one thread per element, wrong once the
    data outgrow the capped grid (the sales deliverable's 5.2 M elements on a GPU). The small grid shows it."""
    files = solution_sources()
    text = files[file]
    start = text.index(f"void {kernel}(")
    loop = text.index("    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {\n",
                      start)
    files[file] = text[:loop] + ONE_THREAD_PER_ELEMENT + text[loop + len(
        "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {\n"):]
    report = grade(tmp_path, phase, files, test.split("[")[0])
    [check] = [c for c in failed(report, test.split("[")[0]) if c["name"] == test]
    assert "elements were written by the 3 x 64 = 192 threads" in check["reason"], check["reason"]
    assert "grid-stride loop" in check["reason"], check


def test_sigmoid_launcher_overwriting_the_result_from_the_host_is_rejected(tmp_path):
    """sigmoid launches its kernel over one element, then copies NumPy's answer over the output: the values
    are right, a launch is recorded, and only replaying the launches into a fresh output shows that the
    result came from the host."""
    files = solution_sources()
    launch = "    kernel((blocks_for(x.size),), (THREADS,), (x, out, np.int64(x.size)))\n"
    files["forward.py"] = replace_once(
        files["forward.py"], launch,
        "    kernel((1,), (THREADS,), (x, out, np.int64(min(x.size, 1))))  # one element: a launch recorded\n"
        "    x_host = x.get().astype(np.float64)\n"
        "    out.set((1 / (1 + np.exp(-x_host))).astype(np.float32))  # from the host\n")
    report = grade(tmp_path, "phase3a", files, "test_results_come_from_your_kernels")
    [check] = [c for c in failed(report, "test_results_come_from_your_kernels") if "sigmoid" in c["name"]]
    assert HOST_COPY in check["reason"], check["reason"]
