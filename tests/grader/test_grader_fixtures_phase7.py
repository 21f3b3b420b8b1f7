"""Known-bad Phase 7 learner code must be rejected, each for the right reason (`grader check phase7`).

Every fixture is the reference solution (with the earlier phases' files, which the framework uses) with deliberate
mistakes, graded from a prepared workspace on the emulator: only the tests that matter run. To keep the suite fast,
one grading run may carry mistakes in different files; each mistake is asserted on its own checks and message.
The deliverable's fixtures grade saved models against the real Tiny Shakespeare (skipped when it is not there).
"""

from __future__ import annotations

import json
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
SOLUTION = REPO / "solutions" / "phase7_gpt.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase7_gpt.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]

VISIBLE = "        const int visible = causal ? (int)(row % cols) + 1 : cols;\n"  # the warp and the _rows kernels
# softmax_forward_rows without the row's maximum: exp(scale * s) overflows float32 on large scores
ROWS_EXP = "            const float e = expf(scale * (s[j] - mx));\n"
# 1/sigma in layernorm_forward: once on the row-in-registers path, once on the general one; and in
# layernorm_forward_thread (a thread a row: what the launcher runs on the emulator)
RSTD = "r = 1.0f / sqrtf(warp_sum(q) / cols + eps);"
RSTD_THREAD = "const float r = 1.0f / sqrtf(q / cols + eps);"


def replace_rstd(source: str, new: str, new_thread: str) -> str:
    """The same mistake on both of layernorm_forward's paths and in layernorm_forward_thread."""
    assert source.count(RSTD) == 2, f"fixture out of date with the solution: {RSTD!r} not found twice"
    assert source.count(RSTD_THREAD) == 1, f"fixture out of date with the solution: {RSTD_THREAD!r} not found once"
    return source.replace(RSTD, new).replace(RSTD_THREAD, new_thread)
GELU_SLOPE = """        const float t = tanhf(GELU_SQRT_2_OVER_PI * (v + GELU_CUBIC * v2 * v));
        const float du = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_CUBIC * v2);
        grad_in[i] =
            grad_out[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
"""
# the derivative of the exact GELU, x * Phi(x): Phi(x) + x * phi(x)
ERF_SLOPE = """        const float cdf = 0.5f * (1.0f + erff(v * 0.70710678f));
        const float pdf = 0.39894228f * expf(-0.5f * v2);
        grad_in[i] = grad_out[i] * (cdf + v * pdf);
"""
SCATTER = "            atomicAdd(&grad_weight[(long long)token * dim + d], grad_out[e]);\n"
BMM_LAUNCH_END = """         np.int64(K * N), np.int64(M * N), np.int32(bool(transpose_a)),
         np.int32(bool(transpose_b))))
"""
GELU_LAUNCH = """        load_kernel("gelu.cu", "gelu_forward")(
            (blocks_for(n),), (THREADS,), (x, out, np.int64(n)))
"""
# softmax_forward normalising each COLUMN (one key over the queries) instead of each row: the same mask, transposed
WRONG_AXIS_BODY = """    const int lane = threadIdx.x % WARP;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    const long long warps = (long long)gridDim.x * blockDim.x / WARP;
    for (long long col = warp; col < rows; col += warps) {
        const long long base = (col / cols) * cols * cols + col % cols;
        const int first = causal ? (int)(col % cols) : 0;  // queries t >= key j see it
        float mx = __int_as_float((int)0xff800000u);  // -inf
        for (int t = first + lane; t < cols; t += WARP) {
            mx = fmaxf(mx, scores[base + (long long)t * cols]);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int t = first + lane; t < cols; t += WARP) {
            sum += expf(scale * (scores[base + (long long)t * cols] - mx));
        }
        const float inv = 1.0f / warp_sum(sum);
        for (int t = lane; t < cols; t += WARP) {
            probs[base + (long long)t * cols] =
                t >= first ? expf(scale * (scores[base + (long long)t * cols] - mx)) * inv : 0.0f;
        }
    }
"""
BMM_SECOND_BARRIER = "        __syncthreads();  // the next tiles are stored, and nobody reads these any more\n"


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and Phase 7's."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase7":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str, env_extra: dict[str, str] | None = None) -> dict:
    return grade_workspace(tmp_path, "phase7", files, "--no-notebook", *args, timeout=120, env_extra=env_extra)


