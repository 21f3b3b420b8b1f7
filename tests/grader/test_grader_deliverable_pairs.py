"""A saved model and its record come from one run, or the grader refuses them.

After a notebook run that failed between saving the parameters and saving the record, Phase 6 graded a
new ``mnist_model.npz`` against an older ``mnist_model.json`` ("the saved model classifies 11.36% ... the
notebook reported 85.30%"). ``minitorch.nn.save_deliverable`` now writes every file of a deliverable under a
temporary name, names each parameter file's SHA-256 in the record and renames them into place; the grader
refuses a pair whose hashes disagree, or a record that does not give them, and says to run the saving cell
again. The same for every deliverable (grader/deliverables.py: PAIRS).
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from grader import deliverables
from grader.checks import GradeError
from minitorch import nn
from minitorch.nn import deliverable as saving

REPO = Path(__file__).resolve().parents[2]


def _linear(seed: int) -> nn.Linear:
    return nn.Linear(3, 2, seed=seed)


def test_the_pair_is_written_together_and_names_the_model_bytes(tmp_path):
    model = _linear(0)
    written = nn.save_deliverable(tmp_path, "m.json", {"format": 1, "loss": 0.5}, {"m.npz": model})
    on_disk = json.loads((tmp_path / "m.json").read_text())
    assert on_disk == written and on_disk["loss"] == 0.5
    assert on_disk[deliverables.PARAMETERS_HASHES] == {"m.npz": hashlib.sha256((tmp_path / "m.npz").read_bytes())
                                                        .hexdigest()}
    with np.load(tmp_path / "m.npz") as saved:   # what Module.save writes, loadable by Module.load
        assert sorted(saved.files) == sorted(model.state_dict())
        np.testing.assert_array_equal(saved["weight"], model.state_dict()["weight"])
    assert _linear(1).load(tmp_path / "m.npz").state_dict()["weight"].tolist() == model.weight.numpy().tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.npz"]   # no temporary file left
    assert saving.HASHES_KEY == deliverables.PARAMETERS_HASHES   # the helper and the grader agree


def test_a_save_that_fails_midway_leaves_the_old_pair_untouched(tmp_path):
    nn.save_deliverable(tmp_path, "m.json", {"run": 1}, {"m.npz": _linear(0)})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    class Broken:
        def state_dict(self):
            raise RuntimeError("the run stopped here")

    with pytest.raises(RuntimeError, match="stopped"):
        nn.save_deliverable(tmp_path, "m.json", {"run": 2}, {"m.npz": _linear(1), "n.npz": Broken()})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("record_name, files, message", [
    ("../m.json", {"m.npz": {}}, "must be a file name"),
    ("m.json", {"sub/m.npz": {}}, "must be a file name"),
    ("m.txt", {"m.npz": {}}, "must end in .json"),
    ("m.json", {"m.pt": {}}, "must end in .npz"),
])
def test_the_helper_refuses_bad_names(tmp_path, record_name, files, message):
    with pytest.raises(ValueError, match=message):
        nn.save_deliverable(tmp_path, record_name, {}, files)
    with pytest.raises(ValueError, match="written by save_deliverable"):
        nn.save_deliverable(tmp_path, "m.json", {deliverables.PARAMETERS_HASHES: {}}, {"m.npz": {}})


PAIR = deliverables.SavedPair("m.json", ("m.npz", "extra.npz"), '"The deliverable" in labs/x.ipynb')


def test_the_grader_refuses_a_model_of_another_run(tmp_path):
    """The reported failure: the notebook's new run saved the model, then stopped before the record."""
    nn.save_deliverable(tmp_path, "m.json", {"run": "old"}, {"m.npz": _linear(0)})
    deliverables.check_saved_pair(tmp_path, PAIR)   # one run's pair: accepted
    _linear(1).save(tmp_path / "m.npz")              # the new run's parameters, the record still the old one's
    with pytest.raises(GradeError, match=r"m.npz and m.json come from two different runs: the record was saved "
                                         r"with another m.npz .* Run the saving cell .*again"):
        deliverables.check_saved_pair(tmp_path, PAIR)


