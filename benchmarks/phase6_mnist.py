"""Phase 6 deliverable benchmark: the MNIST CNN trained by minitorch against PyTorch, for the chapter.

Trains the lab's network with the lab's recipe (solutions/phase6_cnn.ipynb, "The deliverable"): the course's
CNN, Adam with a learning rate of 2e-3 decayed along a cosine epoch by epoch, every training image moved by up
to a pixel each epoch (``data.random_shift``), batches of 64, the step captured into a graph each epoch and
replayed for every batch) on the reference solution files, and PyTorch's own modules eagerly (the way most
PyTorch code runs) with the same initial weights (copied from minitorch's), the same batches of the same moved
images in the same order and the same learning rates. Writes ``benchmarks/results/phase6_mnist-<gpu>.json``,
rows by ``kind``:

- ``epoch``: ``framework`` (``minitorch`` or ``pytorch``), ``recipe`` (``cosine_shift``, the lab's;
  ``constant``: plain Adam at 1e-3 on the images as they are, minitorch only, for comparison; see ``RECIPES``),
  epoch, learning rate, training loss, accuracy on the 10,000 test images, and ``seconds``: the epoch's
  training time (batches gathered on the host, copied, one step each; moving the images and the scoring after
  the epoch are not counted);
- ``summary``: final accuracy, the median epoch time, and for minitorch the kernels one replay launches and
  its ratio to each PyTorch run: eager (``framework: "pytorch"``), captured in a CUDA graph
  (``"pytorch_graph"``) and through torch.compile (``"pytorch_compile"``), as ``benchmarks/torch_race.py``
  runs them, each warmed by one short epoch first; a way that cannot run here is a ``kind: "skipped"`` row;
- ``eager_epoch``: one epoch of minitorch without the graph (every launch from Python);
- ``confusion``, ``mistakes`` (test images the model gets wrong, as uint8 pixels), ``filters`` (the first
  layer's 8 filters) and ``progress`` (the progress bar's last line): what the chapter's figures draw.

``--small`` trains a few steps on the emulator and PyTorch on the CPU, to run every line without a GPU; it writes
to ``--out`` (default: a temporary directory). ``--calibrate 0,1,2`` trains the lab's reduced configuration (the
emulator's) from those seeds and writes ``phase6_mnist_reduced-<device>.json``: the calibration of its bar.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import RESULTS, emulator_name, gpu_name, solution_sources, write_results

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn")
# The lab's settings.
FULL = dict(epochs=10, train_images=60_000, test_images=10_000)
SMALL = dict(epochs=2, train_images=640, test_images=500)
REDUCED = dict(epochs=2, train_images=3_000, test_images=10_000)  # the lab's emulator configuration
BATCH, LEARNING_RATE, SEED, MAX_SHIFT = 64, 2e-3, 0, 1
CONSTANT_RATE = 1e-3
# recipe -> (learning rate: "constant" at CONSTANT_RATE or "cosine" from LEARNING_RATE, pixels images move by)
RECIPES = {"constant": ("constant", 0), "cosine": ("cosine", 0), "cosine_shift": ("cosine", MAX_SHIFT)}
LAB_RECIPE = "cosine_shift"


def learning_rate(recipe: str, epoch: int, epochs: int) -> float:
    if RECIPES[recipe][0] == "constant":
        return CONSTANT_RATE
    return LEARNING_RATE * 0.5 * (1 + math.cos(math.pi * epoch / epochs))


def epoch_images(arrays: dict, recipe: str, epoch: int) -> np.ndarray:
    """The standardised training images of one epoch: moved by up to ``RECIPES[recipe][1]`` pixels (drawn from
    the seed and the epoch, so both frameworks see the same images), or as they are."""
    from minitorch import data

    shift = RECIPES[recipe][1]
    if not shift:
        return arrays["x_train"]
    moved = data.random_shift(arrays["train_u8"], np.random.default_rng([arrays["seed"], epoch]), shift)
    return arrays["standardise"](moved)


def load(config: dict, seed: int = SEED) -> dict:
    from minitorch import data

    train_images, train_labels = data.load_mnist("train")
    test_images, test_labels = data.load_mnist("test")
    mean, std = float(train_images.mean() / 255), float(train_images.std() / 255)

    def standardise(images: np.ndarray) -> np.ndarray:
        return ((images.astype(np.float32) / 255 - mean) / std)[:, None]

    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(train_images), config["train_images"], replace=False))
    n_test = config["test_images"]
    return {"x_train": standardise(train_images[chosen]), "y_train": train_labels[chosen].astype(np.int64),
            "train_u8": train_images[chosen], "standardise": standardise, "seed": seed,
            "x_test": standardise(test_images[:n_test]), "y_test": test_labels[:n_test].astype(np.int64),
            "test_images": test_images[:n_test], "mean": mean, "std": std,
            # every epoch's order, drawn once: both frameworks see the same batches
            "orders": [rng.permutation(len(chosen)) for _ in range(config["epochs"])]}


def mnist_cnn(seed: int = SEED):
    from minitorch import nn

    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, seed=seed), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, seed=seed + 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(784, 64, seed=seed + 2), nn.ReLU(), nn.Linear(64, 10, seed=seed + 3))


def train_minitorch(arrays: dict, config: dict, recipe: str, seed: int = SEED) -> tuple[list[dict], dict, object]:
    """The lab's loop: the step captured each epoch, the batch copied into its static inputs, one replay each."""
    import minitorch
    from minitorch import backend, graph, optim
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)
    from minitorch.progress import progress

    model = mnist_cnn(seed)
    optimizer = optim.Adam(model.parameters(), lr=LEARNING_RATE)
    x_batch = minitorch.zeros((BATCH, 1, 28, 28))
    y_batch = F.class_indices(np.zeros(BATCH, np.int64))
    loss_sum = minitorch.zeros(())

    def train_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x_batch), y_batch)
        loss.backward()
        optimizer.step()
        loss_sum.copy_(loss_sum + loss.detach())

    y_train = arrays["y_train"].astype(np.int32)
    steps, epochs = len(arrays["orders"][0]) // BATCH, config["epochs"]
    history, launches = [], 0
    text = io.StringIO()  # the bar's output: its last line goes to the chapter
    bar = progress(range(epochs * steps), desc="MNIST", unit="step", file=text, min_interval=0.5, width=88)
    for epoch, order in enumerate(arrays["orders"]):
        optimizer.lr = learning_rate(recipe, epoch, epochs)
        x_train = epoch_images(arrays, recipe, epoch)
        backend.synchronize()
        start = time.perf_counter()
        step = graph.capture(train_step)
        loss_sum.fill_(0.0)
        for i in range(steps):
            chosen = order[i * BATCH:(i + 1) * BATCH]
            x_batch.copy_from(x_train[chosen])
            y_batch.copy_from(y_train[chosen])
            step.replay()
            bar.update()
        backend.synchronize()
        seconds = time.perf_counter() - start
        launches = step.launches
        train_loss = loss_sum.item() / steps
        accuracy = float(np.mean(predict_minitorch(model, arrays["x_test"]) == arrays["y_test"]))
        history.append({"kind": "epoch", "framework": "minitorch", "recipe": recipe, "epoch": epoch + 1,
                        "lr": optimizer.lr, "train_loss": train_loss, "test_accuracy": accuracy, "seconds": seconds})
        bar.write(f"epoch {epoch + 1:2d}  lr {optimizer.lr:.2e}  loss {train_loss:.4f}  test accuracy {accuracy:.2%}")
        print(f"minitorch {recipe} epoch {epoch + 1}: loss {train_loss:.4f}, accuracy {accuracy:.2%}, "
              f"{seconds:.2f} s", flush=True)
    bar.close()
    last_line = [line for line in text.getvalue().replace("\r", "\n").splitlines() if line.startswith("MNIST")][-1]
    summary = {"kind": "summary", "framework": "minitorch", "recipe": recipe,
               "test_accuracy": history[-1]["test_accuracy"],
               "epoch_seconds": statistics.median(h["seconds"] for h in history), "launches_per_step": launches,
               "steps_per_epoch": steps, "progress": last_line}
    return history, summary, model


