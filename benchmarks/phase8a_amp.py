"""Phase 8a deliverable benchmark: mixed-precision training (``minitorch.amp.autocast("bfloat16")``) of Phase 7's
GPT and Phase 6's MNIST CNN against their float32 runs and against PyTorch.

Runs on the reference solution files of Phases 1-8a (a temporary workspace). For each model:

- ``step_ways`` (the GPT): the bf16 captured step of throwaway models timed for each way minitorch can run it
  (``GPT_WAYS``: AdamW per parameter as the lab builds it or over one flat buffer, the weights' gradients on a side
  branch of the graph or not, split along K or not), each way's weights after a few steps checked against the
  per-parameter way's; the rest of the run uses the fastest;
- ``training``: the lab's recipe (the GPT: Lab 8a's deliverable, ``GPT_RECIPE``) trained twice by minitorch, float32
  and under bf16 autocast (fp32 master weights and optimizer state; products on the learner's ``hgemm.py``), from the same initial weights on the same batches,
  each step captured into a graph and replayed; the GPT's validation loss (the grader's 256 windows) and the CNN's
  test accuracy, both evaluated in float32 from the trained fp32 weights, and the training time;
- ``step``: one training step on one batch, timed alone (host time included): minitorch fp32 and bf16, captured and
  launched from Python; PyTorch fp32 and ``torch.autocast("cuda", torch.bfloat16)``, eager and captured in a CUDA
  graph (``torch.cuda.graph``, capturable optimizer); same model, same weights, same batch; the GPT's PyTorch AdamW
  fused where minitorch's is flat (its default, foreach, where ours runs per parameter), the other also timed;
- ``kernel`` (``--profile``, the GPT): minitorch's bf16 captured step and PyTorch's captured autocast step split by
  kernel (torch.profiler);
- ``summary``: the gaps the deliverable bounds (GPT val loss within 0.02, CNN accuracy within 0.1 points) and the
  step-time ratios (minitorch bf16 captured against PyTorch autocast captured and eager, and against minitorch fp32).

On a GPU: ``python benchmarks/phase8a_amp.py`` (about two minutes on an H100) writes
``benchmarks/results/phase8a_amp-<gpu>.json``. ``--small`` runs every line on the emulator with reduced models and
a few steps (PyTorch on the cpu: no captured rows) and writes into a temporary directory: a check of the script.
``--only mnist --profile --mnist-epochs 1`` adds torch.profiler's kernel tables of the CNN's steps (one epoch of
training each way first); committed as ``phase8a_amp_mnist_profile-<gpu>.json``. ``--only gpt --profile`` (about a
minute on an H100) writes ``phase8a_amp_gpt-<gpu>.json``, whose rows the chapter takes for the GPT; ``--out DIR``
writes the JSON there instead. ``--reduced STEPS`` trains Lab 8a's deliverable in its reduced configuration (the
emulator's: Lab 7's reduced model and recipe, STEPS steps) in float32 and under bf16 autocast, both scored in float64 by the grader's own forward pass
(grader/tests/test_phase7_gpt.py) on its 256 windows, and writes ``phase8a_gpt_reduced-<device>.json``: the data
behind ``phase8a.shakespeare_bf16_val_loss_reduced``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import phase6_mnist as mnist
import phase7_gpt as gpt
from common import emulator_name, gpu_name, slug, software, solution_sources, write_results

LABS = gpt.LABS + ("phase8a_tensor_cores",)
PRECISIONS = ("float32", "bfloat16")
GPT_FULL, GPT_SMALL = gpt.FULL, dict(gpt.SMALL, train=dict(steps=6, batch_size=4, lr=1e-2, eval_every=3))
MNIST_FULL, MNIST_SMALL = mnist.FULL, dict(epochs=1, train_images=128, test_images=100)
MNIST_STEP_BATCH = mnist.BATCH
# Lab 8a's reduced CNN deliverable (the emulator's): Lab 6's recipe on fewer images, one epoch (a bf16 step costs
# the emulator about twice a float32 one: Lab 6's own reduced configuration would add a minute to CI's grading)
MNIST_REDUCED = dict(epochs=1, train_images=1_280, test_images=10_000)


def torch_or_none():
    """PyTorch, or None where it is not installed (the --small check on a machine without it)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def autocast(precision: str):
    """minitorch's autocast region for ``precision`` (float32: a disabled region)."""
    from minitorch import amp

    return amp.autocast("bfloat16", enabled=precision == "bfloat16")


