"""Phase 8b capstone benchmark: nanoGPT's Shakespeare-char model trained on the learner's kernels, against PyTorch.

The recipe (issue #25, "The capstone deliverable"; PyTorch's own run of it in
../shared/reference/performance-anchors.md): 6 layers, 6 heads, d_model 384, context 256, dropout 0.2 (the
embeddings, both residual branches and, inside FlashAttention, the attention probabilities), the head tied to the
token table, nanoGPT's initial values (``nn.GPT(..., init="gpt2")``), batch 64, AdamW (lr 1e-3, 100 warm-up
steps, cosine decay to 1e-4 over 5,000 steps, betas 0.9 / 0.99, weight decay 0.1 on the Linear matrices only: ``GPT.optimizer_groups``), gradients clipped to 1.0, bf16
autocast, evaluated every 250 steps on the grader's 256 validation windows (Phase 7's), the best checkpoint kept.
Runs on the reference solution files of Phases 1-8b (a temporary workspace): FlashAttention (``flash.py``), the
tensor-core GEMMs (``hgemm.py``), AdamW, LayerNorm, GELU, embeddings, dropout, cross-entropy and clipping are the
learner's kernels; ``nn.GPT(..., attention="flash")``; each training step is captured into a graph and replayed.

Training stops at ``--steps`` (2,000: where PyTorch's best came) of the schedule's 5,000, so the learning rate
follows the recipe's schedule to that step. The same batches (the same sampled windows, ``text.RandomWindows``
from one seed) feed minitorch and PyTorch; the two start from the same weights (dropout masks differ: each
framework draws its own).

Rows of the JSON (``benchmarks/results/phase8b_nanogpt-<device>.json``):

- ``check``: the flash GPT against the materialised GPT (Phase 7's attention, float32) with the same weights on one
  batch, logits and every gradient (relative errors), on the device;
- ``curve``: training loss (the mean of the steps since the last evaluation) and validation loss every 250 steps,
  for minitorch and for PyTorch (bf16 autocast, ``scaled_dot_product_attention`` with dropout; on a GPU its model
  and loss compiled by ``torch.compile``, PyTorch's fastest training, and AdamW fused);
- ``sample``: 500 characters of the minitorch model (temperature 1, seed 0, after a newline) at steps 0, 500,
  1,000 and 2,000;
- ``best``: the best validation loss (bf16 autocast, as trained) and its step; a float64 re-evaluation of that
  checkpoint on the same windows (PyTorch's model in float64; the grader re-evaluates the saved pair with its own
  NumPy forward);
- ``step_variants``: the captured step of a throwaway model of the recipe's, timed for each way of running it
  (hgemm.py's rung 5, rung 6 or the fastest per shape; the weights' gradients on a side branch of the graph or
  not): the training runs the fastest;
- ``step``: one training step (host time included): minitorch captured (the training's graph) and from Python,
  PyTorch eager, ``torch.compile`` and captured in a CUDA graph (capturable AdamW), same weights and batch; ratios;
- ``kernel``: one captured minitorch step split by kernel (``torch.profiler``: calls, µs a step, share);
- ``gemm``: the step's matrix-product shapes on each hgemm variant, µs a call;
- ``attention_map``: a few heads of the best model on a short prompt;
- ``summary``: the numbers the deliverable bounds.

``--save PATH.json`` writes the best checkpoint as the deliverable pair (``minitorch.nn.save_deliverable``: the
record PATH.json and the parameters PATH.npz beside it), which the grader re-evaluates in float64.

On a GPU: ``python benchmarks/phase8b_nanogpt.py --save OUT/nanogpt_model.json`` (about four minutes on an H100).
``--step-only`` trains nothing: the ``check``, ``gemm``, ``step_variants``, ``step`` and ``kernel`` rows, and PyTorch's
eager step split by kernel (``torch_kernel`` rows), into ``phase8b_nanogpt_step-<device>.json`` (about two minutes
on an H100): the step's time after a change, without the four minutes of training.
``--smoke`` runs every line on the emulator with a reduced model and a few steps (PyTorch on the cpu: no captured or
compiled rows) and writes its JSON into a temporary directory: a check of the script, not a result.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import phase7_gpt as gpt
from common import RESULTS, ROOT, emulator_name, gpu_name, slug, software, solution_sources, time_gpu
from torch_gpt import load_weights
from torch_gpt import torch_gpt as torch_gpt_model
from torch_gpt import torch_optimizer as torch_adamw

LABS = gpt.LABS + ("phase8a_tensor_cores", "phase8b_flash")
SEED = 0
# init "gpt2": nanoGPT's initial values (GPT.__init__'s init; the H100 run committed on 2026-11-27 used Phase 7's,
# "phase7", and reached 1.528, PyTorch from the same weights 1.521: see the JSON's config.init)
RECIPE = dict(model=dict(d_model=384, n_head=6, n_layer=6, block_size=256), init="gpt2", dropout=0.2,
              tie_weights=True, batch_size=64, max_lr=1e-3, min_lr=1e-4, warmup=100, total=5000, steps=2000, betas=(0.9, 0.99),
              weight_decay=0.1, clip=1.0, eval_every=250, eval_windows=gpt.EVAL_WINDOWS,
              sample_at=(0, 500, 1000, 2000), sample_chars=500, temperature=1.0,
              map_layers=(0, 5), map_heads=(0, 1, 2), map_chars=48)
# the emulator's check of the script: D = 64 (flash's smallest head dim) over 2 heads, one layer, a few steps
SMOKE = dict(RECIPE, model=dict(d_model=128, n_head=2, n_layer=1, block_size=16), batch_size=2, warmup=2, total=12,
             steps=4, eval_every=2, eval_windows=4, sample_at=(0, 4), sample_chars=12, map_layers=(0,),
             map_heads=(0,), map_chars=10)
PROMPT = "\n"
MAP_TEXT = "ROMEO:\nBut, soft! what light through yonder window breaks?"


def schedule_of(cfg: dict):
    from minitorch import optim

    return optim.WarmupCosine(max_lr=cfg["max_lr"], min_lr=cfg["min_lr"], warmup=cfg["warmup"], total=cfg["total"])


# ---------------------------------------------------------------- PyTorch's model and step


def torch_gpt(cfg: dict, vocab: int, device: str):
    """nanoGPT's model in PyTorch (benchmarks/torch_gpt.py; ``load_weights`` copies minitorch's weights into it):
    dropout after the embeddings, on both residual branches, and on the attention probabilities
    (``scaled_dot_product_attention(..., dropout_p)`` while training); the head tied to the token table."""
    return torch_gpt_model(cfg["model"], vocab, device, cfg["tie_weights"], cfg["dropout"], cfg["dropout"])


def torch_optimizer(net, model, cfg: dict, **kw):
    """AdamW over minitorch's two groups (the Linear matrices decay), the recipe's betas, and a LambdaLR giving
    PyTorch's step k the rate minitorch's WarmupCosine gives its step k + 1."""
    return torch_adamw(net, model, cfg["weight_decay"], schedule_of(cfg), betas=cfg["betas"], **kw)


def torch_autocast(device: str):
    import torch

    # cache_enabled=False: the autocast weight cache cannot live across a CUDA graph capture
    return torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False)


def torch_val_loss(net, val_x: np.ndarray, val_y: np.ndarray, vocab: int, device: str, autocast: bool = True) -> float:
    """PyTorch's mean loss of ``net`` on the validation windows, 32 a forward pass, in eval mode: under bf16
    autocast (as it trains; the logits widened to float32 for the loss), or in the net's own dtype (``autocast``
    False: the float64 re-evaluation of a checkpoint)."""
    import contextlib

    import torch
    import torch.nn.functional as TF  # noqa: N812

    was = net.training
    net.eval()
    total = 0.0
    with torch.no_grad(), torch_autocast(device) if autocast else contextlib.nullcontext():
        for i in range(0, len(val_x), 32):
            xs = torch.from_numpy(val_x[i:i + 32].astype(np.int64)).to(device)
            ys = torch.from_numpy(val_y[i:i + 32].astype(np.int64)).to(device)
            logits = net(xs)
            logits = logits.float() if autocast else logits
            total += TF.cross_entropy(logits.view(-1, vocab), ys.view(-1), reduction="sum").item()
    net.train(was)
    return total / val_y.size


# ---------------------------------------------------------------- minitorch's model and step


def minitorch_model(cfg: dict, vocab: int, attention: str = "flash"):
    from minitorch import nn

    return nn.GPT(vocab, **cfg["model"], seed=SEED, tie_weights=cfg["tie_weights"], dropout=cfg["dropout"],
                  attention=attention, init=cfg["init"])


def minitorch_step(model, opt, xb, yb, vocab: int, clip: float):
    """The recipe's step: the forward and the loss under bf16 autocast, backward, clipping, AdamW (the rate of the
    schedule computed on the device: a captured step replays each step's own rate)."""
    from minitorch import amp, optim
    from minitorch import functional as F  # noqa: N812

    b, t = xb.shape

    def step():
        with amp.autocast("bfloat16"):
            loss = F.cross_entropy(model(xb).reshape(b * t, vocab), yb.reshape(b * t))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss

    return step


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30))