def predict_minitorch(model, images: np.ndarray) -> np.ndarray:
    import minitorch

    out = []
    with minitorch.no_grad():
        for i in range(0, len(images), 1000):
            out.append(np.argmax(model(minitorch.tensor(np.ascontiguousarray(images[i:i + 1000]))).numpy(), axis=1))
    return np.concatenate(out)


def eager_epoch(arrays: dict) -> dict:
    """One epoch of minitorch without a graph: each of the step's launches made from Python."""
    import minitorch
    from minitorch import backend, optim
    from minitorch import functional as F  # noqa: N812

    model = mnist_cnn()
    optimizer = optim.Adam(model.parameters(), lr=LEARNING_RATE)
    x_train, y_train = arrays["x_train"], arrays["y_train"]
    order = arrays["orders"][0]
    steps = len(order) // BATCH
    backend.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        chosen = order[i * BATCH:(i + 1) * BATCH]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(minitorch.tensor(x_train[chosen])), y_train[chosen])
        loss.backward()
        optimizer.step()
    backend.synchronize()
    seconds = time.perf_counter() - start
    print(f"minitorch without the graph: one epoch in {seconds:.2f} s", flush=True)
    return {"kind": "eager_epoch", "framework": "minitorch", "seconds": seconds, "steps": steps}


