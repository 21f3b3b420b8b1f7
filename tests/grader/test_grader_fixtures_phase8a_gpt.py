"""Phase 8a's deliverable (Lab 7's GPT trained under bf16 autocast) is evaluated by the grader, not trusted: a missing
model names the lab's section, an untrained model whose record claims a good loss fails on the grader's own float64
loss, and a record that does not say bf16 autocast is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, results
from tests.grader.test_grader_fixtures_phase7 import DATA

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase8a_tensor_cores.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase8a_tensor_cores.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.skipif(not DATA.exists(), reason=f"Tiny Shakespeare is not in {DATA.parent}"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]
CHECK = "test_bf16_shakespeare_model_validation_loss"


def _grade(tmp_path: Path) -> dict:
    report = grade_workspace(tmp_path, "phase8a", {}, "--no-notebook", "-k", CHECK, timeout=120,
                             env_extra={"MINITORCH_DATA_DIR": str(DATA.parents[1])})
    [check] = results(report, CHECK)
    return check


def _saved_model(workspace: Path, **record_changes: object) -> None:
    """The reduced GPT with its initial (untrained) weights, saved as Lab 8a's cell saves one."""
    from minitorch import data, nn

    chars = sorted(set(DATA.read_text(encoding="utf-8")))
    model = nn.GPT(len(chars), 16, d_model=32, n_head=2, n_layer=1, device="cpu", seed=0)
    record = {"format": 1, "config": model.config, "chars": chars, "train_fraction": 0.9, "autocast": "bfloat16",
              "data_sha256": data.DATASETS["tinyshakespeare"][0].sha256, "configuration": "reduced",
              "val_loss": 1.2, **record_changes}  # a printed loss the grader must not believe
    nn.save_deliverable(workspace, "shakespeare_bf16_model.json", record, {"shakespeare_bf16_model.npz": model})


def test_without_a_saved_model_the_check_names_the_lab_section(tmp_path):
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and "no saved bf16 Shakespeare model" in check["reason"], check
    assert "The deliverable: Lab 7's GPT in bfloat16" in check["reason"], check


def test_an_untrained_model_fails_on_the_graders_own_loss(tmp_path):
    (tmp_path / "workspace").mkdir()
    _saved_model(tmp_path / "workspace")
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and "the validation loss of the bf16-trained model is" in check["reason"], check
    loss = float(check["reason"].split("the validation loss of the bf16-trained model is ")[1].split()[0])
    assert loss > 3.5, check
    assert "phase8a.shakespeare_bf16_val_loss_reduced" in check["reason"], check


@pytest.mark.parametrize("change, message", [
    ({"autocast": "float32"}, "autocast is 'float32'"),
    ({"config": {"vocab_size": 65, "block_size": 16, "d_model": 48, "n_head": 2, "n_layer": 1}},
     "the deliverable is Lab 7's GPT"),
])
def test_a_record_that_is_not_the_bf16_deliverable_is_refused(tmp_path, change, message):
    (tmp_path / "workspace").mkdir()
    _saved_model(tmp_path / "workspace", **change)
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and message in check["reason"], check


def test_lab7s_float32_model_saved_again_as_the_bf16_one_is_refused(tmp_path):
    """Lab 7's float32 deliverable saved again under the bf16 names: a bf16 run from the same seed and batches never
    ends on the same bits."""
    from minitorch import data, nn

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    chars = sorted(set(DATA.read_text(encoding="utf-8")))
    model = nn.GPT(len(chars), 16, d_model=32, n_head=2, n_layer=1, device="cpu", seed=0)
    record = {"format": 1, "config": model.config, "chars": chars, "train_fraction": 0.9,
              "data_sha256": data.DATASETS["tinyshakespeare"][0].sha256, "configuration": "reduced"}
    nn.save_deliverable(workspace, "shakespeare_model.json", record, {"shakespeare_model.npz": model})
    nn.save_deliverable(workspace, "shakespeare_bf16_model.json", dict(record, autocast="bfloat16"),
                        {"shakespeare_bf16_model.npz": model})
    check = _grade(tmp_path)
    assert check["result"] == "FAIL", check
    assert "shakespeare_bf16_model.npz holds exactly the parameters of shakespeare_model.npz" in check["reason"], check