def solution_region(source: str, kernel: str) -> tuple[int, int]:
    """Start and end of the SOLUTION region inside `kernel`."""
    start = source.index(kernel)
    begin = source.index("    // ### BEGIN SOLUTION\n", start)
    end = source.index("    // ### END SOLUTION\n", begin)
    return begin, end + len("    // ### END SOLUTION\n")


def replace_in(source: str, kernel: str, old: str, new: str) -> str:
    """`old` replaced by `new` once, inside the SOLUTION region of `kernel` only."""
    begin, end = solution_region(source, kernel)
    return source[:begin] + replace_once(source[begin:end], old, new) + source[end:]


def test_mask_seeing_the_next_position_and_erf_slope_and_overwriting_scatter_are_rejected(tmp_path):
    """Three mistakes in three files, one grading run:
    - the causal mask lets query t see key t + 1 (in both softmax kernels: ops.attention runs the emulator's);
    - gelu_backward differentiates the exact (erf) GELU while the forward is the tanh one;
    - embedding_backward stores instead of adding: a repeated id keeps one of its gradient rows."""
    files = solution_sources()
    files["attention.cu"] = replace_in(
        files["attention.cu"], 'extern "C" __global__ void softmax_forward', VISIBLE,
        "        const int visible = causal ? min((int)(row % cols) + 2, cols) : cols;  // sees t + 1\n")
    files["attention.cu"] = replace_in(
        files["attention.cu"], 'extern "C" __global__ void softmax_forward_rows', VISIBLE,
        "        const int visible = causal ? min((int)(row % cols) + 2, cols) : cols;  // sees t + 1\n")
    files["gelu.cu"] = replace_once(files["gelu.cu"], GELU_SLOPE, ERF_SLOPE)
    files["embedding.cu"] = replace_once(
        files["embedding.cu"], SCATTER, "            grad_weight[(long long)token * dim + d] = grad_out[e];\n")
    report = grade(tmp_path, files, "-k", "(test_softmax_forward_values and 7-) or "
                                          "(test_softmax_rows_forward_values and 7-causal) or "
                                          "test_attention_is_causal or test_gelu_backward_values or "
                                          "test_gelu_forward_values or test_embedding_backward_accumulates")
    by_name = {c["name"]: c for c in report["checks"]}
    leak = by_name["test_softmax_forward_values[7-causal]"]
    assert leak["result"] == "FAIL" and "query positions see the future" in leak["reason"], leak
    assert by_name["test_softmax_forward_values[7-full]"]["result"] == "PASS"  # no mask, nothing to leak
    leak = by_name["test_softmax_rows_forward_values[7-causal]"]
    assert leak["result"] == "FAIL" and "query positions see the future" in leak["reason"], leak
    [causal] = results(report, "test_attention_is_causal")
    assert causal["result"] == "FAIL" and "sees the future" in causal["reason"], causal
    for check in results(report, "test_gelu_backward_values"):
        if check["name"].endswith("[1]"):  # one random x: where |x| is large both slopes agree to float32
            continue
        assert check["result"] == "FAIL" and "exact (erf) GELU's derivative" in check["reason"], check
    assert all(c["result"] == "PASS" for c in results(report, "test_gelu_forward_values"))
    for check in results(report, "test_embedding_backward_accumulates_repeated_ids"):
        assert check["result"] == "FAIL" and "overwrite each other; add with atomicAdd" in check["reason"], check


def test_sample_variance_and_a_numpy_launcher_are_rejected(tmp_path):
    """- layernorm_forward divides by cols - 1 (the sample variance);
    - gelu.py computes the GELU with NumPy and copies it in, launching nothing."""
    files = solution_sources()
    files["layernorm.cu"] = replace_rstd(files["layernorm.cu"], "r = 1.0f / sqrtf(warp_sum(q) / (cols - 1) + eps);",
                                         "const float r = 1.0f / sqrtf(q / (cols - 1) + eps);")
    files["gelu.py"] = replace_once(
        files["gelu.py"], GELU_LAUNCH,
        "        h = backend.asnumpy(x).astype(np.float64)  # NumPy, not the kernel\n"
        "        u = np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)\n"
        "        out.set((0.5 * h * (1 + np.tanh(u))).astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", "test_layernorm_population_variance or (test_gelu_forward_values and "
                                          "not 1000003) or (test_results_come_from_your_kernels and gelu_forward)")
    for check in results(report, "test_layernorm_population_variance"):
        assert check["result"] == "FAIL" and "SAMPLE variance (divided by cols - 1)" in check["reason"], check
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_gelu_forward_values"), replay, "gelu_forward", "gelu.cu")


