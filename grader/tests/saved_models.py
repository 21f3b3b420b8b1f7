"""Reading a deliverable the lab saved (not a test module): a parameter file (``.npz``) and its record (``.json``)
from the learner's workspace, as untrusted files, for the graded tests of Phases 6 to 8a.

Every message says what is wrong and which section of which lab saves the pair again. That the two files come from
one run (the record names the parameter file's SHA-256) is checked before these tests run (grader/tests/conftest.py,
``grader.deliverables.PAIRS``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from grader.checks import GradeError
from minitorch import kernels


def require_open(dataset: str) -> None:
    """GradeError when the deliverable's dataset is still locked (``grader.require``: MNIST opens when Phase 5 has
    passed); grading the reference solutions lifts the gates, with nothing to say about it."""
    import grader

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grader.require(dataset)
    except grader.PhaseLocked as locked:
        raise GradeError(str(locked)) from None


def load_saved_pair(model_file: str, record_file: str, what: str, section: str, keys: tuple[str, ...],
                    trains: str = "trains the model") -> tuple[dict, dict[str, np.ndarray]]:
    """(the record, every parameter as float64) of the pair in the workspace; GradeError naming ``section`` when a
    file is missing or unreadable, the record is not a JSON object or lacks one of ``keys``."""
    workspace = kernels.workspace_dir()
    model_path, record_path = workspace / model_file, workspace / record_file
    missing = [p.name for p in (model_path, record_path) if not p.exists()]
    if missing:
        raise GradeError(f"no saved {what}: {' and '.join(missing)} not found in your workspace ({workspace}). "
                         f"Run the section {section} to its end: it {trains} and saves both files there. Then "
                         f"grade again.")
    try:
        record = json.loads(record_path.read_text())
        params = read_parameters(model_path)
    except (ValueError, OSError) as exc:
        raise GradeError(f"cannot read the saved model ({exc}); run the section {section} again") from exc
    if not isinstance(record, dict):
        raise GradeError(f"{record_file} must hold a JSON object; run the section {section} again")
    absent = [k for k in keys if k not in record]
    if absent:
        raise GradeError(f"{record_file} lacks {', '.join(absent)}: save it as the lab's last deliverable cell does")
    return record, params


def read_parameters(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file as float64 (no pickled objects: the file is untrusted)."""
    with np.load(path, allow_pickle=False) as saved:
        return {name: saved[name].astype(np.float64) for name in saved.files}


def refuse_a_copy(params: dict[str, np.ndarray], model_file: str, earlier_file: str, earlier_lab: str) -> None:
    """GradeError if the workspace's ``earlier_file`` (the float32 deliverable of ``earlier_lab``) holds the same
    parameters bit for bit: a model trained again under bf16 autocast, from the same seed and batches, ends with
    other float32 weights (its products round their operands); an equal file is the float32 model saved again."""
    path = kernels.workspace_dir() / earlier_file
    if not path.exists():
        return
    try:
        earlier = read_parameters(path)
    except (ValueError, OSError):
        return  # not this test's file to judge
    if earlier.keys() == params.keys() and all(np.array_equal(earlier[k], params[k]) for k in params):
        raise GradeError(f"{model_file} holds exactly the parameters of {earlier_file}, {earlier_lab}'s float32 "
                         f"model: the deliverable is the model trained again with every step under "
                         f"amp.autocast('bfloat16'), whose weights differ from the float32 run's")
