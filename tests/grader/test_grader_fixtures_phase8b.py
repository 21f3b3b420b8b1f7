"""Known-bad Phase 8b learner code (the FlashAttention ladder, its backward and dropout) must be rejected, each
for the right reason.

Every fixture is the reference solution (with the earlier phases' files) with one deliberate mistake, graded from
a prepared workspace on the emulator; only the tests that matter run, on one rung (each mutated flash.cu is
compiled afresh on the emulator).
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

RESCALE = "                    o[i][j][0] *= alpha[0], o[i][j][1] *= alpha[0];\n"
MAX_UPDATE = "                m[i][r] = mx[r];\n"
MASK = "                        if (key >= seq || (causal && key > row)) x = -INFINITY;\n"
BWD_MASK = "                    z = word_of(dropout_words(key, q0 + col, bh, seed, offset),\n"
DQ_ADD = ("                        atomic_add2(dq + (size_t)row * D + d0 + j * 8 + 2 * qd,\n"
          "                                    acc[j][2 * r], acc[j][2 * r + 1]);\n")
LAUNCH = "    _launch(name, (math.ceil(t / br), bh), (threads,),\n"


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
    return grade_workspace(tmp_path, "phase8b", files, "--no-notebook", *args, timeout=300, device="emu")


def failed(check: dict) -> bool:
    return check["result"] in ("FAIL", "CRASH")


def mutated(old: str, new: str, file: str = "flash.cu") -> dict[str, str]:
    files = solution_sources()
    files[file] = replace_once(files[file], old, new)
    return files


@needs_emu
@pytest.mark.slow
def test_online_softmax_without_rescaling_the_output_is_rejected(tmp_path):
    """The running output never multiplied by alpha: right only while every row's maximum sits in the first key
    tile (T = 1 and 7 pass; T = 200, four key tiles of rung 3, cannot)."""
    report = grade(tmp_path, mutated(RESCALE, ""), "-k", "test_forward_rung_values and ldmatrix")
    [check] = results(report, "test_forward_rung_values")
    assert failed(check) and "differ from float64 attention" in check["reason"], check
    assert "T=1," not in check["reason"] and "T=7," not in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_running_max_never_updated_is_rejected(tmp_path):
    report = grade(tmp_path, mutated(MAX_UPDATE, ""), "-k", "test_forward_rung_values and ldmatrix")
    [check] = results(report, "test_forward_rung_values")
    assert failed(check), check
    assert "differ from float64 attention" in check["reason"] or "logsumexp" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_causal_mask_off_by_one_is_rejected(tmp_path):
    """Key i + 1 seen by query i: the non-causal cases pass, the first causal one fails, and the report points
    at the causal mask."""
    report = grade(tmp_path, mutated(MASK, MASK.replace("key > row", "key > row + 1")), "-k",
                   "test_forward_rung_values and cp_async")
    [check] = results(report, "test_forward_rung_values")
    assert failed(check) and "causal=True" in check["reason"], check
    assert "the causal mask" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_unmasked_sequence_tail_is_rejected(tmp_path):
    """Keys past T (zero-filled rows of the last tile) left in the softmax: every row of a short sequence is
    wrong, from T = 1 on."""
    report = grade(tmp_path, mutated(MASK, MASK.replace("key >= seq || ", "")), "-k",
                   "test_forward_rung_values and tuned")
    [check] = results(report, "test_forward_rung_values")
    assert failed(check) and "differ from float64 attention" in check["reason"], check
    assert "causal=False" in check["reason"] and "the sequence's tail?" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_dropout_mask_differing_between_forward_and_backward_is_rejected(tmp_path):
    """The backward draws its mask with the query and key swapped (the transposed tile's coordinates): the forward
    with dropout passes, the backward without dropout passes, the backward with dropout fails."""
    report = grade(tmp_path, mutated(BWD_MASK, BWD_MASK.replace("dropout_words(key, q0 + col,",
                                                                "dropout_words(q0 + col, key,")),
                   "-k", "test_forward_with_dropout or test_backward_with_dropout or "
                         "(test_backward_values and 64)")
    [fwd] = results(report, "test_forward_with_dropout")
    [plain] = results(report, "test_backward_values")
    [drop] = results(report, "test_backward_with_dropout")
    assert fwd["result"] == "PASS" and plain["result"] == "PASS", (fwd, plain)
    assert failed(drop) and "the mask must be the forward's" in drop["reason"], drop


@needs_emu
@pytest.mark.slow
def test_dq_stored_instead_of_accumulated_is_rejected(tmp_path):
    """Each key block stores its share of dQ: right while one block holds every key (T <= 128 at D = 64), wrong
    at T = 200, and only dQ is."""
    stored = ("                        { float* p_ = dq + (size_t)row * D + d0 + j * 8 + 2 * qd;\n"
              "                          p_[0] = acc[j][2 * r]; p_[1] = acc[j][2 * r + 1]; }\n")
    report = grade(tmp_path, mutated(DQ_ADD, stored), "-k", "test_backward_values and 64")
    [check] = results(report, "test_backward_values")
    assert failed(check) and ": dq:" in check["reason"] and "T=200" in check["reason"], check
    assert "added (atomicAdd" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_launcher_calling_torch_sdpa_is_rejected(tmp_path):
    """flash.py hands the attention to PyTorch's scaled_dot_product_attention (on a GPU the tempting shortcut is
    the very kernel it is measured against): rejected by name, whatever it computes."""
    shortcut = ("    if causal and dropout_p == 0.0 and q.size > 1 << 30:  # PyTorch's kernel, not yours\n"
                "        import torch\n"
                "        from torch.nn.functional import scaled_dot_product_attention\n"
                "        o[...] = scaled_dot_product_attention(torch.as_tensor(q), torch.as_tensor(k),\n"
                "                                              torch.as_tensor(v), is_causal=True)\n"
                "        return\n")
    report = grade(tmp_path, mutated(LAUNCH, shortcut + LAUNCH, "flash.py"), "-k",
                   "test_results_come_from_your_kernels")
    [check] = results(report, "test_results_come_from_your_kernels")
    assert failed(check) and "flash.py imports torch" in check["reason"], check