def check_row(cfg: dict, vocab: int, x: np.ndarray, y: np.ndarray) -> dict:
    """The flash GPT against the materialised one (float32, Phase 7's attention), same weights and batch, dropout
    off, bf16 autocast off for the reference: the logits and every gradient, relative errors."""
    import minitorch
    from minitorch import amp, nn
    from minitorch import functional as F  # noqa: N812

    results = {}
    for attention in ("flash", "materialised"):
        model = nn.GPT(vocab, **cfg["model"], seed=SEED, tie_weights=cfg["tie_weights"], attention=attention,
                       init=cfg["init"])
        xb, yb = minitorch.tensor(x, dtype="int32"), minitorch.tensor(y.reshape(-1), dtype="int32")
        with amp.autocast("bfloat16", enabled=attention == "flash"):
            logits = model(xb)
            loss = F.cross_entropy(logits.reshape(-1, vocab), yb)
        loss.backward()
        results[attention] = (logits.numpy(), {n: p.grad.numpy() for n, p in model.named_parameters()},
                              loss.item())
    (lf, gf, loss_f), (lm, gm, loss_m) = results["flash"], results["materialised"]
    grads = {n: relative(gf[n], gm[n].astype(np.float64)) for n in gm}
    row = {"kind": "check", "batch": list(x.shape), "logits_relative_error": relative(lf, lm.astype(np.float64)),
           "loss_flash_bf16": loss_f, "loss_materialised_fp32": loss_m,
           "grad_relative_error_max": max(grads.values()), "grad_relative_error_worst": max(grads, key=grads.get),
           "grad_relative_errors": grads}
    print(f"check: flash GPT (bf16 autocast) against the materialised one (fp32): logits {row['logits_relative_error']:.2e}, "
          f"loss {loss_f:.5f} / {loss_m:.5f}, gradients at most {row['grad_relative_error_max']:.2e} "
          f"({row['grad_relative_error_worst']})", flush=True)
    return row


# ---------------------------------------------------------------- the training runs


def evaluator(cfg: dict, vocab: int, val_ids: np.ndarray):
    """minitorch's validation loss: the grader's windows (Phase 7's, text.evaluation_windows), eval mode, under
    bf16 autocast as the training's forward, 32 windows a forward pass."""
    import minitorch
    from minitorch import amp, text
    from minitorch import functional as F  # noqa: N812

    t = cfg["model"]["block_size"]
    val_x, val_y = text.evaluation_windows(val_ids, t, cfg["eval_windows"])
    chunks = [(minitorch.tensor(val_x[i:i + 32], dtype="int32"),
               minitorch.tensor(val_y[i:i + 32].reshape(-1), dtype="int32"), len(val_x[i:i + 32]))
              for i in range(0, len(val_x), 32)]

    def val_loss(model) -> float:
        model.eval()
        total = 0.0
        with minitorch.no_grad(), amp.autocast("bfloat16"):
            for xt, yt, n in chunks:
                total += F.cross_entropy(model(xt).reshape(-1, vocab), yt).item() * n
        model.train()
        return total / len(val_x)

    return val_loss, (val_x, val_y)