def test_eps_outside_the_square_root_and_a_result_overwritten_from_the_host_are_rejected(tmp_path):
    """- layernorm_forward computes 1 / (sqrt(var) + eps);
    - bmm launches its kernel, then copies a NumPy product over the result."""
    files = solution_sources()
    files["layernorm.cu"] = replace_rstd(files["layernorm.cu"], "r = 1.0f / (sqrtf(warp_sum(q) / cols) + eps);",
                                         "const float r = 1.0f / (sqrtf(q / cols) + eps);")
    files["attention.py"] = replace_once(
        files["attention.py"], BMM_LAUNCH_END, BMM_LAUNCH_END +
        "    a_h, b_h = backend.asnumpy(a), backend.asnumpy(b)  # then NumPy's answer, copied in\n"
        "    a_h = a_h.transpose(0, 2, 1) if transpose_a else a_h\n"
        "    b_h = b_h.transpose(0, 2, 1) if transpose_b else b_h\n"
        "    out.set((a_h @ b_h * 1.0001).astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", "test_layernorm_eps_inside or (test_results_come_from_your_kernels and "
                                          "bmm)")
    eps = {c["name"]: c for c in results(report, "test_layernorm_eps_inside_the_square_root")}
    for name in (f"test_layernorm_eps_inside_the_square_root[{std}-{variant}]" for std in ("0.003", "0.0")
                 for variant in ("warp", "thread")):
        assert eps[name]["result"] == "FAIL" and "eps added AFTER the square root" in eps[name]["reason"], eps[name]
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert replay["result"] == "FAIL" and HOST_COPY in replay["reason"], replay


def test_careless_thread_kernels_of_layernorm_are_rejected(tmp_path):
    """The thread-a-row kernels (what the launcher runs on the emulator), written carelessly:
    - layernorm_forward_thread's variance in one pass, E[x^2] - mean^2: every digit lost when the mean is large
      (the warp kernels, right, pass the same checks);
    - layernorm_param_partials sums every chunk from row 0: the parameter gradients miss most rows."""
    files = solution_sources()
    files["layernorm.cu"] = replace_in(files["layernorm.cu"], 'extern "C" __global__ void layernorm_forward_thread',
                                       "            const float d = xr[c] - m;\n            q += d * d;\n",
                                       "            q += xr[c] * xr[c];\n")
    files["layernorm.cu"] = replace_in(files["layernorm.cu"], 'extern "C" __global__ void layernorm_forward_thread',
                                       RSTD_THREAD, "const float r = 1.0f / sqrtf(q / cols - m * m + eps);")
    files["layernorm.cu"] = replace_in(files["layernorm.cu"], 'extern "C" __global__ void layernorm_param_partials',
                                       "    const long long first = (long long)blockIdx.y * chunk_rows;\n",
                                       "    const long long first = 0;  // every chunk from the first row\n")
    report = grade(tmp_path, files, "-k", "test_layernorm_is_stable_with_a_large_mean or "
                                          "(test_layernorm_backward_values and thread)")
    for check in results(report, "test_layernorm_is_stable_with_a_large_mean"):
        if check["name"].endswith("-warp]"):
            assert check["result"] == "PASS", check
        else:
            assert check["result"] == "FAIL" and "layernorm_forward_thread" in check["reason"], check
            assert "two passes" in check["hint"], check
    wrong = [c for c in results(report, "test_layernorm_backward_values") if c["result"] == "FAIL"]
    assert {c["name"] for c in wrong} >= {"test_layernorm_backward_values[257-33-thread]",
                                          "test_layernorm_backward_values[5000-64-thread]"}, wrong
    for check in wrong:
        assert "grad_weight" in check["reason"] and "differ from the sum over the" in check["reason"], check