def train_pytorch(arrays: dict, config: dict, gpu: bool, recipe: str = LAB_RECIPE,
                  mode: str = "eager") -> tuple[list[dict], dict]:
    """PyTorch: the same network from the same initial weights, the same batches and learning rates; ``mode``
    as ``torch_race`` runs it: eager, captured in a CUDA graph (a capturable Adam; captured again every epoch
    at its learning rate, as minitorch's step is) or through torch.compile."""
    import torch
    import torch_race

    dev = "cuda" if gpu else "cpu"
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(dev)
    with torch.no_grad():
        for p, t in zip(mnist_cnn().parameters(), net.parameters(), strict=True):
            value = p.numpy().T if p.ndim == 2 else p.numpy()  # minitorch's Linear is (in, out)
            t.copy_(torch.from_numpy(np.ascontiguousarray(value)))
    adam = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE, capturable=mode == "graph")
    y_train = arrays["y_train"]
    x_test = torch.from_numpy(arrays["x_test"]).to(dev)
    steps, epochs = len(arrays["orders"][0]) // BATCH, config["epochs"]

    def set_rate(epoch: int) -> None:
        for group in adam.param_groups:
            group["lr"] = learning_rate(recipe, epoch, epochs)

    def batches(epoch: int):
        x_train, order = epoch_images(arrays, recipe, epoch), arrays["orders"][epoch]
        for i in range(steps):
            chosen = order[i * BATCH:(i + 1) * BATCH]
            yield np.ascontiguousarray(x_train[chosen]), y_train[chosen]

    def evaluate(epoch: int, model, loss_sum: float) -> dict:
        with torch.no_grad():
            predicted = torch.cat([model(x_test[i:i + 1000]).argmax(dim=1) for i in range(0, len(x_test), 1000)])
        accuracy = float((predicted.cpu().numpy() == arrays["y_test"]).mean())
        print(f"pytorch {mode} epoch {epoch + 1}: accuracy {accuracy:.2%}", flush=True)
        return {"kind": "epoch", "recipe": recipe, "lr": adam.param_groups[0]["lr"], "train_loss": loss_sum / steps,
                "test_accuracy": accuracy}

    history, summary = torch_race.train(mode, net, adam, torch.nn.functional.cross_entropy, epochs, dev, batches,
                                        after_epoch=evaluate, before_epoch=set_rate, recapture_each_epoch=True)
    summary.update(kind="summary", recipe=recipe, test_accuracy=history[-1]["test_accuracy"])
    return history, summary