def train_minitorch(cfg: dict, model, tokenizer, train_ids, val_ids, vocab: int) -> tuple[list[dict], dict]:
    import minitorch
    from minitorch import backend, graph, optim, text

    b, t = cfg["batch_size"], cfg["model"]["block_size"]
    opt = optim.AdamW(model.optimizer_groups(cfg["weight_decay"]), lr=cfg["max_lr"], betas=cfg["betas"],
                      schedule=schedule_of(cfg))
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    step = minitorch_step(model, opt, xb, yb, vocab, cfg["clip"])
    val_loss, _ = evaluator(cfg, vocab, val_ids)
    windows = text.RandomWindows(train_ids, t, b, seed=SEED)
    captured = graph.capture(step)
    # each step's loss, copied on the device into a slot of its own (no synchronisation a step); read at evaluations
    slots = [minitorch.zeros(()) for _ in range(cfg["eval_every"])]

    def sample() -> str:
        out = model.generate(tokenizer.encode(PROMPT)[None, :], cfg["sample_chars"], temperature=cfg["temperature"],
                             seed=SEED)
        return tokenizer.decode(out.numpy()[0, len(PROMPT):])

    rows, best = [], {"val_loss": float("inf"), "step": -1, "state": None}
    aside, start = 0.0, time.perf_counter()
    for i in range(cfg["steps"] + 1):
        if i in cfg["sample_at"] or i % cfg["eval_every"] == 0 or i == cfg["steps"]:
            backend.synchronize()
            began = time.perf_counter()
            if i % cfg["eval_every"] == 0 or i == cfg["steps"]:
                since = i - (i - 1) // cfg["eval_every"] * cfg["eval_every"] if i else 0
                train = float(np.mean([slot.item() for slot in slots[:since]])) if since else float("nan")
                val = val_loss(model)
                rows.append({"kind": "curve", "framework": "minitorch", "step": i, "train_loss": train,
                             "val_loss": val})
                print(f"minitorch step {i}: train {train:.4f}, val {val:.4f} "
                      f"({time.perf_counter() - start - aside:.1f} s of training so far)", flush=True)
                if val < best["val_loss"]:
                    best = {"val_loss": val, "step": i, "state": model.state_dict()}
            if i in cfg["sample_at"]:
                rows.append({"kind": "sample", "framework": "minitorch", "step": i, "text": sample(),
                             "temperature": cfg["temperature"], "seed": SEED, "prompt": PROMPT})
            aside += time.perf_counter() - began
        if i == cfg["steps"]:
            break
        x, y = windows.sample()
        xb.copy_from(x)
        yb.copy_from(y)
        captured.replay()
        slots[i % cfg["eval_every"]].copy_(captured.output)  # a device copy, in order with the step
    backend.synchronize()
    training = time.perf_counter() - start - aside
    return rows, {"best": best, "train_seconds": training, "captured": captured, "xb": xb, "yb": yb, "step": step,
                  "launches": captured.launches}


def captured_step(cfg: dict, model, vocab: int) -> dict:
    """The training's step without the training (``--step-only``): AdamW on the recipe's schedule, the step on
    device batch buffers, run once eagerly (kernels compiled, buffers made) and captured: what ``step_row`` and
    ``kernel_rows`` take from ``train_minitorch``."""
    import minitorch
    from minitorch import graph, optim

    b, t = cfg["batch_size"], cfg["model"]["block_size"]
    opt = optim.AdamW(model.optimizer_groups(cfg["weight_decay"]), lr=cfg["max_lr"], betas=cfg["betas"],
                      schedule=schedule_of(cfg))
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    step = minitorch_step(model, opt, xb, yb, vocab, cfg["clip"])
    step()
    captured = graph.capture(step)
    return {"xb": xb, "yb": yb, "step": step, "captured": captured, "launches": captured.launches}


def train_torch(cfg: dict, net, model, train_ids, val_data, vocab: int, device: str) -> dict:
    """PyTorch's run of the recipe on minitorch's batches: on a GPU its forward and loss compiled by
    ``torch.compile`` (the fastest way PyTorch trains it; the compiled function is timed again in step_row),
    AdamW fused; on the cpu eager. Returns the curve, the seconds (the first step, where compilation happens,
    apart) and the loss function."""
    import torch
    import torch.nn.functional as TF  # noqa: N812

    from minitorch import text

    b, t = cfg["batch_size"], cfg["model"]["block_size"]
    opt, sched = torch_optimizer(net, model, cfg, fused=device == "cuda")

    def loss_of(a, b):
        return TF.cross_entropy(net(a).view(-1, vocab), b.view(-1))

    loss_fn = torch.compile(loss_of) if device == "cuda" else loss_of
    txb = torch.zeros((b, t), dtype=torch.long, device=device)
    tyb = torch.zeros((b, t), dtype=torch.long, device=device)

    def val_loss() -> float:
        return torch_val_loss(net, *val_data, vocab, device)

    windows = text.RandomWindows(train_ids, t, b, seed=SEED)  # minitorch's batches, in the same order
    rows, losses, aside, start, first = [], [], 0.0, time.perf_counter(), 0.0
    for i in range(cfg["steps"] + 1):
        if i == 1:  # the first step compiled the model: timed apart
            if device == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - start - aside
            aside += first
        if i % cfg["eval_every"] == 0 or i == cfg["steps"]:
            began = time.perf_counter()
            train = float(torch.stack(losses).mean().item()) if losses else float("nan")
            losses = []
            val = val_loss()
            rows.append({"kind": "curve", "framework": "pytorch", "step": i, "train_loss": train, "val_loss": val})
            print(f"PyTorch step {i}: train {train:.4f}, val {val:.4f}", flush=True)
            aside += time.perf_counter() - began
        if i == cfg["steps"]:
            break
        x, y = windows.sample()
        txb.copy_(torch.from_numpy(x.astype(np.int64)))
        tyb.copy_(torch.from_numpy(y.astype(np.int64)))
        with torch_autocast(device):
            loss = loss_fn(txb, tyb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg["clip"])
        opt.step()
        sched.step()
        losses.append(loss.detach().float())
    if device == "cuda":
        torch.cuda.synchronize()
    return {"rows": rows, "seconds": time.perf_counter() - start - aside, "first_step_seconds": first,
            "loss_fn": loss_fn if device == "cuda" else None,
            "how": "torch.compile, fused AdamW" if device == "cuda" else "eager (cpu)"}


