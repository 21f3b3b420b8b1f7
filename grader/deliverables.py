"""Deliverables the grader evaluates itself, from the saved model files only.

A deliverable is earned, not reported: the grader reads the parameters a lab saved into the
workspace and runs its own forward pass, in NumPy float64, on held-out data. The graded test of
the phase (inside `grader check`) calls this module; `grader grade-all` calls it again OUTSIDE the
sandbox, after every process of the submission is gone, so that verdict never rests on code that
shared a process with the learner's Python (which could have patched the graded test).

The files are untrusted input and are read as such: regular files only (a symbolic link is refused,
never followed), sizes limited before reading, the members of an ``.npz`` checked before anything
is decompressed, NumPy with ``allow_pickle=False`` (an object array, which would run code when
unpickled, is refused), floating-point arrays of the expected shapes only, and a JSON record whose
values must be plain numbers, strings and lists.

Registered deliverables (``OUTSIDE``): ``phase4`` -> the sales regression. Phases 6 and 7 add theirs
(MNIST, Tiny Shakespeare) the same way: a function ``workspace -> summary`` raising GradeError.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.checks import GradeError, threshold

MAX_FILE_BYTES = 16 << 20        # a saved model of the course is a few kB to a few MB
CAPSTONE_FILE_BYTES = 64 << 20   # Phase 8b's capstone: nanoGPT's 10.7 M parameters in float32, about 43 MB
CAPSTONE_NPZ_MEMBERS = 128       # its 6 blocks of 12 arrays and 5 more (77)
MAX_NPZ_MEMBERS = 64
MAX_ARRAY_BYTES = 64 << 20       # uncompressed, per array


# ---------------------------------------------------------------- reading untrusted files


def read_untrusted(directory: Path, name: str, limit: int | None = None) -> bytes:
    """The bytes of `directory/name`, a regular file of at most `limit` (MAX_FILE_BYTES) bytes, never
    a link."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        fd = os.open(Path(directory) / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:  # ELOOP: a symbolic link
        raise GradeError(f"{name} cannot be opened as a regular file ({os.strerror(err.errno)}): "
                         f"save the model with the lab's cell, not a link or a special file") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise GradeError(f"{name} is not a regular file")
        if info.st_nlink != 1:  # a hard link to another file is not a model the lab saved
            raise GradeError(f"{name} has {info.st_nlink} hard links; save the model with the lab's cell")
        if info.st_size > limit:
            raise GradeError(f"{name} holds {info.st_size:,} bytes, more than the {limit:,} a saved model "
                             f"of this course may have")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise GradeError(f"{name} grew past {limit:,} bytes while being read")
    return data


def load_npz(data: bytes, name: str, expected: dict[str, int], max_members: int = MAX_NPZ_MEMBERS
             ) -> dict[str, np.ndarray]:
    """The float64 arrays of an ``.npz`` (``expected``: array name -> number of dimensions; at most
    ``max_members`` arrays in the archive)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile as err:
        raise GradeError(f"{name} is not a NumPy .npz archive ({err}): save it with model.save(...)") from None
    if len(members) > max_members:
        raise GradeError(f"{name} holds {len(members)} files; a saved model has at most {max_members}")
    for member in members:  # sizes as declared, before any byte is decompressed
        if member.file_size > MAX_ARRAY_BYTES:
            raise GradeError(f"{name}: {member.filename} would decompress to {member.file_size:,} bytes, "
                             f"more than {MAX_ARRAY_BYTES:,}")
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            absent = [k for k in expected if k not in saved.files]
            if absent:
                raise GradeError(f"{name} lacks {', '.join(absent)} (it holds "
                                 f"{', '.join(sorted(saved.files)) or 'nothing'})")
            for key, ndim in expected.items():
                array = saved[key]
                if array.dtype.kind != "f" or array.ndim != ndim:
                    raise GradeError(f"{name}: {key} must be a {ndim}-D floating-point array, got "
                                     f"{array.dtype} of shape {array.shape}")
                if not np.all(np.isfinite(array)):
                    raise GradeError(f"{name}: {key} holds NaN or infinite values")
                arrays[key] = array.astype(np.float64)
    except GradeError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
        # ValueError: an object array refused by allow_pickle=False, a truncated .npy, ...
        raise GradeError(f"cannot read {name} ({type(err).__name__}: {err}); save it with model.save(...)") from None
    return arrays


def load_record(data: bytes, name: str) -> dict[str, Any]:
    """A JSON object of plain values (no NaN or infinity)."""
    def refuse_constant(value: str) -> float:
        raise ValueError(f"{value} is not a number JSON allows")

    try:
        record = json.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise GradeError(f"cannot read {name} ({err}); save it as the lab's deliverable cell does") from None
    if not isinstance(record, dict):
        raise GradeError(f"{name} must hold a JSON object, got {type(record).__name__}")
    return record


def _number(record: dict[str, Any], key: str, name: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GradeError(f"{name}: {key} must be a finite number, got {value!r}")
    return float(value)


def _vector(record: dict[str, Any], key: str, name: str, length: int) -> np.ndarray:
    value = record.get(key)
    if not (isinstance(value, list) and len(value) == length
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
        raise GradeError(f"{name}: {key} must be a list of {length} numbers")
    return np.asarray(value, np.float64)


def _names(record: dict[str, Any], key: str, name: str) -> list[str]:
    value = record.get(key)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise GradeError(f"{name}: {key} must be a list of names")
    return value


# ---------------------------------------------------------------- a model and its record: one run's pair

# The record key minitorch.nn.save_deliverable writes: {parameter file name: sha256 of its bytes}.
PARAMETERS_HASHES = "parameters_sha256"


@dataclass(frozen=True)
class SavedPair:
    """A deliverable's files: the JSON record and the parameter files it describes, saved by one cell."""
    record: str
    parameters: tuple[str, ...]
    section: str   # the lab's section whose last cell saves them
    limit: int = MAX_FILE_BYTES   # bytes a parameter file may hold