def test_softmax_over_the_wrong_axis_a_missing_barrier_and_plain_adds_are_rejected(tmp_path):
    """- softmax_forward normalises each column (a key over the queries) instead of each row;
    - softmax_forward_rows takes exp(scale * s) without subtracting the row's maximum: inf / inf on large scores;
    - bmm without its second __syncthreads(): the next tiles overwrite shared memory still being read;
    - a plain `+=` where threads of different blocks add into one element (embedding_backward, sum_squares): the
      emulator runs them one after the other and loses no update, so the values pass; its check mode reports the
      race (the same mistakes fail on a GPU by their values: tests/grader/test_grader_fixtures_gpu.py)."""
    from tests.grader.test_grader_fixtures_gpu import NON_ATOMIC_ADDS

    files = solution_sources()
    for name, old, new, _, _ in NON_ATOMIC_ADDS.values():
        files[name] = replace_once(files[name], old, new)
    cu = files["attention.cu"]
    begin, end = solution_region(cu, 'extern "C" __global__ void softmax_forward')
    cu = cu[:begin] + "    // ### BEGIN SOLUTION\n" + WRONG_AXIS_BODY + "    // ### END SOLUTION\n" + cu[end:]
    cu = replace_in(cu, 'extern "C" __global__ void softmax_forward_rows', ROWS_EXP,
                    "            const float e = expf(scale * s[j]);  // no maximum subtracted\n")
    files["attention.cu"] = replace_once(cu, BMM_SECOND_BARRIER, "")
    report = grade(tmp_path, files, "-k", "(test_softmax_forward_values and (31- or 1-full)) or "
                                          "test_softmax_rows_large_scores or "
                                          "test_bmm_has_no_shared_memory_race or device_memory_race")
    by_name = {c["name"]: c for c in results(report, "test_softmax_forward_values")}
    for name in ("test_softmax_forward_values[31-full]", "test_softmax_forward_values[31-causal]"):
        check = by_name[name]
        assert check["result"] == "FAIL" and "normalised over the wrong axis" in check["reason"], check
    assert by_name["test_softmax_forward_values[1-full]"]["result"] == "PASS"  # one key: both axes agree
    [overflow] = results(report, "test_softmax_rows_large_scores")
    assert overflow["result"] == "FAIL" and "subtract the row's maximum" in overflow["reason"], overflow
    [race] = results(report, "test_bmm_has_no_shared_memory_race")
    assert race["result"] in ("FAIL", "CRASH") and "shared-memory race" in race["reason"], race
    assert "__syncthreads() is missing" in race["reason"] and "attention.cu:" in race["reason"], race
    for test, file in (("test_embedding_backward_has_no_device_memory_race", "embedding.cu"),
                       ("test_clip_sum_of_squares_has_no_device_memory_race", "clip.cu")):
        [check] = results(report, test)
        assert check["result"] in ("FAIL", "CRASH") and "device-memory race" in check["reason"], check
        assert "atomicAdd" in check["reason"] and f"{file}:" in check["reason"], check


# ---------------------------------------------------------------- the deliverable

DATA = Path(__import__("os").environ.get("MINITORCH_DATA_DIR") or REPO / "data") / "tinyshakespeare" / "input.txt"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"Tiny Shakespeare is not in {DATA.parent}")


def _saved_model(workspace: Path, **record_changes: object) -> None:
    """A reduced GPT with its initial (untrained) weights, saved as the lab saves one."""
    from minitorch import data, nn

    chars = sorted(set(DATA.read_text(encoding="utf-8")))
    model = nn.GPT(len(chars), 16, d_model=32, n_head=2, n_layer=1, device="cpu", seed=0)
    record = {"format": 1, "config": model.config, "chars": chars, "train_fraction": 0.9,
              "data_sha256": data.DATASETS["tinyshakespeare"][0].sha256, "configuration": "reduced",
              "val_loss": 1.2, **record_changes}  # a printed loss the grader must not believe
    nn.save_deliverable(workspace, "shakespeare_model.json", record, {"shakespeare_model.npz": model})


ONLINE_GUARD = """    if (mn == NEG_INF) {
        m = mn;
        l = 0.0f;
        return;
    }
"""
ONLINE_RESCALE = "    l = l * expf(m - mn) + l2 * expf(m2 - mn);\n"


@pytest.mark.parametrize("change, message", [
    ((ONLINE_GUARD, ""), "exp(-inf - (-inf)) = exp(NaN)"),
    # the sum is not rescaled when the maximum rises: the two-pass formula, run in one pass
    ((ONLINE_RESCALE, "    l = l + l2 * expf(m2 - mn);\n"), "online_softmax of 41 x"),
])
def test_online_softmax_without_its_guard_or_its_rescaling_is_rejected(tmp_path, change, message):
    files = solution_sources()
    files["online_softmax.cu"] = replace_once(files["online_softmax.cu"], *change)
    report = grade(tmp_path, files, "-k", "test_online_softmax_values and 33")
    [check] = results(report, "test_online_softmax_values")
    assert check["result"] == "FAIL" and message in check["reason"], check


