"""Phase 5 deliverable benchmark: the sales model as an ``nn.Sequential``, trained with SGD and with
Adam from one initialisation, for the chapter's figures.

The lab's settings (solutions/phase5_fast.ipynb, "The deliverable"): ``Linear(n, 32) -> ReLU ->
Linear(32, 1)``, He-uniform then Xavier-uniform weights from ``minitorch.init`` (Philox), zero biases;
log-space quantity and price; SGD with momentum (Phase 4's settings) and Adam; every training step
captured into a graph (``minitorch.graph``) and replayed. After each epoch: the loss on the whole
training set (MSE, normalised log price) and the test MAE. Writes
``benchmarks/results/phase5_sales_optim-<device>.json``:

- ``kind: "epoch"``: ``optimizer``, ``framework``, ``epoch``, ``train_loss``, ``test_mae``;
- ``kind: "summary"``: per optimizer and framework, the final loss and MAE, the epoch at which the run
  first reaches SGD's final training loss, training seconds; with PyTorch installed, the same two
  trainings in PyTorch (same initial weights, same batches) three ways (``benchmarks/torch_race.py``):
  eager (``framework: "pytorch"``), captured in a CUDA graph with a capturable Adam (``"pytorch_graph"``)
  and through torch.compile (``"pytorch_compile"``), each with the time ratio; a way that cannot run here
  (no GPU, no Triton) is a ``kind: "skipped"`` row with its reason.

On a GPU the full configuration (all training rows, 50 epochs); ``--emu-small`` runs the lab's reduced
configuration on the emulator (and PyTorch on the CPU, when installed, for the same curves). The data
come from ``minitorch.data.ensure_sales()`` (``MINITORCH_DATA_DIR`` is honoured).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from common import ROOT, emulator_name, gpu_name, solution_sources, write_results

# The lab's deliverable settings (keep in step with the notebook's deliverable cells).
FULL_CONFIG = dict(epochs=50, batch_size=1024, train_rows=None, adam_lr=1e-3)
REDUCED_CONFIG = dict(epochs=10, batch_size=256, train_rows=12_000, adam_lr=0.03)
HIDDEN, SEED, INIT_SEED = 32, 0, 5
SGD_SETTINGS = dict(lr=0.05, momentum=0.9)
LOG_FEATURES = ["quantity", "unit_price"]
LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions", "phase5_fast")


def prepare(config: dict) -> dict:
    """Host arrays: normalised log features and log target, test prices; as the lab prepares them."""
    from minitorch import data
    from minitorch.batches import train_test_split

    path = data.ensure_sales()
    features, target, names = data.sales_features(data.load_sales(path))
    x = features.astype(np.float64)
    for name in LOG_FEATURES:
        x[:, names.index(name)] = np.log(x[:, names.index(name)])
    y = np.log(target.astype(np.float64)).reshape(-1, 1)
    x_train, x_test, y_train, _, price_train, price_test = train_test_split(x, y, target)
    if config["train_rows"]:
        step = len(x_train) // config["train_rows"]
        x_train, y_train = x_train[::step][:config["train_rows"]], y_train[::step][:config["train_rows"]]
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0
    y_mean, y_std = float(y_train.mean()), float(y_train.std())
    return dict(x_train=((x_train - mean) / std).astype(np.float32), y_train=((y_train - y_mean) / y_std).astype(np.float32),
                x_test=((x_test - mean) / std).astype(np.float32), y_mean=y_mean, y_std=y_std,
                price_train=price_train.astype(np.float64), price_test=price_test.astype(np.float64),
                sales_sha256=data.sha256_file(path))


def initial_state(n_features: int) -> dict[str, np.ndarray]:
    """The one initialisation both runs start from (and PyTorch's too): minitorch.init on the cpu."""
    import minitorch
    from minitorch import init, nn

    model = nn.Sequential(nn.Linear(n_features, HIDDEN, device="cpu"), nn.ReLU(), nn.Linear(HIDDEN, 1, device="cpu"))
    init.kaiming_uniform_(model[0].weight, nonlinearity="relu", seed=INIT_SEED)
    init.xavier_uniform_(model[2].weight, seed=INIT_SEED + 1)
    for layer in (model[0], model[2]):
        layer.bias.copy_(minitorch.zeros(layer.bias.shape, device="cpu"))
    return model.state_dict()


def train_minitorch(arrays: dict, config: dict, optimizer_name: str, state: dict) -> tuple[list[dict], float]:
    import minitorch
    from minitorch import backend, functional, graph, nn, optim
    from minitorch.batches import MiniBatches

    n_features = arrays["x_train"].shape[1]
    model = nn.Sequential(nn.Linear(n_features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
    model.load_state_dict(state)
    opt = (optim.SGD(model.parameters(), **SGD_SETTINGS) if optimizer_name == "sgd"
           else optim.Adam(model.parameters(), lr=config["adam_lr"]))
    train_x, train_y = minitorch.from_numpy(arrays["x_train"]), minitorch.from_numpy(arrays["y_train"])
    test_x = minitorch.from_numpy(arrays["x_test"])
    batches = MiniBatches(arrays["x_train"], arrays["y_train"], config["batch_size"], seed=SEED, device="cpu")
    steps: dict[int, tuple] = {}

    def captured(rows: int) -> tuple:
        if rows not in steps:
            xs, ys = minitorch.zeros((rows, n_features)), minitorch.zeros((rows, 1))

            def step():
                opt.zero_grad()
                functional.mse_loss(model(xs), ys).backward()
                opt.step()

            steps[rows] = (xs, ys, graph.capture(step))
        return steps[rows]

    history = []
    seconds = 0.0
    for epoch in range(config["epochs"]):
        backend.synchronize()
        start = time.perf_counter()
        for xb, yb in batches:
            xs, ys, step_graph = captured(xb.shape[0])
            xs.copy_from(xb.data)
            ys.copy_from(yb.data)
            step_graph.replay()
        backend.synchronize()
        seconds += time.perf_counter() - start
        with minitorch.no_grad():
            loss = functional.mse_loss(model(train_x), train_y).item()
            z = model(test_x).numpy()[:, 0].astype(np.float64) * arrays["y_std"] + arrays["y_mean"]
        mae = float(np.mean(np.abs(np.exp(z) - arrays["price_test"])))
        history.append({"kind": "epoch", "framework": "minitorch", "optimizer": optimizer_name, "epoch": epoch + 1,
                        "train_loss": loss, "test_mae": mae})
        print(f"minitorch {optimizer_name} epoch {epoch + 1:3d}: loss {loss:.3e}  test MAE {mae:.3f}", flush=True)
    return history, seconds


def train_pytorch(arrays: dict, config: dict, optimizer_name: str, state: dict, device: str,
                  mode: str = "eager") -> tuple[list[dict], float]:
    """The same training in PyTorch: same initial weights (transposed to PyTorch's (out, in)), same batches in
    the same order, copied from the host; ``mode`` as ``torch_race`` runs it (eager, captured in a CUDA graph
    with a capturable Adam, or through torch.compile). Only the training is timed, as minitorch's."""
    import torch
    import torch_race

    from minitorch.batches import MiniBatches

    n_features = arrays["x_train"].shape[1]
    net = torch.nn.Sequential(torch.nn.Linear(n_features, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for i in (0, 2):
            net[i].weight.copy_(torch.from_numpy(state[f"{i}.weight"].T.copy()))
            net[i].bias.copy_(torch.from_numpy(state[f"{i}.bias"]))
    net = net.to(device)
    opt = (torch.optim.SGD(net.parameters(), **SGD_SETTINGS) if optimizer_name == "sgd"
           else torch.optim.Adam(net.parameters(), lr=config["adam_lr"], capturable=mode == "graph"))
    batches = MiniBatches(arrays["x_train"], arrays["y_train"], config["batch_size"], seed=SEED, device="cpu")
    train_x, train_y = (torch.from_numpy(arrays[k]).to(device) for k in ("x_train", "y_train"))
    test_x = torch.from_numpy(arrays["x_test"]).to(device)

    def evaluate(epoch: int, model, loss_sum: float) -> dict:
        with torch.no_grad():
            loss = float(torch.nn.functional.mse_loss(model(train_x), train_y))
            z = model(test_x)[:, 0].double().cpu().numpy() * arrays["y_std"] + arrays["y_mean"]
        mae = float(np.mean(np.abs(np.exp(z) - arrays["price_test"])))
        return {"kind": "epoch", "optimizer": optimizer_name, "train_loss": loss, "test_mae": mae}

    history, summary = torch_race.train(
        mode, net, opt, torch.nn.functional.mse_loss, config["epochs"], device,
        lambda epoch: ((xb.numpy(), yb.numpy()) for xb, yb in batches), after_epoch=evaluate)
    for row in history:
        row.pop("seconds")
        row.pop("mode")
    print(f"pytorch {mode} {optimizer_name}: loss {history[-1]['train_loss']:.3e}, "
          f"{summary['train_seconds']:.1f} s", flush=True)
    return history, summary["train_seconds"]


def reaches(losses: list[float], target: float) -> int | None:
    """The first epoch (1-based) whose loss is at most ``target``."""
    return next((e + 1 for e, v in enumerate(losses) if v <= target), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--emu-small", action="store_true", help="no GPU: the lab's reduced configuration on emu")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch runs")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch.kernels import write_source

    device = "emu" if args.emu_small else "cuda"
    minitorch.set_device(device)
    for lab in LABS:
        if not (ROOT / "solutions" / f"{lab}.ipynb").exists():
            print(f"solutions/{lab}.ipynb is missing", file=sys.stderr)
            return 1
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    config = REDUCED_CONFIG if args.emu_small else FULL_CONFIG
    arrays = prepare(config)
    state = initial_state(arrays["x_train"].shape[1])
    baseline = float(np.mean(np.abs(arrays["price_test"] - arrays["price_train"].mean())))
    rows: list[dict] = []
    runs: dict[tuple[str, str], tuple[list[dict], float]] = {}
    for optimizer_name in ("sgd", "adam"):
        runs["minitorch", optimizer_name] = train_minitorch(arrays, config, optimizer_name, state)
    torch_device = None
    if not args.no_torch:
        import torch_race

        torch_device = "cuda" if device == "cuda" else "cpu"
        rows += torch_race.skipped_rows(torch_device)
        for mode, why in torch_race.availability(torch_device).items():
            if why is None:
                for optimizer_name in ("sgd", "adam"):
                    runs[torch_race.framework(mode), optimizer_name] = train_pytorch(
                        arrays, config, optimizer_name, state, torch_device, mode)
    for (framework, optimizer_name), (history, seconds) in runs.items():
        rows += history
        sgd_final = runs[framework, "sgd"][0][-1]["train_loss"]
        losses = [h["train_loss"] for h in history]
        summary = {"kind": "summary", "framework": framework, "optimizer": optimizer_name, "train_seconds": seconds,
                   "final_loss": losses[-1], "test_mae": history[-1]["test_mae"], "baseline_mae": baseline,
                   "ratio": history[-1]["test_mae"] / baseline, "epoch_reaching_sgd_final_loss": reaches(losses, sgd_final)}
        if framework.startswith("pytorch"):
            summary["torch_device"] = torch_device
            summary["minitorch_over_pytorch_time"] = runs["minitorch", optimizer_name][1] / seconds
        rows.append(summary)
        print({k: v for k, v in summary.items() if k != "kind"})
    name = gpu_name() if device == "cuda" else emulator_name()
    write_results("phase5_sales_optim", name, rows, configuration="reduced" if args.emu_small else "full",
                  config=config, hidden=HIDDEN, sgd=SGD_SETTINGS, adam={"lr": config["adam_lr"]}, init_seed=INIT_SEED,
                  batch_seed=SEED, log_features=LOG_FEATURES, train_rows=len(arrays["x_train"]),
                  test_rows=len(arrays["price_test"]), sales_sha256=arrays["sales_sha256"], minitorch_graph=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