def check_pair(pair: SavedPair, record: dict[str, Any], files: dict[str, bytes]) -> None:
    """Refuse parameter files (name -> bytes, those present) that are not the ones `record` was saved with:
    a new run's model beside an older run's record (a run that stopped between the two writes) is graded
    as neither."""
    again = (f"Run the saving cell (the last of the section {pair.section}) again: it writes the model "
             f"and its record together, as one pair.")
    hashes = record.get(PARAMETERS_HASHES)
    if not (isinstance(hashes, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items())):
        raise GradeError(f"{pair.record} does not give the SHA-256 of the parameter files it describes "
                         f"({PARAMETERS_HASHES}): it was not written by the lab's saving cell "
                         f"(nn.save_deliverable), or by an older one, so nothing shows that "
                         f"{' and '.join(files) or 'the parameters'} come from the same run. {again}")
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        claimed = hashes.get(name)
        if claimed != digest:
            said = f"the record was saved with another {name} (sha256 {claimed[:12]}…)" if claimed else \
                f"the record does not name {name}"
            raise GradeError(f"{name} and {pair.record} come from two different runs: {said}, the file holds "
                             f"sha256 {digest[:12]}… (a run that stopped between saving the model and saving "
                             f"its record leaves such a pair). {again}")


def check_saved_pair(workspace: Path, pair: SavedPair) -> None:
    """`check_pair` on the files in `workspace`; nothing to say when the record is absent (the graded test
    names the missing files itself)."""
    try:
        record_bytes = read_untrusted(workspace, pair.record)
    except FileNotFoundError:
        return
    files = {}
    for name in pair.parameters:
        try:
            files[name] = read_untrusted(workspace, name, pair.limit)
        except FileNotFoundError:
            continue
    check_pair(pair, load_record(record_bytes, pair.record), files)


# ---------------------------------------------------------------- Phase 4: sales.tsv

SALES_MODEL, SALES_RECORD = "sales_model.npz", "sales_model.json"
SALES_LAB_SECTION = '"The deliverable: predicting sales" in labs/phase4_reductions.ipynb'
SALES_TRAIN_FRACTION = 0.8  # the first 80% of the sales train, the last 20% test (time order)
SALES_PARAMETERS = {"hidden.weight": 2, "hidden.bias": 1, "out.weight": 2, "out.bias": 1}
SALES_MAX_HIDDEN = 4096  # bounds the grader's own forward pass (memory) whatever the file claims
SALES_RECORD_KEYS = ("features", "log_features", "log_target", "feature_mean", "feature_std", "target_mean",
                     "target_std")