def test_a_dropout_mask_that_is_not_philoxs_is_rejected(tmp_path):
    """The right fraction of elements kept, but every element of a Philox block reads its first word."""
    files = solution_sources()
    files["recipe.cu"] = replace_once(files["recipe.cu"], "(words[i % 4] >> 9)", "(words[0] >> 9)")
    report = grade(tmp_path, files, "-k", "test_dropout_masks_are_philox_bit_for_bit and n1003")
    [check] = results(report, "test_dropout_masks_are_philox_bit_for_bit")
    assert check["result"] == "FAIL" and "not Philox's elements" in check["reason"], check


def test_four_a_thread_dropout_taken_when_misaligned_or_with_a_counter_per_element_is_rejected(tmp_path):
    """A launcher that takes dropout_apply_x4 for any n % 4 == 0 (a view 4 bytes past a 16-byte boundary: a
    misaligned float4); the x4 kernel counting Philox blocks by element (4q) instead of by quad (q)."""
    files = solution_sources()
    files["recipe.py"] = replace_once(files["recipe.py"], "    if n % 4 == 0 and x.data.ptr % 16 == 0 and "
                                      "out.data.ptr % 16 == 0:\n", "    if n % 4 == 0:\n")
    (tmp_path / "misaligned").mkdir()
    report = grade(tmp_path / "misaligned", files, "-k", "test_dropout_four_a_thread_draws_the_same_masks")
    checks = results(report, "test_dropout_four_a_thread_draws_the_same_masks")
    assert any(c["result"] in ("FAIL", "CRASH") and "misaligned" in c["reason"] for c in checks), checks
    files = solution_sources()
    x4_block = ("make_uint4((unsigned)q, (unsigned)offset, (unsigned)(offset >> 32), 0u);\n"
                "        const uint4 w = philox4x32_10(block, key);\n        const float4 v")  # dropout_apply_x4's
    files["recipe.cu"] = replace_once(files["recipe.cu"], x4_block, x4_block.replace("(unsigned)q,", "(unsigned)(4 * q),"))
    (tmp_path / "counter").mkdir()
    report = grade(tmp_path / "counter", files, "-k", "test_dropout_four_a_thread_draws_the_same_masks")
    checks = results(report, "test_dropout_four_a_thread_draws_the_same_masks")
    assert any(c["result"] == "FAIL" and "not Philox's elements" in c["reason"] for c in checks), checks


def test_heads_in_quads_taken_when_misaligned_or_always_by_elements_are_rejected(tmp_path):
    """A split_heads launcher that takes split_heads_x4 without asking whether the arrays start 16-byte aligned
    (a misaligned float4); a merge_heads launcher that never takes merge_heads_x4 (the right values, a thread an
    element: four times the threads, each moving 4 bytes)."""
    files = solution_sources()
    files["attention.py"] = replace_once(files["attention.py"], "        if in_quads(x, out, D, ld, offset):",
                                         "        if D % 4 == 0 and ld % 4 == 0 and offset % 4 == 0:")
    files["attention.py"] = replace_once(files["attention.py"], "        if in_quads(y, out, D, ld, offset):",
                                         "        if False:")
    report = grade(tmp_path, files, "-k", "test_heads_in_quads_only_where_aligned")
    checks = {c["name"]: c for c in results(report, "test_heads_in_quads_only_where_aligned")}
    misaligned = next(c for name, c in checks.items() if "not-16-byte" in name)
    assert misaligned["result"] in ("FAIL", "CRASH") and "misaligned" in misaligned["reason"], misaligned
    aligned = next(c for name, c in checks.items() if "not-16-byte" not in name)
    assert aligned["result"] == "FAIL" and "no launch of `merge_heads_x4`" in aligned["reason"], aligned


def _deliverable(report: dict) -> dict:
    [check] = results(report, "test_shakespeare_model_validation_loss")
    return check


def test_deliverable_without_a_saved_model_names_the_lab_section(tmp_path):
    report = grade(tmp_path, {}, "-k", "test_shakespeare_model")
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "no saved Shakespeare model" in check["reason"], check
    assert "The deliverable: a character-level GPT on Tiny Shakespeare" in check["reason"], check


