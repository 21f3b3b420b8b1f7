"""Phase 8a's second deliverable (Lab 6's CNN trained under bf16 autocast) is evaluated by the grader, not trusted: a
missing model names the lab's section; an untrained model whose record claims 99% fails on the grader's own float64
accuracy; a record that does not say bf16 autocast, Phase 6's float32 model saved again under the bf16 name, and a
parameter file from another run than its record are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase8a_tensor_cores.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase8a_tensor_cores.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]
CHECK = "test_bf16_mnist_model_accuracy_on_the_test_set"
SHAPES = {"0.weight": (8, 1, 3, 3), "0.bias": (8,), "3.weight": (16, 8, 3, 3), "3.bias": (16,),
          "7.weight": (784, 64), "7.bias": (64,), "9.weight": (64, 10), "9.bias": (10,)}
RECORD = {"format": 1, "input_mean": 0.1307, "input_std": 0.3081, "full": False, "autocast": "bfloat16",
          "config": {"epochs": 1, "train_images": 1280, "test_images": 500}, "test_accuracy": 0.99}


def _untrained(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-0.1, 0.1, s).astype(np.float32) for k, s in SHAPES.items()}


def _grade(tmp_path: Path) -> dict:
    report = grade_workspace(tmp_path, "phase8a", {}, "--no-notebook", "-k", CHECK, timeout=120)
    [check] = results(report, CHECK)
    return check


def _save(tmp_path: Path, params: dict[str, np.ndarray], record_file: str = "mnist_bf16_model.json",
          model_file: str = "mnist_bf16_model.npz", **record_changes: object) -> Path:
    from minitorch.nn import save_deliverable

    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    save_deliverable(workspace, record_file, {**RECORD, **record_changes}, {model_file: params})
    return workspace


def test_without_a_saved_model_the_check_names_the_lab_section(tmp_path):
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and "no saved bf16 MNIST model" in check["reason"], check
    assert "The deliverable: Lab 6's CNN in bfloat16" in check["reason"], check


def test_an_untrained_model_reporting_99_percent_fails_on_the_graders_own_accuracy(tmp_path):
    _save(tmp_path, _untrained())
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and "the bf16-trained model classifies" in check["reason"], check
    assert "the notebook reported 99.00% on its sample" in check["reason"], check
    assert "phase8a.mnist_bf16_accuracy_reduced" in check["reason"], check


def test_a_record_of_float32_training_is_refused(tmp_path):
    _save(tmp_path, _untrained(), autocast="float32")
    check = _grade(tmp_path)
    assert check["result"] == "FAIL" and "autocast is 'float32'" in check["reason"], check


def test_phase6s_float32_model_saved_again_as_the_bf16_one_is_refused(tmp_path):
    """The float32 deliverable of Lab 6, relabelled: the bf16 run from the same seed and batches never ends on the
    same bits."""
    params = _untrained(3)
    _save(tmp_path, params, "mnist_model.json", "mnist_model.npz", autocast=None)
    _save(tmp_path, params)
    check = _grade(tmp_path)
    assert check["result"] == "FAIL", check
    assert "mnist_bf16_model.npz holds exactly the parameters of mnist_model.npz" in check["reason"], check


def test_a_parameter_file_of_another_run_than_its_record_is_refused(tmp_path):
    """The record names the parameters' SHA-256: a model file written over by another run (a better model saved
    beside the record of a worse one, or the other way round) is not graded."""
    workspace = _save(tmp_path, _untrained(0))
    np.savez(workspace / "mnist_bf16_model.npz", **_untrained(1))
    check = _grade(tmp_path)
    assert check["result"] == "FAIL", check
    assert "mnist_bf16_model.npz and mnist_bf16_model.json come from two different runs" in check["reason"], check
    assert "the notebook reported" not in check["reason"], check