def load_sales_model(workspace: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The record (sales_model.json) and the parameters (sales_model.npz) saved in `workspace`."""
    try:
        model_bytes = read_untrusted(workspace, SALES_MODEL)
        record_bytes = read_untrusted(workspace, SALES_RECORD)
    except FileNotFoundError:
        missing = [n for n in (SALES_MODEL, SALES_RECORD) if not os.path.lexists(Path(workspace) / n)]
        raise GradeError(f"no saved sales model: {' and '.join(missing)} not found in your workspace "
                         f"({workspace}). Run the section {SALES_LAB_SECTION} to its end: it trains the model "
                         f"and saves both files there. Then grade again.") from None
    record = load_record(record_bytes, SALES_RECORD)
    absent = [k for k in SALES_RECORD_KEYS if k not in record]
    if absent:
        raise GradeError(f"{SALES_RECORD} lacks {', '.join(absent)}: save it as the lab's last deliverable "
                         f"cell does")
    params = load_npz(model_bytes, SALES_MODEL, SALES_PARAMETERS)
    check_pair(PAIRS["phase4"], record, {SALES_MODEL: model_bytes})  # both readable: one run's?
    return record, params


@functools.lru_cache(maxsize=2)
def _sales_features(path: str, digest: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """sales.tsv parsed once per content (grade-all evaluates every submission on the same file)."""
    from minitorch import data

    features, target, names = data.sales_features(data.load_sales(path))
    features.setflags(write=False)
    target.setflags(write=False)
    return features, target, list(names)


def sales_split(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(test features as the model sees them before normalising, test prices, training prices),
    in float64, from the course's sales.tsv (never from a file the submission names)."""
    _, x_test, price_train, price_test = sales_rows(record)
    return x_test, price_test, price_train


def sales_rows(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(training features, test features) as the model sees them before normalising, and (training
    prices, test prices), in float64 (Phase 5's deliverable trains on the training rows)."""
    from minitorch import data
    from minitorch.batches import train_test_split

    path = data.sales_path()
    if not path.exists():
        raise GradeError(f"{path} does not exist: run `make data` (or the lab's deliverable section), "
                         f"then grade again")
    digest = data.sha256_file(path)
    claimed = record.get("sales_sha256")
    if claimed not in (None, digest):
        raise GradeError(f"the saved model was trained on another sales.tsv (sha256 {str(claimed)[:12]}…) "
                         f"than {path} (sha256 {digest[:12]}…): run the deliverable section again")
    features, target, names = _sales_features(str(path), digest)
    if _names(record, "features", SALES_RECORD) != list(names):
        raise GradeError(f"{SALES_RECORD} names the features {record['features']}, but sales.tsv gives {names}")
    x = features.astype(np.float64)
    for name in _names(record, "log_features", SALES_RECORD):
        if name not in names:
            raise GradeError(f"{SALES_RECORD}: log feature {name!r} is not one of the features {names}")
        column = names.index(name)
        if np.any(x[:, column] <= 0):
            raise GradeError(f"{SALES_RECORD}: feature {name!r} has values <= 0, its logarithm is undefined")
        x[:, column] = np.log(x[:, column])
    x_train, x_test, price_train, price_test = train_test_split(x, target.astype(np.float64),
                                                                train_fraction=SALES_TRAIN_FRACTION)
    return x_train, x_test, price_train, price_test


def predict_prices(record: dict[str, Any], params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The saved model's predictions, in float64: normalise, Linear -> ReLU -> Linear, undo the
    target's scaling."""
    w1, b1, w2, b2 = (params[k] for k in SALES_PARAMETERS)
    n_features = x.shape[1]
    mean = _vector(record, "feature_mean", SALES_RECORD, n_features)
    std = _vector(record, "feature_std", SALES_RECORD, n_features)
    shapes_ok = (w1.shape[0] == n_features and 0 < w1.shape[1] <= SALES_MAX_HIDDEN
                 and b1.shape == (w1.shape[1],) and w2.shape == (w1.shape[1], 1) and b2.shape == (1,))
    if not shapes_ok:
        raise GradeError(f"the saved model does not fit {n_features} features: hidden.weight {w1.shape}, "
                         f"hidden.bias {b1.shape}, out.weight {w2.shape}, out.bias {b2.shape}; expected "
                         f"({n_features}, H), (H,), (H, 1), (1,) with 0 < H <= {SALES_MAX_HIDDEN}")
    if np.any(std <= 0) or not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise GradeError(f"{SALES_RECORD}: feature_std must be positive and finite, feature_mean finite")
    if not isinstance(record["log_target"], bool):
        raise GradeError(f"{SALES_RECORD}: log_target must be true or false, got {record['log_target']!r}")
    target_std = _number(record, "target_std", SALES_RECORD)
    target_mean = _number(record, "target_mean", SALES_RECORD)
    hidden = np.maximum(((x - mean) / std) @ w1 + b1, 0.0)
    z = (hidden @ w2 + b2)[:, 0] * target_std + target_mean
    with np.errstate(over="ignore"):
        return np.exp(z) if record["log_target"] else z


def evaluate_sales(workspace: Path) -> str:
    """Raise GradeError unless the saved sales model's test MAE is under the threshold times the
    mean predictor's; return a one-line summary."""
    record, params = load_sales_model(workspace)
    x_test, price_test, price_train = sales_split(record)
    predicted = predict_prices(record, params, x_test)
    if not np.all(np.isfinite(predicted)):
        raise GradeError(f"the saved model predicts {int((~np.isfinite(predicted)).sum())} non-finite prices on "
                         f"the test split (training diverged?)")
    mae = float(np.mean(np.abs(predicted - price_test)))
    baseline = float(np.mean(np.abs(price_test - price_train.mean())))
    limit = threshold("phase4.sales_mae_ratio")
    if not mae < limit * baseline:
        raise GradeError(f"test MAE of the saved model {mae:.3f} is {mae / baseline:.3f} x the mean predictor's "
                         f"{baseline:.3f}; less than {limit} x is needed (phase4.sales_mae_ratio in "
                         f"grader/thresholds.toml); evaluated on the {len(price_test):,} test sales")
    return f"test MAE {mae:.3f} = {mae / baseline:.3f} x the mean predictor's (< {limit} x needed)"


# ---------------------------------------------------------------- every deliverable's pair
# By phase; Phase 8a has two (its GPT, "phase8a", and its CNN, "phase8a_cnn").

PAIRS: dict[str, SavedPair] = {
    "phase4": SavedPair(SALES_RECORD, (SALES_MODEL,), SALES_LAB_SECTION),
    "phase5": SavedPair("sales_optim.json", ("sales_start.npz", "sales_sgd.npz", "sales_adam.npz",
                                             "sales_adam_at_sgd_loss.npz"),
                        '"The deliverable: SGD against Adam, from one initialisation" in labs/phase5_fast.ipynb'),
    "phase6": SavedPair("mnist_model.json", ("mnist_model.npz",),
                        '"The deliverable: reading handwritten digits" in labs/phase6_cnn.ipynb'),
    "phase7": SavedPair("shakespeare_model.json", ("shakespeare_model.npz",),
                        '"The deliverable: a character-level GPT on Tiny Shakespeare" in labs/phase7_gpt.ipynb'),
    "phase8a": SavedPair("shakespeare_bf16_model.json", ("shakespeare_bf16_model.npz",),
                         '"The deliverable: Lab 7\'s GPT in bfloat16" in labs/phase8a_tensor_cores.ipynb'),
    "phase8a_cnn": SavedPair("mnist_bf16_model.json", ("mnist_bf16_model.npz",),
                             '"The deliverable: Lab 6\'s CNN in bfloat16" in labs/phase8a_tensor_cores.ipynb'),
    "phase8b": SavedPair("nanogpt_model.json", ("nanogpt_model.npz",),
                         '"The capstone: nanoGPT\'s Shakespeare model on your kernels" in labs/phase8b_flash.ipynb',
                         limit=CAPSTONE_FILE_BYTES),
}
# The graded tests that read a pair (grader/tests/conftest.py checks it before they run; Phase 4's
# evaluation checks its own, inside and outside the sandbox).
READ_BY: dict[str, str] = {
    "test_phase5_training.py::test_sales_sequential_models_pass_phase4_mae_bar": "phase5",
    "test_phase5_training.py::test_adam_reaches_sgd_final_loss_in_fewer_epochs": "phase5",
    "test_phase5_training.py::test_deliverable_starts_from_your_initialisation": "phase5",
    "test_phase6_mnist.py::test_mnist_model_accuracy_on_the_test_set": "phase6",
    "test_phase7_gpt.py::test_shakespeare_model_validation_loss": "phase7",
    "test_phase8a_gpt.py::test_bf16_shakespeare_model_validation_loss": "phase8a",
    "test_phase8a_cnn.py::test_bf16_mnist_model_accuracy_on_the_test_set": "phase8a_cnn",
    "test_phase8b_capstone.py::test_capstone_validation_loss": "phase8b",
}


# ---------------------------------------------------------------- grade-all: outside the sandbox

# phase -> (deliverable, evaluation from the workspace's saved files)
OUTSIDE: dict[str, tuple[str, Callable[[Path], str]]] = {"phase4": ("sales", evaluate_sales)}


@dataclass(frozen=True)
class Verdict:
    deliverable: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"{self.deliverable}: {'PASS' if self.passed else 'FAIL'}: {self.message}"


def verify(phase: str, workspace: Path) -> Verdict | None:
    """The grader's own verdict on the phase's deliverable (None if the phase has none evaluated from
    files). Whatever the files hold, this returns: any failure to read or evaluate them is a FAIL."""
    if phase not in OUTSIDE:
        return None
    name, evaluate = OUTSIDE[phase]
    try:
        return Verdict(name, True, evaluate(Path(workspace)))
    except GradeError as err:
        return Verdict(name, False, str(err))
    except Exception as err:  # noqa: BLE001 - untrusted files: anything they provoke is a failed deliverable
        return Verdict(name, False, f"the saved files cannot be evaluated ({type(err).__name__}: {err})")