def test_the_grader_refuses_a_file_the_record_does_not_name_and_a_record_without_hashes(tmp_path):
    nn.save_deliverable(tmp_path, "m.json", {"run": 1}, {"m.npz": _linear(0)})
    np.savez(tmp_path / "extra.npz", w=np.zeros(2))   # left by an older run, not saved with this record
    with pytest.raises(GradeError, match="the record does not name extra.npz"):
        deliverables.check_saved_pair(tmp_path, PAIR)
    (tmp_path / "extra.npz").unlink()
    (tmp_path / "m.json").write_text(json.dumps({"run": 1}))   # as the lab's cell wrote it before
    with pytest.raises(GradeError, match=r"does not give the SHA-256 .*parameters_sha256.*Run the saving cell"):
        deliverables.check_saved_pair(tmp_path, PAIR)
    (tmp_path / "m.json").unlink()
    deliverables.check_saved_pair(tmp_path, PAIR)   # no record: the graded test names the missing files


def test_phase4_evaluation_refuses_a_mismatched_pair_inside_and_outside(tmp_path):
    arrays = {"hidden.weight": np.ones((2, 3)), "hidden.bias": np.zeros(3), "out.weight": np.ones((3, 1)),
              "out.bias": np.zeros(1)}
    record = dict.fromkeys(deliverables.SALES_RECORD_KEYS, 0)
    nn.save_deliverable(tmp_path, deliverables.SALES_RECORD, record, {deliverables.SALES_MODEL: arrays})
    deliverables.load_sales_model(tmp_path)
    np.savez(tmp_path / deliverables.SALES_MODEL, **{**arrays, "out.bias": np.ones(1)})
    with pytest.raises(GradeError, match="come from two different runs"):
        deliverables.load_sales_model(tmp_path)
    verdict = deliverables.verify("phase4", tmp_path)
    assert not verdict.passed and "Run the saving cell" in verdict.message, verdict


def _module_constants(path: Path) -> dict[str, object]:
    tree = ast.parse(path.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            for target in node.targets:
                for name in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(name, ast.Name):
                        out[name.id] = value if not isinstance(target, ast.Tuple) else value[target.elts.index(name)]
    return out


def test_every_deliverable_pair_is_checked_by_the_tests_that_read_it():
    """The registry names graded tests that exist, files their modules read, and the saving cells of the
    solutions write those pairs with the helper."""
    tests_dir = REPO / "grader" / "tests"
    for key, phase in deliverables.READ_BY.items():
        module, function = key.split("::")
        tree = ast.parse((tests_dir / module).read_text())
        assert function in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, key
        constants = _module_constants(tests_dir / module)
        pair = deliverables.PAIRS[phase]
        read = {v for k, v in constants.items() if k in ("MODEL_FILE", "RECORD_FILE", "RECORD")}
        read |= set(constants.get("MODELS", {}).values())
        assert read == {pair.record, *pair.parameters}, (key, read)
        assert constants.get("LAB_SECTION") == pair.section, key
    assert set(deliverables.READ_BY.values()) | {"phase4"} == set(deliverables.PAIRS)
    notebooks = {"phase4": "phase4_reductions", "phase5": "phase5_fast", "phase6": "phase6_cnn", "phase7": "phase7_gpt",
                 "phase8a": "phase8a_tensor_cores", "phase8a_cnn": "phase8a_tensor_cores", "phase8b": "phase8b_flash"}
    for phase, pair in deliverables.PAIRS.items():
        cells = ["".join(c["source"]) for c in json.loads((REPO / "solutions" / f"{notebooks[phase]}.ipynb")
                                                           .read_text())["cells"] if c["cell_type"] == "code"]
        saving = [c for c in cells if f'save_deliverable(workspace, "{pair.record}"' in c]
        assert len(saving) == 1, phase
        assert all(f'"{name}"' in saving[0] for name in pair.parameters), phase
        assert not any(".save(workspace" in c or "np.savez(workspace" in c for c in cells), phase