@needs_data
def test_deliverable_is_evaluated_not_trusted(tmp_path):
    """An untrained model whose record claims a loss of 1.2: the grader's own float64 loss (about ln 65 = 4.2 or
    more) fails it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace)
    report = grade(tmp_path, {}, "-k", "test_shakespeare_model", env_extra={"MINITORCH_DATA_DIR": str(DATA.parents[1])})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "the validation loss of the saved model is" in check["reason"], check
    loss = float(check["reason"].split("the validation loss of the saved model is ")[1].split()[0])
    assert loss > 3.5, check
    assert "computed by the grader in float64" in check["reason"] and "at most 2.45" in check["reason"], check


@needs_data
@pytest.mark.parametrize("change, message", [
    ({"data_sha256": "0" * 64}, "trained on another text"),
    ({"chars": list("abc")}, "is not the sorted characters of Tiny Shakespeare"),
    ({"config": {"vocab_size": 65, "block_size": 16, "d_model": 32, "n_head": 2, "n_layer": 2}},
     "lacks blocks.1."),
])
def test_deliverable_whose_record_does_not_fit_is_rejected(tmp_path, change, message):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace, **change)
    report = grade(tmp_path, {}, "-k", "test_shakespeare_model", env_extra={"MINITORCH_DATA_DIR": str(DATA.parents[1])})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and message in check["reason"], check


def test_deliverable_is_locked_until_phase6_passes(tmp_path, monkeypatch):
    import grader

    monkeypatch.delenv("GRADER_SKIP_GATES", raising=False)
    progress_path = tmp_path / "progress.json"
    passed = {"when": "2026-11-24T00:00:00+00:00", "device": "emu", "workspace": str(tmp_path), "files": {},
              "passed": True}
    earlier = ("phase1", "phase2", "phase3a", "phase3b", "phase4", "phase5")
    progress_path.write_text(json.dumps({"phases": {p: {"last_pass": passed} for p in earlier}}))
    with pytest.raises(grader.PhaseLocked, match=r"Tiny Shakespeare GPT deliverable is locked: Phase 6 .* "
                                                 r"has not passed yet .*Run `grader check phase6`"):
        grader.require("shakespeare", progress_path=progress_path)


@pytest.mark.gpu
def test_reduced_configuration_is_refused_on_a_gpu(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace)
    report = grade_workspace(tmp_path, "phase7", solution_sources(), "--no-notebook", "-k", "test_shakespeare_model",
                             timeout=120, device="cuda", env_extra={"MINITORCH_DATA_DIR": str(DATA.parents[1])})
    check = _deliverable(report)
    assert check["result"] == "FAIL" and "on a GPU the deliverable is the seed's GPT" in check["reason"], check


@pytest.mark.gpu
def test_a_gelu_computed_with_cupy_is_rejected(tmp_path):
    """On a GPU the shortcut is CuPy's own elementwise maths: right values, no kernel of the learner's."""
    files = solution_sources()
    files["gelu.py"] = replace_once(
        files["gelu.py"], GELU_LAUNCH,
        "        import cupy  # CuPy, not the kernel\n"
        "        u = 0.7978845608 * (x + 0.044715 * x**3)\n"
        "        cupy.copyto(out, 0.5 * x * (1 + cupy.tanh(u)))\n")
    report = grade_workspace(tmp_path, "phase7", files, "--no-notebook", "-k",
                             "(test_gelu_forward_values and not 1000003) or (test_results_come_from_your_kernels "
                             "and gelu_forward)", timeout=120, device="cuda")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_gelu_forward_values"), replay, "gelu_forward", "gelu.cu")


@pytest.mark.gpu
def test_slow_layernorm_fails_the_bandwidth_threshold(tmp_path):
    """A correct LayerNorm with one THREAD per row (a block of 256 rows): uncoalesced, far below the copy rate."""
    files = solution_sources()
    files["layernorm.py"] = replace_once(files["layernorm.py"], "THREADS = 256                    # 8 warps a block",
                                         "THREADS = 32                     # 1 warp a block")
    files["layernorm.py"] = replace_once(
        files["layernorm.py"], "    blocks = max(1, min((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK, MAX_BLOCKS))\n"
                               "    load_kernel(\"layernorm.cu\", \"layernorm_forward\")(\n",
        "    blocks = 1  # one block of one warp for every row: no parallelism across rows\n"
        "    load_kernel(\"layernorm.cu\", \"layernorm_forward\")(\n")
    report = grade_workspace(tmp_path, "phase7", files, "--no-notebook", "--require-perf", "-k",
                             "test_perf_layernorm_forward", timeout=120, device="cuda")
    [check] = results(report, "test_perf_layernorm_forward_against_copy")
    needed = f"at least {threshold('phase7.layernorm_forward'):.2f}x is needed"  # the bar as calibrated
    assert check["result"] == "FAIL" and needed in check["reason"], check
