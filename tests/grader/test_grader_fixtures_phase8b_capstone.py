"""Known-bad Phase 8b capstone checkpoints must be rejected, each for the right reason (`grader check phase8b -k
test_capstone`, on saved files only: no learner kernel runs, so each grading takes seconds).

- a checkpoint whose record reports a loss its weights do not have (the initial weights, a claimed 1.2): the grader's
  own float64 loss fails it;
- a checkpoint of a smaller model than the capstone's: refused by its configuration, whatever its loss;
- a checkpoint of Phase 7's materialised GPT (its config has no "attention": "flash"): refused;
- the reduced configuration graded on a GPU (GPU only).
The shortcut of a flash.py that hands the attention to PyTorch's scaled_dot_product_attention is
test_grader_fixtures_phase8b.py's (test_known_bad_softmax_backward_and_launcher_are_rejected).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.checks import threshold
from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, results

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("MINITORCH_DATA_DIR") or REPO / "data") / "tinyshakespeare" / "input.txt"

pytestmark = [
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
]
# grader/tests/test_phase8b_capstone.py's files and reduced configuration (not imported: a graded module)
MODEL_FILE, RECORD_FILE = "nanogpt_model.npz", "nanogpt_model.json"
REDUCED = {"block_size": 32, "d_model": 64, "n_head": 1, "n_layer": 1}
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"Tiny Shakespeare is not in {DATA.parent}")


def _saved_model(workspace: Path, dims: dict[str, int] | None = None, attention: str = "flash",
                 **record_changes: object) -> None:
    """A GPT with its initial (untrained) weights, saved as the lab's capstone cell saves one; by default the reduced
    configuration with a FlashAttention config."""
    from minitorch import data, nn

    chars = sorted(set(DATA.read_text(encoding="utf-8")))
    dims = dict(REDUCED if dims is None else dims)
    model = nn.GPT(len(chars), dims.pop("block_size"), **dims, device="cpu", seed=0, attention=attention)
    record = {"format": 1, "config": model.config, "chars": chars, "train_fraction": 0.9,
              "data_sha256": data.DATASETS["tinyshakespeare"][0].sha256, "configuration": "reduced",
              "autocast": "bfloat16", "val_loss": 1.2, **record_changes}  # a printed loss the grader must not believe
    nn.save_deliverable(workspace, RECORD_FILE, record, {MODEL_FILE: model})


def _grade(tmp_path: Path, device: str = "emu") -> dict:
    report = grade_workspace(tmp_path, "phase8b", {}, "--no-notebook", "-k", "test_capstone", timeout=120,
                             device=device, env_extra={"MINITORCH_DATA_DIR": str(DATA.parents[1])})
    [check] = results(report, "test_capstone_validation_loss")
    assert check["result"] == "FAIL", check
    return check


def test_capstone_without_a_saved_model_names_the_lab_section(tmp_path):
    check = _grade(tmp_path)
    assert "no saved capstone model" in check["reason"] and "nanogpt_model.npz" in check["reason"], check
    assert "The capstone: nanoGPT's Shakespeare model on your kernels" in check["reason"], check


@needs_data
@pytest.mark.parametrize("case, message", [
    # the initial weights, a record that claims 1.2: the grader's float64 loss (about ln 65 = 4.2) fails them
    ("untrained", "the validation loss of the saved model is"),
    # a smaller model than the capstone's, whatever its loss
    ("smaller", "no other size is graded"),
    # Phase 7's materialised GPT of the reduced size: not the FlashAttention model
    ("materialised", "not Phase 7's materialised attention"),
])
def test_known_bad_capstone_checkpoints_are_rejected(tmp_path, case, message):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    if case == "smaller":
        _saved_model(workspace, {**REDUCED, "block_size": REDUCED["block_size"] // 2})
    else:
        _saved_model(workspace, attention="materialised" if case == "materialised" else "flash")
    check = _grade(tmp_path)
    assert message in check["reason"], check
    if case == "untrained":
        loss = float(check["reason"].split("the validation loss of the saved model is ")[1].split()[0])
        assert loss > 3.5, check
        bar = threshold("phase8b.capstone_val_loss_reduced")
        assert f"at most {bar}" in check["reason"] and "is not used" in check["reason"], check


@needs_data
@pytest.mark.gpu
def test_reduced_capstone_is_refused_on_a_gpu(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _saved_model(workspace)
    check = _grade(tmp_path, device="cuda")
    assert "on a GPU the capstone is nanoGPT's model" in check["reason"], check


def test_a_full_size_capstone_checkpoint_passes_the_file_checks(tmp_path):
    """nanoGPT's model is 77 arrays and 43 MB in float32: over the limits of Phases 4-7's saved models (64 arrays,
    16 MB), within the capstone's; the pair check and the reader take it (no grading run: the float64 evaluation of
    this size takes minutes on a CPU)."""
    from grader import deliverables
    from grader.checks import GradeError
    from minitorch import nn

    model = nn.GPT(65, 256, d_model=384, n_head=6, n_layer=6, tie_weights=True, dropout=0.2, attention="flash",
                   init="gpt2", device="cpu")
    nn.save_deliverable(tmp_path, RECORD_FILE, {"config": model.config}, {MODEL_FILE: model})
    data = (tmp_path / MODEL_FILE).read_bytes()
    assert len(data) > deliverables.MAX_FILE_BYTES
    deliverables.check_saved_pair(tmp_path, deliverables.PAIRS["phase8b"])
    ndims = {name: p.ndim for name, p in model.named_parameters()}
    assert len(ndims) > deliverables.MAX_NPZ_MEMBERS
    with pytest.raises(GradeError, match="a saved model has at most 64"):
        deliverables.load_npz(data, MODEL_FILE, ndims)
    arrays = deliverables.load_npz(data, MODEL_FILE, ndims, max_members=deliverables.CAPSTONE_NPZ_MEMBERS)
    assert arrays["blocks.5.proj.weight"].shape == (1536, 384) and "lm_head.weight" not in arrays