# ---------------------------------------------------------------- one step, timed; the kernels


def step_row(cfg: dict, run: dict, net, model, vocab: int, x: np.ndarray, y: np.ndarray, device: str,
             compiled_loss=None, torch_kernels: list | None = None, row: dict | None = None) -> dict:
    """One step timed alone on one batch (host time included), minitorch captured (the training's graph) and
    from Python, PyTorch eager / compiled / captured (``net`` None: PyTorch is not installed, no PyTorch rows).
    The trained models keep training on it: times only. ``torch_kernels``, a list: PyTorch's eager step split by
    kernel (``torch_kernel`` rows, as ``kernel_rows``) is appended to it, on a GPU. ``row``: a dict to fill as
    the times come (a run stopped part way keeps those measured), returned."""
    time_of = gpt.timer(device)
    run["xb"].copy_from(x)
    run["yb"].copy_from(y)
    row = {} if row is None else row
    row.update({"kind": "step", "batch": cfg["batch_size"], "context": cfg["model"]["block_size"],
                "launches": run["launches"]})
    row["minitorch_captured_seconds"] = time_of(run["captured"].replay)
    row["minitorch_eager_seconds"] = time_of(run["step"])
    if net is None:
        row["pytorch_skipped"] = "PyTorch is not installed here"
        print(f"one step: minitorch captured {row['minitorch_captured_seconds'] * 1e3:.2f} ms ({run['launches']} "
              f"launches); PyTorch skipped (not installed)", flush=True)
        return row
    import torch
    import torch.nn.functional as TF  # noqa: N812

    txb, tyb = (torch.from_numpy(a.astype(np.int64)).to(device) for a in (x, y))

    def step_of(opt):
        def torch_step():
            with torch_autocast(device):
                loss = TF.cross_entropy(net(txb).view(-1, vocab), tyb.view(-1))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg["clip"])
            opt.step()
            return loss
        return torch_step

    eager = step_of(torch_optimizer(net, model, cfg)[0])
    row["pytorch_eager_seconds"] = time_of(eager)
    if torch_kernels is not None and device == "cuda":
        torch_kernels += kernel_rows(eager, device, kind="torch_kernel", who="PyTorch's eager step")
    if device == "cuda":
        gc.collect()
        row["pytorch_captured_seconds"] = time_of(gpt.torch_captured(step_of(
            torch_optimizer(net, model, cfg, capturable=True)[0])).replay)
        opt = torch_optimizer(net, model, cfg, fused=True)[0]
        if compiled_loss is None:  # PyTorch's training compiled it already, where it ran
            compiled_loss = torch.compile(lambda a, b: TF.cross_entropy(net(a).view(-1, vocab), b.view(-1)))

        def compiled_step():
            with torch_autocast(device):
                loss = compiled_loss(txb, tyb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg["clip"])
            opt.step()
            return loss

        try:
            began = time.perf_counter()
            for _ in range(3):
                compiled_step()
            torch.cuda.synchronize()
            row["pytorch_compile_warmup_seconds"] = time.perf_counter() - began
            row["pytorch_compiled_seconds"] = time_of(compiled_step)
        except Exception as exc:  # noqa: BLE001 (no Triton, ...: say why)
            row["pytorch_compiled_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
    else:
        row["pytorch_captured_skipped"] = row["pytorch_compiled_skipped"] = "the --smoke check runs PyTorch on the cpu"
    ours = row["minitorch_captured_seconds"]
    for way in ("eager", "captured", "compiled"):
        if f"pytorch_{way}_seconds" in row:
            row[f"ratio_to_pytorch_{way}"] = ours / row[f"pytorch_{way}_seconds"]
    theirs = {w: row[f"pytorch_{w}_seconds"] for w in ("eager", "captured", "compiled") if f"pytorch_{w}_seconds" in row}
    row["best_pytorch"] = min(theirs, key=theirs.get)
    row["ratio_to_best_pytorch"] = ours / theirs[row["best_pytorch"]]
    print("one step: minitorch captured {:.2f} ms ({} launches), from Python {:.2f} ms; ".format(
        ours * 1e3, run["launches"], row["minitorch_eager_seconds"] * 1e3)
        + "PyTorch " + ", ".join(f"{w} {s * 1e3:.2f} ms ({ours / s:.2f}x)" for w, s in theirs.items()), flush=True)
    return row


def branch_check(model, xb, yb, vocab: int, choice) -> float:
    """The largest relative difference, over the parameters, between the gradients of one batch computed by a
    captured forward and backward with the weights' gradients on a side branch of the graph and without
    (eval mode: no dropout, one answer; a GPU's atomics leave ~1e-3). A branch read before it finished would
    give stale or unwritten values: far more."""
    from minitorch import amp, graph, ops
    from minitorch import functional as F  # noqa: N812

    b, t = xb.shape

    def grads():
        with amp.autocast("bfloat16"):
            loss = F.cross_entropy(model(xb).reshape(b * t, vocab), yb.reshape(b * t))
        for p in model.parameters():
            p.grad = None
        loss.backward()
        return loss

    model.eval()
    results = {}
    try:
        for branches in (False, True):
            previous, was = ops.set_hgemm_variant(choice), ops.set_concurrent_weight_grads(branches)
            try:
                grads()  # eagerly first: kernels compiled and buffers made outside the capture
                captured = graph.capture(grads)
                captured.replay()
                results[branches] = {n: p.grad.numpy() for n, p in model.named_parameters()}
                del captured
            finally:
                ops.set_hgemm_variant(previous)
                ops.set_concurrent_weight_grads(was)
    finally:
        model.train()
    return max(relative(results[True][n], results[False][n].astype(np.float64)) for n in results[False])


def variant_row(cfg: dict, vocab: int, x: np.ndarray, y: np.ndarray, device: str, policy,
                explore: bool = False) -> tuple[dict, str, tuple]:
    """The captured step of a throwaway model (the recipe's, its own weights: the training's stay PyTorch's) timed
    on one batch for each way of running its products: hgemm.py's rung 5 everywhere ("pipeline"), the fastest
    variant per shape ("autotuned", from the gemm rows), and that with the weights' gradients on a side branch of
    the graph ("autotuned+branches", ops.set_concurrent_weight_grads); and the fastest per shape with no product
    split along K ("autotuned_unsplit", ops.set_split_k(0); with ``explore`` only, as ``--step-only`` runs).
    Returns the row, the fastest way's name and its
    (variant, branches, split setting)."""
    import minitorch
    from minitorch import graph, ops, optim

    ways = {"best": (None, False, None)}
    if device == "cuda":
        # rung 5 everywhere (the baseline), the fastest rung per shape, that with the weight gradients unsplit (as
        # the 2026-11-27 run had most of them), and with branches (last: the riskiest)
        ways = {"pipeline": ("pipeline", False, None), "autotuned": (policy, False, None),
                "autotuned_unsplit": (policy, False, 0), "autotuned+branches": (policy, True, None)}
        if not explore:  # the training's run: its time stays that of the ways it may train with
            del ways["autotuned_unsplit"]
    model = minitorch_model(cfg, vocab)
    opt = optim.AdamW(model.optimizer_groups(cfg["weight_decay"]), lr=cfg["max_lr"], betas=cfg["betas"],
                      schedule=schedule_of(cfg))
    xb, yb = minitorch.tensor(x, dtype="int32"), minitorch.tensor(y, dtype="int32")
    step = minitorch_step(model, opt, xb, yb, vocab, cfg["clip"])
    time_of = gpt.timer(device)
    row: dict = {"kind": "step_variants", "batch": cfg["batch_size"]}
    if any(branches for _, branches, _ in ways.values()):
        try:
            row["branch_check_worst"] = worst = branch_check(model, xb, yb, vocab, policy)
            print(f"gradients with and without branches: largest relative difference {worst:.2e}", flush=True)
            if not worst <= 1e-2:
                row["branches_refused"] = f"the gradients differ by {worst:.2e} (> 1e-2) with branches"
        except Exception as exc:  # noqa: BLE001
            row["branches_refused"] = f"{type(exc).__name__}: {exc}"[:300]
    for name, (choice, branches, split) in ways.items():
        if branches and "branches_refused" in row:
            row[f"{name}_skipped"] = row["branches_refused"]
            continue
        if branches and any(f"{k}_skipped" in row for k, (_, b, _) in ways.items() if b):
            row[f"{name}_skipped"] = "another way with branches failed: not tried"
            continue
        previous, was = ops.set_hgemm_variant(choice), ops.set_concurrent_weight_grads(branches)
        split_was = ops.set_split_k(split)
        try:
            step()  # eagerly first: kernels compiled and buffers made outside the capture
            captured = graph.capture(step)
            row[f"{name}_seconds"] = time_of(captured.replay)
            row[f"{name}_launches"] = captured.launches
            del captured
        except Exception as exc:  # noqa: BLE001 (a variant this card cannot run: say why, time the others)
            row[f"{name}_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            ops.set_hgemm_variant(previous)
            ops.set_concurrent_weight_grads(was)
            ops.set_split_k(split_was)
    timed = {name: row[f"{name}_seconds"] for name in ways if f"{name}_seconds" in row}
    best = min(timed, key=timed.get)
    row["fastest"] = best
    print("captured step by way of running it: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in timed.items())
          + "".join(f"; {k} skipped ({row[f'{k}_skipped']})" for k in ways if f"{k}_skipped" in row)
          + f"; training with {best}", flush=True)
    return row, best, ways[best]


def kernel_rows(fn, device: str, kind: str = "kernel", who: str = "one captured step") -> list[dict]:
    """A step (``fn()``: a captured step's replay) split by kernel under ``torch.profiler``: ``kind`` rows (calls, µs a
    step, share) and a ``<kind>_busy`` row (GPU-busy µs a step); on a GPU only."""
    if device != "cuda":
        return []
    from phase7_step_profile import kernel_table

    table, busy = kernel_table(fn)
    print(f"{who}: GPU busy {busy / 1e3:.2f} ms; the largest kernels:", flush=True)
    for r in table[:15]:
        print(f"  {r['share']:6.1%} {r['us_per_call']:8.1f} us x {r['calls_per_step']:4.1f}  {r['name'][:110]}")
    return [{**r, "kind": kind} for r in table] + [{"kind": f"{kind}_busy", "busy_us_per_step": busy}]


def gemm_rows(cfg: dict, device: str, explore: bool = False) -> list[dict]:
    """The step's products (M = B T rows) on each variant of hgemm.py: forward, dX and dW shapes, µs a call, on
    random bf16 operands; a product that ``ops.matmul`` splits along K (the weight gradients: ``split_k``) also as
    it runs it (``split_us``: the pieces' batched launch and their sum)."""
    if device != "cuda":
        return []
    import cupy

    from minitorch import kernels
    from minitorch.tensor import Tensor

    hg = kernels.load_module("hgemm.py")
    m = cfg["batch_size"] * cfg["model"]["block_size"]
    c = cfg["model"]["d_model"]
    rows = []
    for name, (k_in, n_out) in {"c_attn": (c, 3 * c), "c_proj": (c, c), "fc": (c, 4 * c), "proj": (4 * c, c)}.items():
        def bf16(*shape):
            return (cupy.random.standard_normal(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)

        x, w, dy = bf16(m, k_in), bf16(k_in, n_out), bf16(m, n_out)
        cases = {"forward": (x, w, cupy.empty((m, n_out), np.float32), False, False),
                 "grad_input": (dy, w, cupy.empty((m, k_in), np.float32), False, True),
                 "grad_weight": (x, dy, cupy.empty((k_in, n_out), np.float32), True, False)}
        for case, (a, b, out, ta, tb) in cases.items():
            row = {"kind": "gemm", "layer": name, "product": case, "M": out.shape[0], "N": out.shape[1],
                   "K": a.shape[0] if ta else a.shape[1], "transpose_a": ta, "transpose_b": tb}
            for variant in ("pipeline", "wgmma"):
                try:
                    row[f"{variant}_us"] = time_gpu(lambda a=a, b=b, out=out, ta=ta, tb=tb, v=variant: hg.hgemm(
                        a, b, out, "bfloat16", variant=v, transpose_a=ta, transpose_b=tb), max_seconds=0.15,
                        flush=False) * 1e6
                except Exception as exc:  # noqa: BLE001
                    row[f"{variant}_skipped"] = f"{type(exc).__name__}: {exc}"[:200]
            try:
                row.update(split_timings(row, Tensor(a, "cuda"), Tensor(b, "cuda"), ta, tb, explore=explore))
            except Exception as exc:  # noqa: BLE001 (the variants' times stay: the autotuned policy needs them)
                row["split_skipped"] = f"{type(exc).__name__}: {exc}"[:200]
            flops = 2 * row["M"] * row["N"] * row["K"]
            row.update({f"{v}_tflops": flops / row[f"{v}_us"] / 1e6 for v in ("pipeline", "wgmma", "split")
                        if f"{v}_us" in row})
            rows.append(row)
            print(f"gemm {name} {case} {row['M']}x{row['N']}x{row['K']}: "
                  + ", ".join(f"{v} {row[f'{v}_us']:.1f} us" for v in ("pipeline", "wgmma", "split")
                              if f"{v}_us" in row), flush=True)
    return rows


def split_timings(row: dict, a16, b16, ta: bool, tb: bool, timer=None, explore: bool = True) -> dict:
    """A product that ``ops.matmul`` splits along K (``split_k``: the weight gradients), timed as the step runs it
    (the pieces' batched launch on rung 5 and their sum): ``split_us`` at the default number of pieces
    (``split_pieces``), and with ``explore`` ``split_us_by_pieces`` at 2, 4, 8 and 16 (the target set to tiles x
    pieces); nothing for a product that is not split."""
    from minitorch import ops

    pieces = ops.linalg.split_k(row["M"], row["N"], row["K"], ta, tb)
    if pieces == 1:
        return {}
    timer = timer or (lambda fn: time_gpu(fn, max_seconds=0.1, flush=False))

    def us() -> float:
        return timer(lambda: ops.matmul(a16, b16, transpose_a=ta, transpose_b=tb, out_dtype="float32")) * 1e6

    out = {"split_pieces": pieces, "split_us": us()}
    if not explore:
        return out
    out["split_us_by_pieces"] = {}
    tiles = -(-row["M"] // 128) * -(-row["N"] // 128)
    for p in (2, 4, 8, 16):
        previous = ops.set_split_k(tiles * p)
        try:
            assert ops.linalg.split_k(row["M"], row["N"], row["K"], ta, tb) == p
            out["split_us_by_pieces"][p] = us()
        finally:
            ops.set_split_k(previous)
    return out


def autotuned(rows: list[dict]):
    """The fastest variant of each product shape measured by gemm_rows, as a set_hgemm_variant policy (other
    shapes: the launcher's best); and the table itself."""
    table = {}
    for r in rows:
        timed = {v: r[f"{v}_us"] for v in ("pipeline", "wgmma") if f"{v}_us" in r}
        if timed:
            table[(r["M"], r["N"], r["K"], r["transpose_a"], r["transpose_b"])] = min(timed, key=timed.get)

    def policy(m: int, n: int, k: int, ta: bool, tb: bool) -> str:
        return table.get((m, n, k, ta, tb), "best")

    return policy, {f"{m}x{n}x{k}{' Aᵀ' if ta else ''}{' Bᵀ' if tb else ''}": v
                    for (m, n, k, ta, tb), v in table.items()}


# ---------------------------------------------------------------- the deliverable


def save_checkpoint(path: Path, cfg: dict, model, tokenizer, best: dict, grader_val: float | None, device: str,
                    train_seconds: float, configuration: str) -> None:
    """The best checkpoint as the deliverable pair (Phase 7's record, plus the capstone's fields)."""
    from minitorch import data, nn

    record = {
        "format": 1,
        "model": "minitorch.nn.GPT: wte, wpe, blocks.<i>.{ln1, attn.c_attn, attn.c_proj, ln2, fc, proj}, ln_f, "
                 f"lm_head in {path.stem}.npz (tie_weights: the head is wte.weight transposed, plus lm_head.bias)",
        "config": model.config, "chars": tokenizer.chars, "train_fraction": 0.9,
        "data_sha256": data.DATASETS["tinyshakespeare"][0].sha256,
        "configuration": configuration, "device": device,
        "train": {k: cfg[k] for k in ("batch_size", "steps", "eval_every", "eval_windows", "betas", "clip")},
        "weight_decay": cfg["weight_decay"], "clip": cfg["clip"], "seed": SEED, "dropout": cfg["dropout"],
        "schedule": dataclasses.asdict(schedule_of(cfg)), "autocast": "bfloat16",
        "val_loss": best["val_loss"], "best_step": best["step"], "val_loss_float64": grader_val,
        "train_seconds": train_seconds,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    nn.save_deliverable(path.parent, path.name, record, {f"{path.stem}.npz": best["state"]})
    print(f"saved the best checkpoint (step {best['step']}, val {best['val_loss']:.4f}) as {path} and "
          f"{path.with_suffix('.npz')}", flush=True)


def float64_val_loss(cfg: dict, model, state: dict, val_ids: np.ndarray, vocab: int, device: str, net=None) -> tuple:
    """A float64 re-evaluation of a checkpoint on the grader's validation windows: PyTorch's model in float64
    (where PyTorch is installed: on the GPU, seconds), else the grader's own NumPy forward
    (``grader/tests/test_phase7_gpt.py: logits_of``; minutes of CPU at the recipe's size, so the smoke check's
    only). Returns (loss, how)."""
    from minitorch import text

    val_x, val_y = text.evaluation_windows(val_ids, cfg["model"]["block_size"], cfg["eval_windows"])
    if net is not None:
        from minitorch import nn

        saved = nn.GPT(vocab, **cfg["model"], seed=SEED, tie_weights=cfg["tie_weights"], device="cpu")
        saved.load_state_dict(state)
        ref = torch_gpt(cfg, vocab, device)
        load_weights(ref, saved)
        return torch_val_loss(ref.double(), val_x, val_y, vocab, device, autocast=False), "pytorch float64"
    from grader.tests import test_phase7_gpt as grader

    params = {name: np.asarray(value, np.float64) for name, value in state.items()}
    z = grader.logits_of(params, {**model.config, "tie_weights": model.tie_weights}, val_x)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(log_p, val_y[..., None], axis=-1).mean()), "the grader's numpy float64 forward"


def guarded(rows: list[dict], section: str, fn, default=None):
    """fn(), or, where it raises, ``default`` and an ``error`` row naming the section: a late part of the run that
    fails (a profiler, a compiler) must not lose the training's rows and checkpoint."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        rows.append({"kind": "error", "section": section, "error": f"{type(exc).__name__}: {exc}"[:500]})
        print(f"{section} failed: {type(exc).__name__}: {exc}", flush=True)
        return default


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="the emulator, a reduced model, a few steps: a check")
    parser.add_argument("--steps", type=int, help="train this many steps (default: the recipe's 2,000 of 5,000)")
    parser.add_argument("--save", type=Path, help="write the best checkpoint here (a .json record; the .npz beside it)")
    parser.add_argument("--out", type=Path, help="write the JSON here (a file, or a directory for the default name) "
                        "instead of benchmarks/results/")
    parser.add_argument("--hgemm-variant", help="train with this hgemm.py variant for every product (default: the "
                        "fastest way of the step_variants row, measured first)")
    parser.add_argument("--no-torch-training", action="store_true", help="skip PyTorch's curve (a quicker probe)")
    parser.add_argument("--step-only", action="store_true", help="no training: the check, the products, the ways "
                        "of running the step, one step of each framework timed and both split by kernel, into "
                        "phase8b_nanogpt_step-<device>.json (about two minutes on an H100)")
    args = parser.parse_args(argv)
    if args.step_only and (args.save is not None or args.steps is not None):
        parser.error("--step-only trains nothing: no --save, no --steps")
    if args.save is not None and args.save.suffix != ".json":
        parser.error(f"--save takes the record's path, ending in .json (the .npz goes beside it), got {args.save}")
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    try:
        import torch
    except ImportError:  # the --smoke check on a machine without PyTorch: minitorch's rows only
        torch = None
    import minitorch
    from minitorch import ops
    from minitorch.kernels import write_source

    device = "emu" if args.smoke else "cuda"
    if device == "cuda" and not minitorch.cuda_available():
        print("no usable GPU: run with --smoke for a check of the script on the emulator", file=sys.stderr)
        return 1
    minitorch.set_device(device)
    for lab in LABS:
        for name, source in solution_sources(f"{lab}.ipynb").items():
            write_source(name, source)
    cfg = dict(SMOKE if args.smoke else RECIPE)
    if args.steps is not None:
        cfg["steps"] = args.steps
        cfg["sample_at"] = tuple(s for s in cfg["sample_at"] if s <= args.steps)
    name = gpu_name() if device == "cuda" else emulator_name()
    print(f"device: {name}; {cfg['steps']} steps of the schedule's {cfg['total']}", flush=True)
    tdev = "cuda" if device == "cuda" else "cpu"
    if torch is None and device == "cuda":
        print("PyTorch is not installed: the GPU run races it", file=sys.stderr)
        return 1
    if torch is not None:
        torch.manual_seed(SEED)
    tokenizer, train_ids, val_ids = gpt.shakespeare_ids()
    vocab = tokenizer.vocab_size
    from minitorch import text

    probe_x, probe_y = text.RandomWindows(train_ids, cfg["model"]["block_size"], min(cfg["batch_size"], 8),
                                          seed=SEED + 1).sample()
    rows: list[dict] = []
    configuration = ("smoke" if args.smoke else "full") + (", step only" if args.step_only else "")
    stem = "phase8b_nanogpt_step" if args.step_only else "phase8b_nanogpt"
    default = f"{stem}-smoke.json" if args.smoke else f"{stem}-{slug(name)}.json"
    path = args.out or (Path(tempfile.mkdtemp(prefix="phase8b-nanogpt-smoke-")) if args.smoke else RESULTS) / default
    if path.is_dir():  # --out DIR: the default name there
        path = path / default
    chosen: dict = {"way": None, "hgemm_table": {}}

    def emit(complete: bool = False) -> None:
        """The JSON as it stands (rewritten after each part of the run: a run cut short keeps what it measured)."""
        config = dict(cfg, vocab_size=vocab, seed=SEED, torch=torch.__version__ if torch else None, attention="flash",
                      autocast="bfloat16", schedule=dataclasses.asdict(schedule_of(cfg)), decay="Linear matrices only",
                      stopped=f"at {cfg['steps']} of {cfg['total']} steps", **chosen)
        doc = {"benchmark": stem, "device": name, "date": datetime.date.today().isoformat(),
               "software": software(), "configuration": configuration, "complete": complete, "config": config,
               "results": rows}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        if complete:
            print(f"wrote {path}" + (" (not a result for the book)" if args.smoke else ""), flush=True)

    rows += guarded(rows, "check", lambda: [check_row(cfg, vocab, probe_x, probe_y)], [])
    gemms = guarded(rows, "gemm", lambda: gemm_rows(cfg, device, explore=args.step_only), [])
    rows += gemms
    policy, table = autotuned(gemms)
    if table:
        print(f"hgemm variants, the fastest per shape: {table}", flush=True)
    x, y = text.RandomWindows(train_ids, cfg["model"]["block_size"], cfg["batch_size"], seed=SEED + 2).sample()
    variants, way, (choice, branches, split) = variant_row(cfg, vocab, x, y, device, policy, explore=args.step_only)
    rows.append(variants)
    if args.hgemm_variant:  # a variant named on the command line, without branches, split as by default
        way, choice, branches, split = args.hgemm_variant, args.hgemm_variant, False, None
    ops.set_hgemm_variant(choice)
    ops.set_concurrent_weight_grads(branches)
    ops.set_split_k(split)
    chosen.update(way=way, hgemm_table=table)
    emit()

    model = minitorch_model(cfg, vocab)
    net = None
    if torch is not None:
        net = torch_gpt(cfg, vocab, tdev)
        load_weights(net, model)  # the same initial weights
    if args.step_only:
        # stopped by a time limit (SIGTERM, as timeout sends it): the JSON keeps what was measured
        signal.signal(signal.SIGTERM, lambda *_: (emit(), sys.exit(124)))
        run = captured_step(cfg, model, vocab)
        rows += guarded(rows, "kernel", lambda: kernel_rows(run["captured"].replay, device), [])
        emit()
        step: dict = {"kind": "step", "minitorch_captured_seconds": float("nan")}
        rows.append(step)
        guarded(rows, "step", lambda: step_row(cfg, run, net, model, vocab, x, y, tdev, torch_kernels=rows,
                                               row=step))
        rows.append({"kind": "summary", "step_ms": step["minitorch_captured_seconds"] * 1e3,
                     **{f"pytorch_{w}_ms": step[f"pytorch_{w}_seconds"] * 1e3 for w in ("eager", "captured", "compiled")
                        if f"pytorch_{w}_seconds" in step},
                     "ratio_to_pytorch_eager": step.get("ratio_to_pytorch_eager"),
                     "ratio_to_best_pytorch": step.get("ratio_to_best_pytorch"), "best_pytorch": step.get("best_pytorch"),
                     "launches_per_step": run["launches"], "way": way})
        emit(complete=True)
        return 0
    curve, run = train_minitorch(cfg, model, tokenizer, train_ids, val_ids, vocab)
    rows += curve
    emit()
    torch_seconds, torch_run = None, {}
    if net is not None and not args.no_torch_training:
        torch_run = train_torch(cfg, net, model, train_ids, evaluator(cfg, vocab, val_ids)[1], vocab, tdev)
        rows += torch_run["rows"]
        torch_seconds = torch_run["seconds"]
        emit()
    best = run["best"]
    began = time.perf_counter()
    grader_val, how = guarded(rows, "float64", lambda: float64_val_loss(cfg, model, best["state"], val_ids, vocab,
                                                                        tdev, net), (float("nan"), "failed"))
    rows.append({"kind": "best", "val_loss": best["val_loss"], "step": best["step"], "val_loss_float64": grader_val,
                 "float64_by": how, "float64_seconds": time.perf_counter() - began})
    print(f"best: val {best['val_loss']:.4f} (bf16 autocast) at step {best['step']}; in float64 ({how}): "
          f"{grader_val:.4f}", flush=True)
    emit()
    if args.save is not None:  # at once: the deliverable must not depend on the timings after it
        save_checkpoint(args.save, cfg, model, tokenizer, best, grader_val, device, run["train_seconds"], configuration)

    step = guarded(rows, "step", lambda: step_row(cfg, run, net, model, vocab, x, y, tdev, torch_run.get("loss_fn")),
                   {"kind": "step", "minitorch_captured_seconds": float("nan")})
    rows.append(step)
    emit()
    rows += guarded(rows, "kernel", lambda: kernel_rows(run["captured"].replay, device), [])
    emit()

    def attention_map_rows() -> list[dict]:
        model.load_state_dict(best["state"])  # the best model's attention
        line = MAP_TEXT[:cfg["map_chars"]]
        maps = model.attention_maps(minitorch.tensor(tokenizer.encode(line)[None, :], dtype="int32"))
        return [{"kind": "attention_map", "layer": layer, "head": head, "text": line,
                 "probs": np.round(maps[layer][0, head], 3).tolist()}
                for layer in cfg["map_layers"] for head in cfg["map_heads"]]

    rows += guarded(rows, "attention_map", attention_map_rows, [])

    summary = {"kind": "summary", "steps": cfg["steps"], "schedule_total": cfg["total"],
               "best_val_loss": best["val_loss"], "best_step": best["step"], "best_val_loss_float64": grader_val,
               "val_bar": 1.50, "val_within_bar": bool(grader_val <= 1.50),
               "train_seconds": run["train_seconds"], "pytorch_train_seconds": torch_seconds,
               "pytorch_training": torch_run.get("how"), "pytorch_first_step_seconds": torch_run.get("first_step_seconds"),
               "step_ms": step["minitorch_captured_seconds"] * 1e3,
               "ratio_to_pytorch_eager": step.get("ratio_to_pytorch_eager"),
               "ratio_to_best_pytorch": step.get("ratio_to_best_pytorch"), "best_pytorch": step.get("best_pytorch"),
               "launches_per_step": run["launches"], "parameters": int(sum(p.size for p in model.parameters())),
               # PyTorch's own run of the recipe on our H100 (shared/reference/performance-anchors.md), for reference
               "anchors": {"pytorch_eager_ms": 18.3, "pytorch_compiled_ms": 12.4, "pytorch_best_val": 1.458,
                           "pytorch_best_step": 2000, "nanogpt_published_best_val": 1.4697}}
    if torch_seconds is not None:
        theirs = [r for r in rows if r["kind"] == "curve" and r["framework"] == "pytorch"]
        summary["pytorch_best_val_loss"] = min(r["val_loss"] for r in theirs)
        summary["pytorch_best_step"] = min(theirs, key=lambda r: r["val_loss"])["step"]
    rows.append(summary)
    ratio = summary["ratio_to_best_pytorch"]
    print(f"summary: best val {best['val_loss']:.4f} at step {best['step']} (float64 {grader_val:.4f}; bar 1.50); "
          f"step {summary['step_ms']:.2f} ms" + (f" = {ratio:.2f}x PyTorch's best ({summary['best_pytorch']})"
                                                 if ratio else ""), flush=True)

    emit(complete=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.exit(main())
