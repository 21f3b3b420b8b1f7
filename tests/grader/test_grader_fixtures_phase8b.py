"""Known-bad Phase 8b learner code (the FlashAttention ladder, its backward and dropout) must be rejected, each
for the right reason.

Every fixture is the reference solution (with the earlier phases' files) with a deliberate mistake, graded from a
prepared workspace on the emulator; only the tests that matter run. A mutated flash.cu is compiled afresh on the
emulator (about 5 s an instantiation), so mistakes in separate code share one graded run (rung 1's own loop,
the backward without dropout, the backward with it, the launcher; the mma body of rungs 2-7 gets a run to itself
when the backward's tests run too, as their forward is rung 5), and each check must fail, or pass, for its own
mistake's reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import (
    _emu_available,
    grade_workspace,
    replace_once,
    results,
)

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase8b_flash.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase8b_flash.ipynb not written yet"),
    pytest.mark.timeout(400),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

SCALAR_RESCALE = "                float acc = o[c] * alpha;\n"
SCALAR_MAX_UPDATE = "            m = mx;\n"
MASK = "                        if (key >= seq || (causal && key > row)) x = -INFINITY;\n"
BWD_MASK = "                    z = word_of(dropout_words(key, q0 + col, bh, seed, offset),\n"
DQ_ADD = ("                        atomic_add2(dq + (size_t)row * D + d0 + j * 8 + 2 * qd,\n"
          "                                    acc[j][2 * r], acc[j][2 * r + 1]);\n")
DQ_STORED = ("                        { float* p_ = dq + (size_t)row * D + d0 + j * 8 + 2 * qd;\n"
             "                          p_[0] = acc[j][2 * r]; p_[1] = acc[j][2 * r + 1]; }\n")
LAUNCH = "    _launch(name, (math.ceil(t / br), bh), (threads,), args, smem, RUNGS[variant])\n"
# the backward's launcher hands its kernel a fresh step (offset 0), not the forward's record it was given
BWD_STEP = "    drop = dropout_args(dropout_p, seed) + step_arrays(step, None, dropout_p > 0)[:1]\n"
# flash.py hands the attention to PyTorch's scaled_dot_product_attention (on a GPU the tempting shortcut is the
# very kernel it is measured against); never reached here (no PyTorch on the emulator's machine), rejected by name
TORCH_SHORTCUT = (
    "    if causal and dropout_p == 0.0 and q.size > 1 << 30:  # PyTorch's kernel, not yours\n"
    "        import torch\n"
    "        from torch.nn.functional import scaled_dot_product_attention\n"
    "        o[...] = scaled_dot_product_attention(torch.as_tensor(q), torch.as_tensor(k),\n"
    "                                              torch.as_tensor(v), is_causal=True)\n"
    "        return\n")


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and Phase 8b's."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase8b":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str) -> dict:
    return grade_workspace(tmp_path, "phase8b", files, "--no-notebook", *args, timeout=360, device="emu")


def failed(check: dict) -> bool:
    return check["result"] in ("FAIL", "CRASH")


def by_name(report: dict, test: str) -> dict[str, dict]:
    return {c["name"]: c for c in results(report, test)}


@needs_emu
@pytest.mark.slow
def test_known_bad_softmax_backward_and_launcher_are_rejected(tmp_path):
    """Four mistakes in four separate places, one graded run (the mma body, which the backward's tests run as
    their forward, is left right):
    - rung 1's online softmax never rescales its running output: right while every row's maximum sits in its
      first chunk of keys (T = 1, 7), wrong from there on;
    - the backward stores its share of dQ instead of adding it: right while one key block holds every key
      (T <= 128 at D = 64), wrong at T = 200, and only dQ is wrong;
    - the backward draws dropout's mask with query and key swapped (the transposed tile's coordinates): the
      forward with dropout passes, the backward with it fails;
    - flash.py calls PyTorch's scaled_dot_product_attention: rejected by name, whatever it computes."""
    files = solution_sources()
    cu = replace_once(files["flash.cu"], SCALAR_RESCALE, "                float acc = o[c];\n")
    cu = replace_once(cu, DQ_ADD, DQ_STORED)
    files["flash.cu"] = replace_once(cu, BWD_MASK, BWD_MASK.replace("dropout_words(key, q0 + col,",
                                                                    "dropout_words(q0 + col, key,"))
    files["flash.py"] = replace_once(files["flash.py"], LAUNCH, TORCH_SHORTCUT + LAUNCH)
    report = grade(tmp_path, files, "-k", "(test_forward_rung_values and scalar) or test_forward_with_dropout or "
                                          "(test_backward_values and 64) or test_backward_with_dropout or "
                                          "test_results_come_from_your_kernels")
    [scalar] = results(report, "test_forward_rung_values")
    assert failed(scalar) and "differ from float64 attention" in scalar["reason"], scalar
    assert "T=1," not in scalar["reason"] and "T=7," not in scalar["reason"], scalar
    [plain] = results(report, "test_backward_values")
    assert failed(plain) and ": dq:" in plain["reason"] and "T=200" in plain["reason"], plain
    assert "added (atomicAdd" in plain["reason"], plain
    [fwd_drop] = results(report, "test_forward_with_dropout")
    [bwd_drop] = results(report, "test_backward_with_dropout")
    assert fwd_drop["result"] == "PASS", fwd_drop
    assert failed(bwd_drop) and "the mask must be the forward's" in bwd_drop["reason"], bwd_drop
    [own] = results(report, "test_results_come_from_your_kernels")
    assert failed(own) and "flash.py imports torch" in own["reason"], own


