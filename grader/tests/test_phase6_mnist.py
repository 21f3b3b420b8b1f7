"""Graded test of Phase 6's deliverable: the MNIST CNN the lab saved in the workspace.

The grader trusts nothing the notebook printed: it reads the saved parameters (mnist_model.npz) and the record
of how they were trained (mnist_model.json), rebuilds the course's network with its own float64 NumPy code (not
minitorch's), and scores it on the 10,000 test images of MNIST (checksummed). The bar depends on the
configuration that trained the model: the full one (a GPU) or the emulator's reduced one; on a GPU only the full
configuration counts.
"""

from __future__ import annotations

import math

import numpy as np

from grader import checks
from grader.checks import GradeError
from grader.tests.saved_models import load_saved_pair, require_open
from minitorch import backend

MODEL_FILE, RECORD_FILE = "mnist_model.npz", "mnist_model.json"
LAB_SECTION = '"The deliverable: reading handwritten digits" in labs/phase6_cnn.ipynb'
# The course's network, as the lab's nn.Sequential names its parameters (Linear weights stored (in, out)).
PARAMETERS = {"0.weight": (8, 1, 3, 3), "0.bias": (8,), "3.weight": (16, 8, 3, 3), "3.bias": (16,),
              "7.weight": (784, 64), "7.bias": (64,), "9.weight": (64, 10), "9.bias": (10,)}
FULL = {"epochs": 10, "train_images": 60_000}
REDUCED = {"epochs": 2, "train_images": 3_000}  # at least this much training for the reduced bar


def load_saved_model() -> tuple[dict, dict[str, np.ndarray]]:
    record, params = load_saved_pair(MODEL_FILE, RECORD_FILE, "MNIST model", LAB_SECTION,
                                     ("input_mean", "input_std", "full", "config"))
    check_parameters(params, MODEL_FILE)
    return record, params


def check_parameters(params: dict[str, np.ndarray], model_file: str) -> None:
    """GradeError unless ``params`` are the course's network's, every value finite."""
    wrong = [f"{name} {params[name].shape if name in params else 'missing'} (expected {shape})"
             for name, shape in PARAMETERS.items() if name not in params or params[name].shape != shape]
    if wrong:
        raise GradeError(f"{model_file} is not the course's network: {'; '.join(wrong)}. Build it exactly as the lab "
                         f"says (nn.Sequential of Conv2d(1, 8, 3, padding=1), ReLU, MaxPool2d(2), Conv2d(8, 16, 3, "
                         f"padding=1), ReLU, MaxPool2d(2), Flatten, Linear(784, 64), ReLU, Linear(64, 10))")
    if not all(np.all(np.isfinite(p)) for p in params.values()):
        raise GradeError(f"{model_file} holds NaN or infinite parameters: the training diverged")


def check_configuration(record: dict, record_file: str, section: str, full_config: dict, reduced_config: dict) -> bool:
    """Whether the record's model was trained in the full configuration (required on a GPU); GradeError if it
    trained less than its configuration asks or its standardisation is not finite."""
    full = bool(record["full"])
    config = record["config"]
    if backend.get_device() == "cuda" and not full:
        raise GradeError(f"the saved model was trained in the emulator's reduced configuration ({config}); on a GPU "
                         f"the lab trains the full one: run the section {section} there, then grade again")
    needed = full_config if full else reduced_config
    given = config if isinstance(config, dict) else {}
    short = [f"{k} {given.get(k)!r} (at least {v})" for k, v in needed.items()
             if not isinstance(given.get(k), int) or given[k] < v]
    if short:
        raise GradeError(f"{record_file}: the {'full' if full else 'reduced'} configuration trains with "
                         f"{', '.join(f'{k} {v}' for k, v in needed.items())}; the record says {', '.join(short)}")
    mean, std = record["input_mean"], record["input_std"]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (mean, std)) or std <= 0:
        raise GradeError(f"{record_file}: input_std must be positive and finite, input_mean finite; got {mean!r}, "
                         f"{std!r}")
    return full


def conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 3x3 convolution with padding 1 (cross-correlation, as every framework), float64."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    return np.einsum("nchwrs,kcrs->nkhw", windows, w, optimize=True) + b[None, :, None, None]


def pool2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def logits64(params: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
    """The network's logits for (N, 1, 28, 28) standardised images, in float64."""
    h = pool2(np.maximum(conv3x3(images, params["0.weight"], params["0.bias"]), 0.0))
    h = pool2(np.maximum(conv3x3(h, params["3.weight"], params["3.bias"]), 0.0))
    h = h.reshape(len(h), -1)  # (N, 16 * 7 * 7) in (channel, row, column) order, as nn.Flatten
    h = np.maximum(h @ params["7.weight"] + params["7.bias"], 0.0)
    return h @ params["9.weight"] + params["9.bias"]


def count_correct(params: dict[str, np.ndarray], record: dict) -> tuple[int, np.ndarray]:
    """(how many of the 10,000 test images the model classifies right, the images), by the float64 forward pass
    on the images standardised as the record says."""
    from minitorch import data

    mean, std = float(record["input_mean"]), float(record["input_std"])
    images, labels = data.load_mnist("test")
    correct = 0
    for i in range(0, len(images), 1000):
        x = ((images[i:i + 1000].astype(np.float64) / 255 - mean) / std)[:, None]
        correct += int(np.sum(np.argmax(logits64(params, x), axis=1) == labels[i:i + 1000]))
    return correct, images


def test_mnist_model_accuracy_on_the_test_set(record_property):
    require_open("mnist")  # the deliverable opens when Phase 5 has passed
    record, params = load_saved_model()
    full = check_configuration(record, RECORD_FILE, LAB_SECTION, FULL, REDUCED)
    correct, images = count_correct(params, record)
    accuracy = correct / len(images)
    key = "phase6.mnist_accuracy" + ("" if full else "_reduced")
    bar = checks.threshold(key)
    print(f"MNIST test accuracy of the saved model ({'full' if full else 'reduced'} configuration): "
          f"{accuracy:.2%} on {len(images):,} images")
    record_property("perf", {"name": "test accuracy (float64, the grader's own forward pass)", "unit": "fraction",
                             "measured": accuracy, "threshold": bar, "threshold_key": key, "direction": "at least",
                             "configuration": "full" if full else "reduced"})
    record_property("note", f"the saved model ({'full' if full else 'reduced'} configuration): {correct:,} of the "
                            f"{len(images):,} test images classified correctly ({accuracy:.2%}; at least {bar:.0%})")
    if accuracy < bar:
        claimed = record.get("test_accuracy")
        note = f" (the notebook reported {claimed:.2%})" if isinstance(claimed, float) else ""
        raise GradeError(f"the saved model classifies {accuracy:.2%} of the {len(images):,} test images correctly"
                         f"{note}; at least {bar:.2%} is needed ({key} in grader/thresholds.toml)")