def figures(model, arrays: dict) -> list[dict]:
    """What the chapter draws: the confusion matrix, some mistakes, the first layer's filters."""
    predicted = predict_minitorch(model, arrays["x_test"])
    labels = arrays["y_test"]
    confusion = np.zeros((10, 10), np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    wrong = np.flatnonzero(predicted != labels)[:24]
    return [{"kind": "confusion", "matrix": confusion.tolist()},
            {"kind": "mistakes", "index": wrong.tolist(), "label": labels[wrong].tolist(),
             "predicted": predicted[wrong].tolist(), "pixels": arrays["test_images"][wrong].tolist()},
            {"kind": "filters", "weights": np.round(model[0].weight.numpy()[:, 0], 5).tolist()}]


def calibrate(seeds: list[int], out: Path | None) -> int:
    """The lab's reduced configuration (the emulator's) from several seeds, scored on all 10,000 test images as
    the grader scores it: the data behind ``phase6.mnist_accuracy_reduced`` in grader/thresholds.toml."""
    import minitorch

    device = minitorch.get_device()
    rows = []
    for seed in seeds:
        arrays = load(REDUCED, seed)
        start = time.perf_counter()
        monitor = {**arrays, "x_test": arrays["x_test"][:1000], "y_test": arrays["y_test"][:1000]}  # as the lab
        history, _, model = train_minitorch(monitor, REDUCED, LAB_RECIPE, seed)
        accuracy = float(np.mean(predict_minitorch(model, arrays["x_test"]) == arrays["y_test"]))
        rows.append({"kind": "reduced", "seed": seed, "test_accuracy": accuracy, "history": history,
                     "seconds": time.perf_counter() - start})
        print(f"reduced configuration, seed {seed}: test accuracy {accuracy:.2%}", flush=True)
    import common

    if out is not None:
        common.RESULTS = out
    write_results("phase6_mnist_reduced", emulator_name() if device == "emu" else gpu_name(), rows,
                  config=REDUCED, batch_size=BATCH, learning_rate=LEARNING_RATE, recipe=LAB_RECIPE,
                  max_shift=MAX_SHIFT)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="a few steps on the emulator, PyTorch on the CPU")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results; a temporary one with "
                                      "--small)")
    parser.add_argument("--calibrate", metavar="SEEDS", help="train the lab's reduced configuration on the "
                        "emulator from these seeds (e.g. 0,1,2) and write phase6_mnist_reduced-<device>.json")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase6"
    import minitorch
    from minitorch.kernels import write_source

    gpu = not (args.small or args.calibrate)
    minitorch.set_device("cuda" if gpu else "emu")
    for lab in LABS:
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    if args.calibrate:
        return calibrate([int(s) for s in args.calibrate.split(",")], Path(args.out) if args.out else None)
    config = FULL if gpu else SMALL
    device = gpu_name() if gpu else emulator_name()
    print(f"device: {device}; configuration {config}", flush=True)
    arrays = load(config)
    warm = {**arrays, "orders": [arrays["orders"][0][:3 * BATCH]]}  # compile every kernel before timing
    train_minitorch(warm, {**config, "epochs": 1}, LAB_RECIPE)
    rows, summaries = [], []
    history, summary, model = train_minitorch(arrays, config, LAB_RECIPE)
    rows += history
    summaries.append(summary)
    rows += figures(model, arrays)
    history, summary, _ = train_minitorch(arrays, config, "constant")
    rows += history
    summaries.append(summary)
    rows.append(eager_epoch(arrays))
    try:
        import torch

        torch_ok = not gpu or torch.cuda.is_available()
    except ImportError:
        torch_ok = False
    if torch_ok:
        import torch_race

        rows += torch_race.skipped_rows("cuda" if gpu else "cpu")
        ours = summaries[0]["epoch_seconds"]
        for mode, why in torch_race.availability("cuda" if gpu else "cpu").items():
            if why is not None:
                continue
            # warm: cuDNN's algorithm search, the allocator's first blocks, Triton's compilation cache
            train_pytorch(warm, {**config, "epochs": 1}, gpu, mode=mode)
            history, summary = train_pytorch(arrays, config, gpu, mode=mode)
            rows += history
            summaries.append(summary)
            key = "ratio_to_pytorch" if mode == "eager" else f"ratio_to_pytorch_{mode}"
            summaries[0][key] = ours / summary["epoch_seconds"]
            print(f"one epoch: minitorch {ours:.2f} s, PyTorch {mode} {summary['epoch_seconds']:.2f} s: "
                  f"{summaries[0][key]:.2f} x", flush=True)
    else:
        rows.append({"kind": "skipped", "framework": "pytorch", "reason": "PyTorch is not installed, or sees no GPU"})
    rows += summaries
    out = Path(args.out) if args.out else (RESULTS if gpu else Path(tempfile.mkdtemp(prefix="phase6-bench-")))
    import common

    common.RESULTS = out
    write_results("phase6_mnist", device, rows, configuration="full" if gpu else "small", config=config,
                  batch_size=BATCH, learning_rate=LEARNING_RATE, constant_rate=CONSTANT_RATE, seed=SEED,
                  recipe=LAB_RECIPE, max_shift=MAX_SHIFT,
                  input_mean=arrays["mean"], input_std=arrays["std"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