def torch_autocast(precision: str, device: str):
    import torch

    # cache_enabled=False: the autocast weight cache cannot live across a CUDA graph capture
    return torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16", cache_enabled=False)


# ---------------------------------------------------------------- GPT

# Lab 8a's deliverable (solutions/phase8a_tensor_cores.ipynb): Lab 7's model and recipe with the head untied and no
# dropout, AdamW over optimizer_groups on the warmup + cosine schedule, clipping at 1.0
GPT_TIE, GPT_DROPOUT = False, 0.0
# The ways minitorch can run the deliverable's step, (flat, branches, split) (the framework's levers; hgemm.py's
# best, rung 6 on sm_90 for K >= 256, in all of them): AdamW over per-parameter buffers as the lab builds it, over
# one flat buffer (flat=True: one update launch a decay group, clipping in three launches), and that with the
# weights' gradients on a side branch of the captured graph (ops.set_concurrent_weight_grads; cuda only); the weight
# gradients split along K (ops.set_split_k: None, the default) or not (0; at the lab's batch their K is 4,096 rows)
GPT_WAYS = {"per_parameter": (False, False, None), "flat": (True, False, None), "flat+branches": (True, True, None),
            "flat+unsplit": (True, False, 0), "flat+branches+unsplit": (True, True, 0)}
GPT_WAY_MEANS = {"per_parameter": "AdamW over per-parameter buffers (as Lab 8a's solution builds it)",
                 "flat": "AdamW(..., flat=True)",
                 "flat+branches": "AdamW(..., flat=True) and ops.set_concurrent_weight_grads(True)",
                 "flat+unsplit": "AdamW(..., flat=True) and ops.set_split_k(0)",
                 "flat+branches+unsplit": "AdamW(..., flat=True), ops.set_concurrent_weight_grads(True) and "
                                          "ops.set_split_k(0)"}
GPT_RECIPE = ("Lab 8a's deliverable: nn.GPT(tie_weights=False, dropout=0.0), AdamW(optimizer_groups(0.1)) on "
              "WarmupCosine(lr, lr / 10, steps // 10, steps), clipping at 1.0")


def gpt_step(model, opt, xb, yb, vocab: int, precision: str):
    """The Phase 7 lab's step (loss, backward, clipping, AdamW), its forward under ``precision``'s autocast."""
    from minitorch import functional as F  # noqa: N812
    from minitorch import optim

    b, t = xb.shape

    def step():
        with autocast(precision):
            loss = F.cross_entropy(model(xb).reshape(b * t, vocab), yb.reshape(b * t))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), gpt.CLIP)
        opt.step()
        return loss

    return step


def gpt_setup(vocab: int, setup: dict, precision: str, flat: bool):
    """The deliverable's model, optimizer, static batch tensors and step (not yet run)."""
    import minitorch
    from minitorch import nn, optim

    model_cfg, train_cfg = setup["model"], setup["train"]
    b, t = train_cfg["batch_size"], model_cfg["block_size"]
    model = nn.GPT(vocab, **model_cfg, seed=gpt.SEED, tie_weights=GPT_TIE, dropout=GPT_DROPOUT)
    opt = optim.AdamW(model.optimizer_groups(gpt.WEIGHT_DECAY), lr=train_cfg["lr"], schedule=gpt.schedule_of(train_cfg),
                      flat=flat)
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    return model, opt, xb, yb, gpt_step(model, opt, xb, yb, vocab, precision)


