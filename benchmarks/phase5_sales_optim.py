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

Like for like: every kernel a step launches is compiled before its run's timer (one eager step of a throwaway
copy of the model and optimizer at each batch size), PyTorch's libraries are warmed the same way (not
torch.compile's, whose compilation is part of its way), and both capture their graphs inside the timer.
``--torch-modes graph`` races only some of PyTorch's ways; ``--keep-rows-from <earlier JSON>`` then keeps the
others' rows from an earlier run on the same GPU and data, each marked ``measured_on``.

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

    def make_model():
        model = nn.Sequential(nn.Linear(n_features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        model.load_state_dict(state)
        return model

    def make_optimizer(model):
        return (optim.SGD(model.parameters(), **SGD_SETTINGS) if optimizer_name == "sgd"
                else optim.Adam(model.parameters(), lr=config["adam_lr"]))

    model = make_model()
    opt = make_optimizer(model)
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

    warm_up(make_model, make_optimizer, n_features, config["batch_size"], len(arrays["x_train"]) % config["batch_size"])
    history = []
    seconds = []
    for epoch in range(config["epochs"]):
        backend.synchronize()
        start = time.perf_counter()
        for xb, yb in batches:
            xs, ys, step_graph = captured(xb.shape[0])
            xs.copy_from(xb.data)
            ys.copy_from(yb.data)
            step_graph.replay()
        backend.synchronize()
        seconds.append(time.perf_counter() - start)
        with minitorch.no_grad():
            loss = functional.mse_loss(model(train_x), train_y).item()
            z = model(test_x).numpy()[:, 0].astype(np.float64) * arrays["y_std"] + arrays["y_mean"]
        mae = float(np.mean(np.abs(np.exp(z) - arrays["price_test"])))
        history.append({"kind": "epoch", "framework": "minitorch", "optimizer": optimizer_name, "epoch": epoch + 1,
                        "train_loss": loss, "test_mae": mae, "seconds": seconds[-1]})
        print(f"minitorch {optimizer_name} epoch {epoch + 1:3d}: loss {loss:.3e}  test MAE {mae:.3f}", flush=True)
    return history, float(sum(seconds))


def warm_up(make_model, make_optimizer, n_features: int, *batch_rows: int) -> None:
    """Compile, outside the timer, every kernel a training step launches at each batch size (the gemm tiles
    depend on the shape), by running one eager step of a throwaway model and optimizer made the same way.

    Without it the first run of the benchmark (SGD) paid for compiling the whole library inside its timer and
    the second (Adam) for almost nothing: the H100 run of 2026-11-27 timed SGD at 10.7 s and Adam at 1.9 s.
    PyTorch's kernels come compiled; its CUDA graph is captured inside the timer, and so is ours."""
    import minitorch
    from minitorch import backend, functional

    scratch = make_model()
    scratch_opt = make_optimizer(scratch)
    for rows in sorted({r for r in batch_rows if r > 0}):
        x, y = minitorch.zeros((rows, n_features)), minitorch.zeros((rows, 1))
        scratch_opt.zero_grad()
        functional.mse_loss(scratch(x), y).backward()
        scratch_opt.step()
    backend.synchronize()


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

    if mode != "compile":  # as minitorch's warm_up: libraries loaded, kernels ready, outside the timer
        import copy

        scratch = copy.deepcopy(net)
        for rows in sorted({config["batch_size"], len(arrays["x_train"]) % config["batch_size"]} - {0}):
            x = torch.zeros((rows, n_features), device=device)
            torch.nn.functional.mse_loss(scratch(x), torch.zeros((rows, 1), device=device)).backward()
        torch_race._sync(device)
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


def carried_rows(path: str, device: str, sales_sha256: str, measured: set[str]) -> dict:
    """The rows of an earlier result (same device, same data) for the frameworks not measured now, each marked
    with that run's date (``measured_on``); ``from`` says where they came from."""
    import json

    doc = json.loads(open(path).read())
    if doc.get("device") != device or doc.get("sales_sha256") != sales_sha256:
        raise SystemExit(f"--keep-rows-from {path}: measured on {doc.get('device')!r} with sales {doc.get('sales_sha256')}, "
                         f"this run is on {device!r} with {sales_sha256}")
    rows = [{**r, "measured_on": r.get("measured_on", doc["date"])} for r in doc["results"]
            if r.get("framework") not in measured and r.get("framework", "").startswith("pytorch")]
    return {"rows": rows, "from": {"file": os.path.basename(path), "date": doc["date"],
                                   "frameworks": sorted({r["framework"] for r in rows})}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--emu-small", action="store_true", help="no GPU: the lab's reduced configuration on emu")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch runs")
    parser.add_argument("--torch-modes", default="eager,graph,compile",
                        help="the ways PyTorch races, comma-separated (of eager, graph, compile)")
    parser.add_argument("--keep-rows-from", metavar="JSON",
                        help="an earlier result of this benchmark on the same device: its rows of the PyTorch ways "
                             "not run now are kept, each marked with that run's date")
    args = parser.parse_args(argv)
    modes = [m for m in args.torch_modes.split(",") if m]
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
        unknown = set(modes) - set(torch_race.MODES)
        if unknown:
            parser.error(f"--torch-modes: unknown {sorted(unknown)} (of {', '.join(torch_race.MODES)})")
        for mode, why in torch_race.availability(torch_device).items():
            if why is None and mode in modes:
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
    kept = carried_rows(args.keep_rows_from, name, arrays["sales_sha256"], {framework for framework, _ in runs}) if args.keep_rows_from else {}
    for row in kept.get("rows", []):
        if row.get("kind") == "summary":  # against this run's minitorch time
            row["minitorch_over_pytorch_time"] = runs["minitorch", row["optimizer"]][1] / row["train_seconds"]
        rows.append(row)
    write_results("phase5_sales_optim", name, rows, minitorch_warm_up="each optimizer's kernels compiled before "
                  "its timer (one eager step of a throwaway copy per batch size); its graphs captured inside it",
                  **({"kept_from": kept["from"]} if kept else {}), configuration="reduced" if args.emu_small else "full",
                  config=config, hidden=HIDDEN, sgd=SGD_SETTINGS, adam={"lr": config["adam_lr"]}, init_seed=INIT_SEED,
                  batch_seed=SEED, log_features=LOG_FEATURES, n_features=int(arrays["x_train"].shape[1]),
                  train_rows=len(arrays["x_train"]),
                  test_rows=len(arrays["price_test"]), sales_sha256=arrays["sales_sha256"], minitorch_graph=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