@needs_emu
@pytest.mark.slow
def test_backward_with_another_offset_than_the_forward_is_rejected(tmp_path):
    """flash.py's backward ignores the step it is given (the forward's step_used) and regenerates the mask at
    offset 0: the forward's masks are right bit for bit, the backward with dropout fails (the grader's offsets come
    from device memory and are never 0), and the report says the mask must be the forward's."""
    files = solution_sources()
    files["flash.py"] = replace_once(files["flash.py"], BWD_STEP, BWD_STEP.replace("step_arrays(step,",
                                                                                   "step_arrays(None,"))
    report = grade(tmp_path, files, "-k", "test_backward_with_dropout or (test_dropout_mask_bit_for_bit and 64)")
    [mask] = results(report, "test_dropout_mask_bit_for_bit")
    assert mask["result"] == "PASS", mask
    [bwd_drop] = results(report, "test_backward_with_dropout")
    assert failed(bwd_drop) and "the mask must be the forward's" in bwd_drop["reason"], bwd_drop
    assert "the forward's step_used" in bwd_drop["reason"], bwd_drop


@needs_emu
@pytest.mark.slow
def test_causal_mask_off_by_one_is_rejected(tmp_path):
    """Key i + 1 seen by query i in the mma body: the non-causal cases pass, the first causal one with more than
    one key fails, and the report points at the causal mask."""
    files = solution_sources()
    files["flash.cu"] = replace_once(files["flash.cu"], MASK, MASK.replace("key > row", "key > row + 1"))
    report = grade(tmp_path, files, "-k", "test_forward_rung_values and cp_async")
    [check] = results(report, "test_forward_rung_values")
    assert failed(check) and "causal=True" in check["reason"], check
    assert "check the causal mask" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_running_max_never_updated_and_unmasked_tail_are_rejected(tmp_path):
    """Two mistakes, one graded run: rung 1's running maximum is never updated (O is still right while a row
    fits one chunk of 16 keys, but the saved logsumexp m + log l is -inf from T = 1 on, and the backward would
    recompute every probability from it), and the mma body leaves keys past T in the softmax (the zero-filled
    rows of the last tile: every row of a short sequence is wrong, and the report says the tail)."""
    files = solution_sources()
    cu = replace_once(files["flash.cu"], SCALAR_MAX_UPDATE, "")
    files["flash.cu"] = replace_once(cu, MASK, MASK.replace("key >= seq || ", ""))
    report = grade(tmp_path, files, "-k", "test_forward_rung_values and (scalar or tuned)")
    rungs = by_name(report, "test_forward_rung_values")
    [scalar] = [c for name, c in rungs.items() if "scalar" in name]
    [tuned] = [c for name, c in rungs.items() if "tuned" in name]
    assert failed(scalar) and "the logsumexp of" in scalar["reason"] and "-inf" in scalar["reason"], scalar
    assert failed(tuned) and "causal=False" in tuned["reason"], tuned
    assert "the sequence's tail?" in tuned["reason"], tuned