def gpt_way_row(device: str, vocab: int, setup: dict, x: np.ndarray, y: np.ndarray) -> tuple[dict, str]:
    """The bf16 captured step of throwaway models of the deliverable's, timed for each way of GPT_WAYS (on one
    batch, host time included), and after CHECK_REPLAYS replays each way's weights against the per-parameter way's
    (relative error: a branch read before it finished, or a flat view out of place, would give far more than a
    GPU's atomics). Returns the row and the fastest way whose weights agree."""
    from minitorch import graph, ops

    time_of = gpt.timer(device)
    # branches: a cuda graph's only; split K: a GPU batch's (K >= 2048)
    ways = {k: v for k, v in GPT_WAYS.items() if device == "cuda" or not v[1] and v[2] is None}
    row: dict = {"kind": "step_ways", "model": "gpt", "precision": "bfloat16"}
    weights = {}
    for way, (flat, branches, split) in ways.items():
        was, split_was = ops.set_concurrent_weight_grads(branches), ops.set_split_k(split)
        try:
            model, _, xb, yb, step = gpt_setup(vocab, setup, "bfloat16", flat)
            xb.copy_from(x)
            yb.copy_from(y)
            step()  # eagerly first: kernels compiled, buffers made outside the capture
            captured = graph.capture(step)
            for _ in range(CHECK_REPLAYS):
                captured.replay()
            weights[way] = {n: p.numpy().astype(np.float64) for n, p in model.named_parameters()}
            row[f"{way}_seconds"] = time_of(captured.replay)
            row[f"{way}_launches"] = captured.launches
            del captured
        except Exception as exc:  # noqa: BLE001 (a way this device cannot run: say why, time the others)
            row[f"{way}_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            ops.set_concurrent_weight_grads(was)
            ops.set_split_k(split_was)
    base = weights.get("per_parameter")
    for way, w in weights.items():
        if base is not None and way != "per_parameter":
            worst = max(float(np.linalg.norm(w[n] - base[n]) / max(np.linalg.norm(base[n]), 1e-30)) for n in base)
            row[f"{way}_weights_relative_error"] = worst
            if not worst <= 1e-2:
                row[f"{way}_refused"] = f"its weights after {CHECK_REPLAYS} steps differ by {worst:.2e} (> 1e-2)"
    timed = {w: row[f"{w}_seconds"] for w in ways if f"{w}_seconds" in row and f"{w}_refused" not in row}
    fastest = min(timed, key=timed.get)
    row["fastest"] = fastest
    print("bf16 captured step by way: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in timed.items())
          + "".join(f"; {k}: {row[f'{k}_{s}']}" for k in ways for s in ("skipped", "refused") if f"{k}_{s}" in row)
          + f"; the run uses {fastest}", flush=True)
    return row, fastest


CHECK_REPLAYS = 3


def gpt_rows(device: str, setup: dict, profile: bool = False) -> tuple[list[dict], dict]:
    """The training, step, way and (with ``profile``, on a GPU) kernel rows of the GPT; and the run's settings."""
    import minitorch
    from minitorch import backend, graph, ops, text
    from minitorch import functional as F  # noqa: N812

    model_cfg, train_cfg = setup["model"], setup["train"]
    tokenizer, train_ids, val_ids = gpt.shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    val_x, val_y = text.evaluation_windows(val_ids, t, gpt.EVAL_WINDOWS)
    val_xt, val_yt = minitorch.tensor(val_x, dtype="int32"), minitorch.tensor(val_y.reshape(-1), dtype="int32")
    time_of = gpt.timer(device)
    x, y = text.RandomWindows(train_ids, t, b, seed=gpt.SEED + 1).sample()  # the one batch every step is timed on
    rows: list[dict] = []
    way_row, way = gpt_way_row(device, vocab, setup, x, y)
    rows.append(way_row)
    flat, branches, split = GPT_WAYS[way]
    branches_was, split_was = ops.set_concurrent_weight_grads(branches), ops.set_split_k(split)
    steps, models = {}, {}
    try:
        for precision in PRECISIONS:  # the deliverable's training, both ways, with the way chosen
            model, _, xb, yb, step = gpt_setup(vocab, setup, precision, flat)
            captured = graph.capture(step)
            windows = text.RandomWindows(train_ids, t, b, seed=gpt.SEED)
            backend.synchronize()
            start = time.perf_counter()
            for _ in range(train_cfg["steps"]):
                xs, ys = windows.sample()
                xb.copy_from(xs)
                yb.copy_from(ys)
                captured.replay()
            backend.synchronize()
            seconds = time.perf_counter() - start
            with minitorch.no_grad():  # scored in float32, from the fp32 master weights
                val = F.cross_entropy(model(val_xt).reshape(-1, vocab), val_yt).item()
            rows.append({"kind": "training", "model": "gpt", "precision": precision, "steps": train_cfg["steps"],
                         "val_loss": val, "train_seconds": seconds, "launches_per_step": captured.launches,
                         "way": way})
            print(f"GPT {precision}: validation loss {val:.4f} after {train_cfg['steps']} steps in {seconds:.2f} s "
                  f"({captured.launches} launches a step, {way})", flush=True)
            steps[precision], models[precision] = (captured, step, xb, yb), model

        # one step timed alone, on one batch, from the trained weights: minitorch both ways, PyTorch both ways
        row = {"kind": "step", "model": "gpt", "batch": b, "context": t, "way": way}
        for precision in PRECISIONS:
            captured, step, xb, yb = steps[precision]
            xb.copy_from(x)  # the batch PyTorch is timed on too
            yb.copy_from(y)
            row[f"minitorch_{precision}_captured_seconds"] = time_of(captured.replay)
            row[f"minitorch_{precision}_eager_seconds"] = time_of(step)
        kernels = []
        if profile and device == "cuda":
            kernels += profile_rows(steps["bfloat16"][0].replay, "minitorch_bfloat16_captured")
    finally:
        ops.set_concurrent_weight_grads(branches_was)
        ops.set_split_k(split_was)
    torch = torch_or_none()
    if torch is None:
        row["pytorch_skipped"] = "PyTorch is not installed here"
        return rows + [row], {"way": way}
    import torch.nn.functional as TF  # noqa: N812
    from torch_gpt import torch_optimizer

    tdev = "cuda" if device == "cuda" else "cpu"
    txb, tyb = (torch.from_numpy(a.astype(np.int64)).to(tdev) for a in (x, y))
    # like against like: PyTorch's AdamW fused (one kernel over every parameter of a group) where ours is flat, its
    # default (foreach) where ours runs per parameter; the other also timed, as pytorch_*_<optimizer>_seconds
    fused = flat
    optimizers = {"fused": True, "foreach": False}
    main = "fused" if fused else "foreach"

    def torch_step_of(precision: str, capturable: bool, fused_adamw: bool):
        net = gpt.torch_gpt(model_cfg, vocab, tdev, tie=GPT_TIE, dropout=GPT_DROPOUT)
        gpt.load_weights(net, models["float32"])
        kw = {"fused": True} if fused_adamw else {}
        topt = torch_optimizer(net, models["float32"], gpt.WEIGHT_DECAY, gpt.schedule_of(train_cfg),
                               capturable=capturable, **kw)[0]

        def torch_step():
            with torch_autocast(precision, tdev):
                loss = TF.cross_entropy(net(txb).view(-1, vocab), tyb.view(-1))
            topt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), gpt.CLIP)
            topt.step()
            return loss

        torch_step()  # the gradients exist before a capture (zeroed in place after)
        return torch_step

    torch_captured = {}
    for precision in PRECISIONS:  # eager as most PyTorch code runs; captured with a capturable AdamW
        for name, fused_adamw in optimizers.items():
            suffix = "" if name == main else f"_{name}"
            for how in ("eager", "captured") if device == "cuda" else ("eager",):
                key = f"pytorch_{precision}_{how}{suffix}"
                try:
                    if how == "eager":
                        row[f"{key}_seconds"] = time_of(torch_step_of(precision, False, fused_adamw))
                        continue
                    gc.collect()  # earlier steps' autograd graphs belong to the default stream: let them go first
                    graphed = gpt.torch_captured(torch_step_of(precision, True, fused_adamw))
                    row[f"{key}_seconds"] = time_of(graphed.replay)
                    torch_captured[(precision, name)] = graphed
                except Exception as exc:  # noqa: BLE001 (say why; the other timings stay)
                    row[f"{key}_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
                    print(f"{key} failed: {row[f'{key}_skipped']}", flush=True)
    row["pytorch_optimizer"] = (f"torch.optim.AdamW({'fused=True' if fused else 'foreach (default)'}), the two groups "
                                "of optimizer_groups; captured: capturable=True")
    print("GPT step: " + ", ".join(f"{k[:-8]} {v * 1e3:.3f} ms" for k, v in row.items() if k.endswith("_seconds")),
          flush=True)
    if profile and ("bfloat16", main) in torch_captured:
        kernels += profile_rows(torch_captured[("bfloat16", main)].replay, "pytorch_bfloat16_captured")
    return rows + [row] + kernels, {"way": way, "pytorch_optimizer": row["pytorch_optimizer"]}


def profile_rows(run, name: str) -> list[dict]:
    """One step split by kernel (phase7_step_profile.kernel_table: torch.profiler over replays, calls and µs a
    step, share): ``kernel`` rows and a ``kernel_busy`` row, named ``run``."""
    from phase7_step_profile import kernel_table

    try:
        table, busy = kernel_table(run)
    except Exception as exc:  # noqa: BLE001 (a profiler that cannot run here: say so, keep the timings)
        return [{"kind": "kernel_error", "model": "gpt", "run": name, "error": f"{type(exc).__name__}: {exc}"[:300]}]
    print(f"{name}: GPU busy {busy:.1f} us a step; the largest kernels:", flush=True)
    for r in table[:12]:
        print(f"  {r['share']:6.1%} {r['us_per_call']:7.1f} us x {r['calls_per_step']:4.1f}  {r['name'][:100]}",
              flush=True)
    return ([{**r, "kind": "kernel", "model": "gpt", "run": name} for r in table]
            + [{"kind": "kernel_busy", "model": "gpt", "run": name, "busy_us_per_step": busy}])


# ---------------------------------------------------------------- MNIST CNN


def train_cnn(arrays: dict, config: dict, precision: str, seed: int = mnist.SEED) -> dict:
    """The lab's recipe (cosine rate, images moved a pixel, the step captured each epoch) under ``precision``'s
    autocast: the model, its last captured step, the eager step, its static inputs and the training seconds."""
    import minitorch
    from minitorch import backend, graph, optim
    from minitorch import functional as F  # noqa: N812

    y_train = arrays["y_train"].astype(np.int32)
    n_steps, epochs = len(arrays["orders"][0]) // mnist.BATCH, config["epochs"]
    model = mnist.mnist_cnn(seed)
    optimizer = optim.Adam(model.parameters(), lr=mnist.LEARNING_RATE)
    x_batch = minitorch.zeros((mnist.BATCH, 1, 28, 28))
    y_batch = F.class_indices(np.zeros(mnist.BATCH, np.int64))

    def train_step():
        optimizer.zero_grad()
        with autocast(precision):
            loss = F.cross_entropy(model(x_batch), y_batch)
        loss.backward()
        optimizer.step()
        return loss

    seconds = 0.0
    for epoch, order in enumerate(arrays["orders"]):
        optimizer.lr = mnist.learning_rate(mnist.LAB_RECIPE, epoch, epochs)
        x_train = mnist.epoch_images(arrays, mnist.LAB_RECIPE, epoch)
        backend.synchronize()
        start = time.perf_counter()
        captured = graph.capture(train_step)
        for i in range(n_steps):
            chosen = order[i * mnist.BATCH:(i + 1) * mnist.BATCH]
            x_batch.copy_from(x_train[chosen])
            y_batch.copy_from(y_train[chosen])
            captured.replay()
        backend.synchronize()
        seconds += time.perf_counter() - start
    return {"model": model, "captured": captured, "step": train_step, "x_batch": x_batch, "y_batch": y_batch,
            "seconds": seconds}


def mnist_rows(device: str, config: dict) -> list[dict]:
    arrays = mnist.load(config)
    time_of = gpt.timer(device)
    rows, steps = [], {}
    y_train = arrays["y_train"].astype(np.int32)
    epochs = config["epochs"]
    for precision in PRECISIONS:
        run = train_cnn(arrays, config, precision)
        captured, seconds = run["captured"], run["seconds"]
        accuracy = float(np.mean(mnist.predict_minitorch(run["model"], arrays["x_test"]) == arrays["y_test"]))
        rows.append({"kind": "training", "model": "mnist_cnn", "precision": precision, "epochs": epochs,
                     "test_accuracy": accuracy, "train_seconds": seconds, "launches_per_step": captured.launches})
        print(f"MNIST CNN {precision}: test accuracy {accuracy:.2%} after {epochs} epochs in {seconds:.2f} s "
              f"({captured.launches} launches a step)", flush=True)
        steps[precision] = (captured, run["step"], run["x_batch"], run["y_batch"])

    row = {"kind": "step", "model": "mnist_cnn", "batch": mnist.BATCH}
    chosen = arrays["orders"][0][:mnist.BATCH]  # one batch, for every framework and precision
    for precision in PRECISIONS:
        captured, step, x_batch, y_batch = steps[precision]
        x_batch.copy_from(np.ascontiguousarray(arrays["x_train"][chosen]))
        y_batch.copy_from(y_train[chosen])
        row[f"minitorch_{precision}_captured_seconds"] = time_of(captured.replay)
        row[f"minitorch_{precision}_eager_seconds"] = time_of(step)
    torch = torch_or_none()
    if torch is None:
        row["pytorch_skipped"] = "PyTorch is not installed here"
        rows.append(row)
        return rows
    tdev = "cuda" if device == "cuda" else "cpu"
    tx = torch.from_numpy(np.ascontiguousarray(arrays["x_train"][chosen])).to(tdev)
    ty = torch.from_numpy(arrays["y_train"][chosen]).to(tdev)
    torch_steps = {}
    for precision in PRECISIONS:
        row[f"pytorch_{precision}_eager_seconds"] = time_of(torch_mnist_step(tx, ty, precision, False))
        if device == "cuda":
            gc.collect()  # earlier steps' autograd graphs belong to the default stream: let them go first
            torch_steps[precision] = gpt.torch_captured(torch_mnist_step(tx, ty, precision, True))
            row[f"pytorch_{precision}_captured_seconds"] = time_of(torch_steps[precision].replay)
    rows.append(row)
    if PROFILE and device == "cuda":  # where the bf16 step's time goes, kernel by kernel, against PyTorch's
        for name, run in (("minitorch_bfloat16_captured", steps["bfloat16"][0].replay),
                          ("minitorch_bfloat16_eager", steps["bfloat16"][1]),
                          ("minitorch_float32_captured", steps["float32"][0].replay),
                          ("pytorch_bfloat16_captured", torch_steps["bfloat16"].replay)):
            rows.append({"kind": "kernels", "model": "mnist_cnn", "run": name, "steps": PROFILE_STEPS,
                         **kernel_table(run, PROFILE_STEPS)})
    return rows


def torch_mnist_step(tx, ty, precision: str, capturable: bool):
    """PyTorch's training step of the course's CNN on one batch, under ``precision``'s autocast (run once)."""
    import torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(tx.device)
    adam = torch.optim.Adam(net.parameters(), lr=mnist.LEARNING_RATE, capturable=capturable)

    def torch_step():
        with torch_autocast(precision, tx.device.type):
            loss = torch.nn.functional.cross_entropy(net(tx), ty)
        adam.zero_grad(set_to_none=False)
        loss.backward()
        adam.step()
        return loss

    torch_step()
    return torch_step


PROFILE, PROFILE_STEPS = False, 20


def kernel_table(run, steps: int) -> dict:
    """The GPU kernels of ``steps`` calls of ``run`` (torch.profiler: CUPTI sees every kernel of the process, CuPy's
    and a graph's included): per kernel name the calls and microseconds per step, the longest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                run()
            torch.cuda.synchronize()
        table = []
        for event in prof.key_averages():
            micros = getattr(event, "self_device_time_total", None)
            if micros is None:
                micros = getattr(event, "self_cuda_time_total", 0.0)
            if micros > 0:
                table.append({"kernel": event.key[:160], "calls_per_step": event.count / steps,
                              "us_per_step": micros / steps})
    except Exception as exc:  # a profiler that cannot run here: say so, keep the timings
        return {"error": f"{type(exc).__name__}: {exc}"}
    table.sort(key=lambda r: -r["us_per_step"])
    return {"total_us_per_step": sum(r["us_per_step"] for r in table), "table": table}


def summaries(rows: list[dict]) -> list[dict]:
    out = []
    for model, metric, bound in (("gpt", "val_loss", 0.02), ("mnist_cnn", "test_accuracy", 0.001)):
        trained = {r["precision"]: r for r in rows if r["kind"] == "training" and r["model"] == model}
        if not trained:  # --only the other model
            continue
        step = next(r for r in rows if r["kind"] == "step" and r["model"] == model)
        gap = trained["bfloat16"][metric] - trained["float32"][metric]
        summary = {"kind": "summary", "model": model, "metric": metric, "float32": trained["float32"][metric],
                   "bfloat16": trained["bfloat16"][metric], "gap": gap, "bound": bound,
                   "within_bound": bool(abs(gap) <= bound) if metric == "val_loss" else bool(-gap <= bound),
                   "bf16_over_fp32_captured": step["minitorch_bfloat16_captured_seconds"]
                   / step["minitorch_float32_captured_seconds"]}
        if "way" in step:
            summary["way"] = step["way"]
        for way in ("eager", "captured"):
            if f"pytorch_bfloat16_{way}_seconds" in step:
                summary[f"bf16_over_pytorch_autocast_{way}"] = (step["minitorch_bfloat16_captured_seconds"]
                                                                / step[f"pytorch_bfloat16_{way}_seconds"])
        out.append(summary)
        print(f"{model}: {metric} fp32 {summary['float32']:.4f}, bf16 {summary['bfloat16']:.4f} (gap {gap:+.4f}); "
              f"bf16 step {summary['bf16_over_fp32_captured']:.2f}x minitorch fp32"
              + "".join(f", {summary[f'bf16_over_pytorch_autocast_{way}']:.2f}x PyTorch autocast {way}"
                        for way in ("eager", "captured") if f"bf16_over_pytorch_autocast_{way}" in summary),
              flush=True)
    return out


def reduced_rows(steps: int) -> list[dict]:
    """The reduced deliverable trained as Lab 8a trains it, float32 then bf16 autocast, from the same seed and
    batches; each scored by the grader's float64 forward pass on the saved (float32) weights."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "grader" / "tests"))
    from test_phase7_gpt import validation_loss

    import minitorch
    from minitorch import graph, nn, optim, text

    model_cfg, train_cfg = gpt.REDUCED["model"], dict(gpt.REDUCED["train"], steps=steps)
    tokenizer, train_ids, val_ids = gpt.shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    rows = []
    for precision in PRECISIONS:
        start, cpu = time.perf_counter(), time.process_time()
        model = nn.GPT(vocab, **model_cfg, seed=gpt.SEED, tie_weights=False, dropout=0.0)
        opt = optim.AdamW(model.optimizer_groups(gpt.WEIGHT_DECAY), lr=train_cfg["lr"],
                          schedule=gpt.schedule_of(train_cfg))
        xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
        captured = graph.capture(gpt_step(model, opt, xb, yb, vocab, precision))
        windows = text.RandomWindows(train_ids, t, b, seed=gpt.SEED)
        for _ in range(steps):
            x, y = windows.sample()
            xb.copy_from(x)
            yb.copy_from(y)
            captured.replay()
        config = dict(model.config, tie_weights=False)
        params = {k: np.asarray(v, np.float64) for k, v in model.state_dict().items()}
        loss = validation_loss(params, config, val_ids)
        rows.append({"kind": "reduced", "precision": precision, "steps": steps, "val_loss_float64": loss,
                     "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
                     "cpu_seconds_per_step": (time.process_time() - cpu) / steps, "launches": captured.launches})
        print(f"reduced, {precision}, {steps} steps: validation loss {loss:.4f} (float64, the grader's windows)",
              flush=True)
    return rows


def reduced_cnn_rows(seeds: list[int]) -> list[dict]:
    """Lab 8a's reduced CNN deliverable trained in float32 and under bf16 autocast from each seed (the same batches
    both ways), each scored as the grader scores it: its float64 forward pass on the 10,000 test images."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "grader" / "tests"))
    from test_phase6_mnist import logits64

    rows = []
    for seed in seeds:
        arrays = mnist.load(MNIST_REDUCED, seed)
        for precision in PRECISIONS:
            start, cpu = time.perf_counter(), time.process_time()
            run = train_cnn(arrays, MNIST_REDUCED, precision, seed)
            cpu_train = time.process_time() - cpu
            params = {k: np.asarray(v, np.float64) for k, v in run["model"].state_dict().items()}
            x = arrays["x_test"].astype(np.float64)
            predicted = np.concatenate([np.argmax(logits64(params, x[i:i + 1000]), axis=1)
                                        for i in range(0, len(x), 1000)])
            accuracy = float(np.mean(predicted == arrays["y_test"]))
            rows.append({"kind": "reduced_cnn", "seed": seed, "precision": precision,
                         "test_accuracy_float64": accuracy, "seconds": time.perf_counter() - start,
                         "cpu_seconds_training": cpu_train, "launches": run["captured"].launches})
            print(f"reduced CNN, seed {seed}, {precision}: test accuracy {accuracy:.2%} (float64, the grader's "
                  f"forward pass), training {cpu_train:.1f} s of CPU", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true", help="the emulator, reduced models, a few steps: a check")
    parser.add_argument("--only", choices=("gpt", "mnist"), help="one model (a quicker check; on a GPU it writes "
                        "phase8a_amp_<model>-<gpu>.json)")
    parser.add_argument("--profile", action="store_true", help="add the kernels of the steps (torch.profiler): the "
                        "CNN's, and the GPT's bf16 captured step, ours and PyTorch's")
    parser.add_argument("--out", type=Path, help="write the JSON into this directory instead of benchmarks/results/")
    parser.add_argument("--reduced-cnn", metavar="SEEDS", help="the emulator's reduced CNN deliverable, fp32 and "
                        "bf16, from these seeds (e.g. 0,1,2): phase8a_cnn_reduced-<device>.json")
    parser.add_argument("--mnist-epochs", type=int, metavar="N", help="train the CNN N epochs (of the recipe's "
                        "10): a quicker run for the step timings; its accuracies are not the deliverable's")
    parser.add_argument("--reduced", type=int, metavar="STEPS", help="the emulator's reduced deliverable, fp32 and "
                        "bf16, STEPS steps: phase8a_gpt_reduced-<device>.json")
    args = parser.parse_args(argv)
    global PROFILE
    PROFILE = args.profile
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch.kernels import write_source

    device = "emu" if args.small or args.reduced or args.reduced_cnn else "cuda"
    if device == "cuda" and not minitorch.cuda_available():
        print("no usable GPU: run with --small for a check of the script on the emulator", file=sys.stderr)
        return 1
    minitorch.set_device(device)
    for lab in LABS:
        for name, source in solution_sources(f"{lab}.ipynb").items():
            write_source(name, source)
    name = gpu_name() if device == "cuda" else emulator_name()
    print(f"device: {name}", flush=True)
    if args.reduced_cnn:
        seeds = [int(v) for v in args.reduced_cnn.split(",")]
        write_results("phase8a_cnn_reduced", name, reduced_cnn_rows(seeds), config=MNIST_REDUCED,
                      batch_size=mnist.BATCH, learning_rate=mnist.LEARNING_RATE, recipe=mnist.LAB_RECIPE,
                      autocast="bfloat16", hgemm_variant="ops.linalg.hgemm_variant")
        return 0
    if args.reduced:
        write_results("phase8a_gpt_reduced", name, reduced_rows(args.reduced), model=gpt.REDUCED["model"],
                      train=dict(gpt.REDUCED["train"], steps=args.reduced), autocast="bfloat16",
                      hgemm_variant="ops.linalg.hgemm_variant")
        return 0
    rows: list[dict] = []
    mnist_config = MNIST_SMALL if args.small else MNIST_FULL
    if args.mnist_epochs:
        mnist_config = dict(mnist_config, epochs=args.mnist_epochs)
    gpt_config = dict(GPT_SMALL if args.small else GPT_FULL, recipe=GPT_RECIPE)
    if args.only != "mnist":
        gpt_part, settings = gpt_rows(device, GPT_SMALL if args.small else GPT_FULL, profile=args.profile)
        rows += gpt_part
        gpt_config.update(settings, way_means=GPT_WAY_MEANS.get(settings["way"]))
    if args.only != "gpt":
        rows += mnist_rows(device, mnist_config)
    rows += summaries(rows)
    config = {"gpt": gpt_config, "mnist": mnist_config,
              "split_k": "ops.linalg.split_k: weight gradients with K >= 2048 split into pieces (the default target)",
              "autocast": "bfloat16", "hgemm_variant": "ops.linalg.hgemm_variant: on cuda wmma if M·N <= 2048, else best "
              "(hgemm.py's best_variant: rung 6 on sm_90 for one matrix with K >= 256, else rung 5)",
              "conv_weight_grad": "one product per image, summed (ops.conv.per_image_weight_grad)",
              "bmm": "one hgemm launch a batch (grid z)"}
    if args.small:
        path = Path(tempfile.mkdtemp(prefix="phase8a-amp-small-")) / "phase8a_amp-small.json"
        doc = {"benchmark": "phase8a_amp", "device": name, "date": datetime.date.today().isoformat(),
               "software": software(), "configuration": "small", "config": config, "results": rows}
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"wrote {path} (not a result for the book)")
        return 0
    out = args.out / f"phase8a_amp{f'_{args.only}' if args.only else ''}-{slug(name)}.json" if args.out else None
    write_results("phase8a_amp" + (f"_{args.only}" if args.only else ""), name, rows, path=out,
                  configuration=f"mnist_epochs={args.mnist_epochs}" if args.mnist_epochs else "full", config=config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
