"""Phase 7 benchmark: the Tiny Shakespeare GPT against PyTorch eager, and the transformer kernels one by one.

Runs on the reference solution files of Phases 1-7 (a temporary workspace) and writes
``benchmarks/results/phase7_gpt-<device>.json`` with rows of these kinds:

- ``bandwidth``: LayerNorm forward and backward (16384 x 768, GPT-2's width) and the masked softmax forward and
  backward (64 x 1024 x 1024 scores, full and causal), bytes moved per second against ``cupy.copyto`` of as many bytes (read + written);
  each kernel is first checked against NumPy in float64 on the very arrays it is timed on;
- ``attention``: the materialised causal attention (``ops.attention``: split, Q Kᵀ, softmax, P V, merge) against
  ``torch.nn.functional.scaled_dot_product_attention`` (float32, causal), forward, for the model's shapes and for a
  long sequence; the outputs must agree before either is timed;
- ``step``: one training step of the seed's GPT (2 layers, 4 heads, d_model 64, context 64, batch 64; AdamW over one
  flat buffer, as the lab): minitorch replaying the captured step, minitorch launching it from Python, PyTorch eager, PyTorch captured in a CUDA graph
  (``torch.cuda.graph``, capturable AdamW) and PyTorch compiled (``torch.compile`` of the model and its loss; a
  ``pytorch_compiled_skipped`` reason where it cannot run); same initial weights, same batch; ``best_ratio`` is
  minitorch's captured step against the fastest of the three. The two models must give the same validation loss
  from the same weights, and nearly the same after the same training, or nothing is timed;
- ``curve``: training and validation loss of minitorch (captured steps) and of PyTorch, trained from the same
  initial weights on the same batches for the lab's 1,000 steps (validation: the grader's 256 windows);
- ``sample``: 200 characters written by the minitorch model after 0, 250, 500 and 1,000 steps (seed 0);
- ``attention_map``: the probabilities of every head of the trained model on one line of text;
- ``summary``: final losses, training times, the step-time ratio.

On a GPU: ``python benchmarks/phase7_gpt.py`` (about three minutes on an H100, torch.compile's compilation included). ``--small`` runs every line on the
emulator with a reduced model, a few steps and tiny kernels (PyTorch on the cpu), and writes its JSON into a
temporary directory: a check of the script, whose numbers say nothing about a GPU. ``--kernels-only`` prints the
bandwidth rows and stops (seconds, no JSON). ``--calibrate 0,1,2,3`` trains
the lab's reduced configuration on the emulator from those seeds: the calibration of its bar. ``--flat-steps 0,1``
(a GPU) times only the captured step with AdamW per parameter and over one flat buffer (``step_flat`` rows), then
trains the lab's full recipe from those seeds (``recipe_full`` rows): ``phase7_gpt_flat-<device>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import ROOT, emulator_name, gpu_name, software, solution_sources, time_gpu, write_results
from torch_gpt import load_weights
from torch_gpt import torch_gpt as torch_gpt_model
from torch_gpt import torch_optimizer as torch_adamw

LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
        "phase5_fast", "phase6_cnn", "phase7_gpt")
# The lab's recipe (solutions/phase7_gpt.ipynb, "The deliverable"): full on a GPU, reduced for --small.
FULL = dict(model=dict(d_model=64, n_head=4, n_layer=2, block_size=64),
            train=dict(steps=1000, batch_size=64, lr=3e-3, eval_every=50), sample_at=(0, 250, 500, 1000))
SMALL = dict(model=dict(d_model=32, n_head=2, n_layer=1, block_size=16),
             train=dict(steps=20, batch_size=16, lr=1e-2, eval_every=10), sample_at=(0, 20))
# The lab's configuration on the emulator (its bar: phase7.shakespeare_val_loss_reduced), for --calibrate.
REDUCED = dict(model=dict(d_model=32, n_head=2, n_layer=1, block_size=16),
               train=dict(steps=300, batch_size=16, lr=1e-2))
WEIGHT_DECAY, CLIP, SEED, EVAL_WINDOWS, SAMPLE_CHARS = 0.1, 1.0, 0, 256, 200
# nanoGPT's recipe, as the lab trains it: AdamW decaying only the Linear matrices, the rate warmed up over the first
# tenth of the steps and decayed along a cosine to a tenth of its peak, the head tied to the token table and dropout
# RECIPE_DROPOUT (REDUCED_DROPOUT in the emulator's reduced configuration: its 300 steps of 16 x 16 tokens have
# little to regularise, and p = 0.1 cost it 0.03 to 0.10 nats over four seeds on the cpu device; the lab's TIE and
# DROPOUT). The curve runs untied and without dropout (TIE, DROPOUT): both
# frameworks then follow one deterministic trajectory, checked below (their dropout masks differ). The step is also
# timed with the head tied and dropout TIMED_DROPOUT, both frameworks tying and dropping alike (the step_dropout row).
TIE, DROPOUT, TIMED_DROPOUT = False, 0.0, 0.1
RECIPE_TIE, RECIPE_DROPOUT, REDUCED_DROPOUT = True, 0.1, 0.05


def schedule_of(train_cfg: dict):
    from minitorch import optim

    return optim.WarmupCosine(max_lr=train_cfg["lr"], min_lr=train_cfg["lr"] / 10, warmup=train_cfg["steps"] // 10,
                              total=train_cfg["steps"])
LINE = "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east"


def timer(device: str):
    """Seconds of fn(): the grader's CUDA-event timing on a GPU (host time included when asked), else wall time."""
    if device == "cuda":
        return lambda fn, host=True: time_gpu(fn, flush=False, hide_host_overhead=not host)

    def wall(fn, host=True):
        fn()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            from minitorch import backend

            backend.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return wall


# ---------------------------------------------------------------- kernels


def bandwidth_rows(device: str, small: bool) -> list[dict]:
    from minitorch import backend, kernels

    xp = __import__("cupy") if device == "cuda" else None
    time_of = timer(device)
    lm, am = kernels.load_module("layernorm.py"), kernels.load_module("attention.py")
    rows, cols = (64, 40) if small else (16384, 768)
    bh, t = (2, 24) if small else (64, 1024)
    rng = np.random.default_rng(0)

    def arr(*shape):
        return backend.asarray(rng.standard_normal(shape).astype(np.float32))

    def copy_seconds(n_floats: int) -> float:
        src, dst = backend.empty(n_floats), backend.empty(n_floats)
        if xp is not None:
            return time_of(lambda: xp.copyto(dst, src), False)
        return time_of(lambda: kernels.load_module("memory.py").copy(src, dst), False)

    x, g, w, b = arr(rows, cols), arr(rows, cols), arr(cols), arr(cols)
    out, mean, rstd = backend.empty((rows, cols)), backend.empty(rows), backend.empty(rows)
    dx, dw, db = backend.empty((rows, cols)), backend.empty(cols), backend.empty(cols)
    lm.layernorm_forward(x, w, b, out, mean, rstd)
    s, p, dp, ds = arr(bh, t, t), backend.empty((bh, t, t)), arr(bh, t, t), backend.empty((bh, t, t))
    n, triangle = bh * t * t, bh * t * (t + 1) // 2
    validate_kernels(lm, am, (x, g, w, b, out, mean, rstd, dx, dw, db), (s, p, dp, ds))
    cases = [("layernorm_forward", f"{rows} x {cols}", lambda: lm.layernorm_forward(x, w, b, out, mean, rstd),
              8 * rows * cols, rows * cols),
             ("layernorm_backward", f"{rows} x {cols}",
              lambda: lm.layernorm_backward(g, x, w, mean, rstd, dx, dw, db), 12 * rows * cols, rows * cols * 3 // 2),
             ("softmax_forward", f"{bh} x {t} x {t}", lambda: am.softmax_forward(s, p, 0.125, False), 8 * n, n),
             ("softmax_forward_causal", f"{bh} x {t} x {t}", lambda: am.softmax_forward(s, p, 0.125, True),
              4 * (n + triangle), n),
             # p holds the causal probabilities now; the backward reads p and dp, writes ds (causal: the visible part
             # of p and dp only)
             ("softmax_backward", f"{bh} x {t} x {t}", lambda: am.softmax_backward(p, dp, ds, 0.125, False),
              12 * n, n * 3 // 2),
             ("softmax_backward_causal", f"{bh} x {t} x {t}", lambda: am.softmax_backward(p, dp, ds, 0.125, True),
              4 * (n + 2 * triangle), n * 3 // 2)]
    out_rows = []
    for name, shape, fn, nbytes, copy_floats in cases:
        seconds, reference = time_of(fn, False), copy_seconds(copy_floats)
        gbps, copy_gbps = nbytes / seconds / 1e9, 8 * copy_floats / reference / 1e9
        out_rows.append({"kind": "bandwidth", "kernel": name, "shape": shape, "gbps": gbps, "copy_gbps": copy_gbps,
                         "ratio": gbps / copy_gbps, "seconds": seconds})
        print(f"{name:>24} {shape:>16}: {gbps:8.1f} GB/s = {gbps / copy_gbps:.2f} x copy", flush=True)
    return out_rows


def agree(what: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> None:
    """Stop the benchmark unless ``got`` matches the float64 ``expected``: a wrong kernel gets no number."""
    error = np.abs(got.astype(np.float64) - expected)
    bound = atol + rtol * np.abs(expected)
    if not np.all(error <= bound):  # NaN fails too
        worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(error), np.inf, error - bound))), error.shape)
        raise SystemExit(f"{what} is wrong: at {tuple(int(i) for i in worst)} expected {expected[worst]!r}, got "
                         f"{got[worst]!r} ({int((~(error <= bound)).sum())} of {error.size} values differ): "
                         "no timing for a wrong kernel")


def validate_kernels(lm, am, ln: tuple, sm: tuple) -> None:
    """Each timed kernel run once on the timed arrays and checked against NumPy in float64 (the softmax on the
    first and the last (T, T) matrix, full and causal): the numbers below belong to kernels that are right."""
    from minitorch import backend

    x, g, w, b, out, mean, rstd, dx, dw, db = ln
    host = backend.asnumpy
    x64, g64, w64, b64 = (host(a).astype(np.float64) for a in (x, g, w, b))
    lm.layernorm_forward(x, w, b, out, mean, rstd)
    mu = x64.mean(axis=1, keepdims=True)
    inv = 1 / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    xhat = (x64 - mu) * inv
    agree("layernorm_forward", host(out), xhat * w64 + b64, 1e-4, 1e-4)
    agree("layernorm_forward: rstd", host(rstd), inv[:, 0], 1e-5, 0)
    lm.layernorm_backward(g, x, w, mean, rstd, dx, dw, db)
    gw = g64 * w64
    agree("layernorm_backward: grad_x", host(dx),
          inv * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True)), 1e-3, 1e-4)
    # sums over the rows: within 1e-4 of the sum of the terms' magnitudes (float32 sums in any order come far closer)
    agree("layernorm_backward: grad_weight", host(dw), (g64 * xhat).sum(axis=0), 0,
          1e-4 * np.abs(g64 * xhat).sum(axis=0))
    agree("layernorm_backward: grad_bias", host(db), g64.sum(axis=0), 0, 1e-4 * np.abs(g64).sum(axis=0))
    s, p, dp, ds = sm
    t = s.shape[-1]
    visible = np.tril(np.ones((t, t), bool))
    scores, grad = host(s), host(dp)
    for causal in (False, True):
        am.softmax_forward(s, p, 0.125, causal)
        am.softmax_backward(p, dp, ds, 0.125, causal)
        probs, grad_scores = host(p), host(ds)
        for z in (0, len(scores) - 1):
            z64 = scores[z].astype(np.float64) * 0.125
            if causal:
                z64 = np.where(visible, z64, -np.inf)
            e = np.exp(z64 - z64.max(axis=-1, keepdims=True))
            agree(f"softmax_forward (causal={causal}) of matrix {z}", probs[z], e / e.sum(axis=-1, keepdims=True),
                  1e-4, 1e-7)
            p64, d64 = probs[z].astype(np.float64), grad[z].astype(np.float64)
            agree(f"softmax_backward (causal={causal}) of matrix {z}", grad_scores[z],
                  0.125 * p64 * (d64 - (p64 * d64).sum(axis=-1, keepdims=True)), 1e-4, 1e-7)


def attention_rows(device: str, small: bool) -> list[dict]:
    import torch

    import minitorch
    from minitorch import ops

    time_of = timer(device)
    tdev = "cuda" if device == "cuda" else "cpu"
    shapes = [("model", 4, 2, 16, 16), ("long", 1, 2, 48, 16)] if small else [
        ("model", 64, 4, 64, 16), ("long", 4, 8, 1024, 64), ("longer", 2, 8, 2048, 64)]
    rows = []
    for label, b, h, t, d in shapes:
        rng = np.random.default_rng(1)
        qkv_host = rng.standard_normal((b, t, 3 * h * d)).astype(np.float32)
        qkv = minitorch.tensor(qkv_host)
        q, k, v = (torch.from_numpy(np.ascontiguousarray(
            qkv_host[..., i * h * d:(i + 1) * h * d].reshape(b, t, h, d).transpose(0, 2, 1, 3))).to(tdev)
            for i in range(3))
        ours = ops.attention(qkv, h)[0].numpy()
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        theirs = theirs.transpose(1, 2).reshape(b, t, h * d).cpu().numpy()
        error = float(np.abs(ours - theirs).max())
        agree(f"ops.attention {label} (against SDPA)", ours, theirs.astype(np.float64), 1e-4, 1e-5)
        seconds = time_of(lambda qkv=qkv, h=h: ops.attention(qkv, h), False)
        sdpa = time_of(lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                       False)
        flops = 4 * b * h * t * t * d
        rows.append({"kind": "attention", "label": label, "B": b, "H": h, "T": t, "D": d, "seconds": seconds,
                     "sdpa_seconds": sdpa, "gflops": flops / seconds / 1e9, "sdpa_gflops": flops / sdpa / 1e9,
                     "time_ratio": seconds / sdpa, "max_abs_difference": error})
        print(f"attention {label} B={b} H={h} T={t} D={d}: {seconds * 1e3:.3f} ms, SDPA {sdpa * 1e3:.3f} ms "
              f"({seconds / sdpa:.1f}x as long); largest difference {error:.1e}", flush=True)
    return rows


# ---------------------------------------------------------------- the GPT


def torch_gpt(config: dict, vocab: int, device: str, tie: bool = TIE, dropout: float = DROPOUT):
    """The same GPT in PyTorch (benchmarks/torch_gpt.py): dropout on the embeddings, both residual branches and
    the attention probabilities, as minitorch's nn.GPT places it (Phase 7's materialised attention drops them too)."""
    return torch_gpt_model(config, vocab, device, tie, dropout, attention_dropout=dropout)


def torch_optimizer(net, model, train_cfg: dict, **kw):
    """PyTorch's AdamW over minitorch's two groups, with Phase 7's weight decay and schedule (betas PyTorch's);
    only the captured step is timed, never trained from."""
    return torch_adamw(net, model, WEIGHT_DECAY, schedule_of(train_cfg), **kw)


def torch_captured(step) -> object:
    """PyTorch's own step function captured with ``torch.cuda.graph`` (warmed up on a side stream first, as it
    asks): the graph, whose ``replay`` runs one step. The step's optimizer must be capturable."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        step()
    return captured


def torch_compiled_step(net, model, train_cfg: dict, txb, tyb, vocab: int, device: str):
    """PyTorch's step with the model and its loss compiled by ``torch.compile`` (default mode: Inductor's fused
    kernels, no CUDA graph), AdamW and clipping as in the eager step, warmed up (the compilation happens in the first
    calls); or, where it cannot run, the reason as a string."""
    import torch
    import torch.nn.functional as TF  # noqa: N812

    if device != "cuda":
        return "the --small check runs PyTorch on the cpu: torch.compile is raced on the GPU only"
    opt, sched = torch_optimizer(net, model, train_cfg)

    def loss_of(x, y):
        return TF.cross_entropy(net(x).view(-1, vocab), y.view(-1))

    try:
        compiled_loss = torch.compile(loss_of)
    except Exception as exc:  # no Triton, an unsupported Python, ...
        return f"torch.compile is unavailable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def step():
        loss = compiled_loss(txb, tyb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        opt.step()
        sched.step()
        return loss

    try:
        for _ in range(3):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # compilation fails at the first call (no compiler, no Triton for this GPU, ...)
        return f"torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return step


def history_val(rows: list[dict], framework: str) -> float:
    """The last validation loss of a framework's training curve."""
    return [r for r in rows if r["kind"] == "curve" and r["framework"] == framework][-1]["val_loss"]


def baselines(train_ids: np.ndarray, val_ids: np.ndarray, vocab: int) -> dict:
    """The validation loss (nats a character) of character frequencies alone and of the previous character (counts
    of the training text, each plus one), as the lab computes them."""
    counts = np.bincount(train_ids, minlength=vocab) + 1.0
    pairs = np.ones((vocab, vocab))
    np.add.at(pairs, (train_ids[:-1], train_ids[1:]), 1)
    pairs /= pairs.sum(axis=1, keepdims=True)
    return {"kind": "baseline", "unigram": float(-np.log(counts[val_ids] / counts.sum()).mean()),
            "bigram": float(-np.log(pairs[val_ids[:-1], val_ids[1:]]).mean())}


def shakespeare_ids() -> tuple:
    """Tiny Shakespeare as character ids: the tokenizer, the first 90% (training), the rest (validation)."""
    from minitorch import data, text

    corpus = data.load_tinyshakespeare()
    tokenizer = text.CharTokenizer.from_text(corpus)
    train_ids, val_ids = text.train_val_split(tokenizer.encode(corpus), 0.9)
    return tokenizer, train_ids, val_ids


def minitorch_step(model, opt, xb, yb, vocab: int):
    """The lab's training step on the batch tensors ``xb``, ``yb`` (refilled in place): loss, backward, the
    gradients clipped to CLIP, AdamW; the same function runs eagerly or is captured into a graph."""
    from minitorch import functional as F  # noqa: N812
    from minitorch import optim

    b, t = xb.shape

    def step():
        loss = F.cross_entropy(model(xb).reshape(b * t, vocab), yb.reshape(b * t))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss

    return step


def train_both(device: str, setup: dict) -> tuple[list[dict], dict]:
    import torch
    import torch.nn.functional as TF  # noqa: N812

    import minitorch
    from minitorch import backend, graph, nn, optim, text
    from minitorch import functional as F  # noqa: N812

    model_cfg, train_cfg = setup["model"], setup["train"]
    tokenizer, train_ids, val_ids = shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    tdev = "cuda" if device == "cuda" else "cpu"
    time_of = timer(device)

    model = nn.GPT(vocab, **model_cfg, seed=SEED, tie_weights=TIE, dropout=DROPOUT)
    net = torch_gpt(model_cfg, vocab, tdev)
    load_weights(net, model)
    opt = optim.AdamW(model.optimizer_groups(WEIGHT_DECAY), lr=train_cfg["lr"], schedule=schedule_of(train_cfg),
                      flat=True)  # as the lab: one buffer (the flat_steps rows time it against per parameter)
    topt, tsched = torch_optimizer(net, model, train_cfg)
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    txb = torch.zeros((b, t), dtype=torch.long, device=tdev)
    tyb = torch.zeros((b, t), dtype=torch.long, device=tdev)

    step = minitorch_step(model, opt, xb, yb, vocab)

    def torch_step():
        loss = TF.cross_entropy(net(txb).view(-1, vocab), tyb.view(-1))
        topt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        topt.step()
        tsched.step()
        return loss

    val_x, val_y = text.evaluation_windows(val_ids, t, EVAL_WINDOWS)
    val_xt, val_yt = minitorch.tensor(val_x, dtype="int32"), minitorch.tensor(val_y.reshape(-1), dtype="int32")
    tval_x, tval_y = torch.from_numpy(val_x.astype(np.int64)).to(tdev), torch.from_numpy(val_y.astype(np.int64)).to(tdev)

    def val_loss() -> float:
        model.eval()
        with minitorch.no_grad():
            loss = F.cross_entropy(model(val_xt).reshape(-1, vocab), val_yt).item()
        model.train()
        return loss

    def torch_val_loss() -> float:
        net.eval()
        with torch.no_grad():
            loss = TF.cross_entropy(net(tval_x).view(-1, vocab), tval_y.view(-1)).item()
        net.train()
        return loss

    def sample() -> str:
        out = model.generate(tokenizer.encode("\n")[None, :], SAMPLE_CHARS, temperature=1.0, seed=SEED)
        return tokenizer.decode(out.numpy()[0, 1:])

    # the two models must agree before anything is timed: the same weights give the same validation loss
    ours0, theirs0 = val_loss(), torch_val_loss()
    agree("the minitorch GPT's validation loss against PyTorch's, same weights", np.array([ours0]),
          np.array([theirs0]), 1e-4, 1e-5)
    captured = graph.capture(step)
    rows: list[dict] = [baselines(train_ids, val_ids, vocab)]
    windows = text.RandomWindows(train_ids, t, b, seed=SEED)

    def load_batch(x: np.ndarray, y: np.ndarray) -> None:
        xb.copy_from(x)
        yb.copy_from(y)
        txb.copy_(torch.from_numpy(x.astype(np.int64)))
        tyb.copy_(torch.from_numpy(y.astype(np.int64)))

    # the same run, twice: minitorch replaying its captured step, PyTorch eager, from the same weights and batches,
    # each evaluated every eval_every steps; minitorch's samples (PyTorch writes none) are kept off the clock
    start, history, sampling = time.perf_counter(), [], 0.0
    for i in range(train_cfg["steps"] + 1):
        if i in setup["sample_at"]:
            backend.synchronize()
            began = time.perf_counter()
            rows.append({"kind": "sample", "step": i, "text": sample()})
            sampling += time.perf_counter() - began
        if i % train_cfg["eval_every"] == 0:
            history.append((i, captured.output.item() if i else float("nan"), val_loss()))
        if i == train_cfg["steps"]:
            break
        x, y = windows.sample()
        load_batch(x, y)
        captured.replay()
    backend.synchronize()
    ours_seconds = time.perf_counter() - start - sampling
    rows += [{"kind": "curve", "framework": "minitorch", "step": s, "train_loss": tr, "val_loss": va}
             for s, tr, va in history]
    windows = text.RandomWindows(train_ids, t, b, seed=SEED)
    start, history, last = time.perf_counter(), [], None
    for i in range(train_cfg["steps"] + 1):
        if i % train_cfg["eval_every"] == 0:
            history.append((i, float(last.item()) if last is not None else float("nan"), torch_val_loss()))
        if i == train_cfg["steps"]:
            break
        x, y = windows.sample()
        load_batch(x, y)
        last = torch_step()
    if device == "cuda":
        torch.cuda.synchronize()
    torch_seconds = time.perf_counter() - start
    rows += [{"kind": "curve", "framework": "pytorch", "step": s, "train_loss": tr, "val_loss": va}
             for s, tr, va in history]

    # the same training from the same weights on the same batches ends at the same loss, or something is wrong
    final_ours, final_theirs = history_val(rows, "minitorch"), history_val(rows, "pytorch")
    if not abs(final_ours - final_theirs) <= 0.05:
        raise SystemExit(f"after {train_cfg['steps']} steps minitorch's validation loss is {final_ours:.4f} and "
                         f"PyTorch's {final_theirs:.4f}: the same run should end at the same loss; no timing")

    # one step, timed alone (host time included: launching is what the graph saves), on one more batch: minitorch
    # captured and from Python; PyTorch eager, captured (torch.cuda.graph) and compiled (torch.compile)
    load_batch(*windows.sample())
    captured_s, eager_s, torch_s = time_of(captured.replay), time_of(step), time_of(torch_step)
    row = {"kind": "step", "captured_seconds": captured_s, "eager_seconds": eager_s, "pytorch_seconds": torch_s,
           "ratio": captured_s / torch_s, "launches": captured.launches}
    if device == "cuda":  # PyTorch's step captured too (AdamW with capturable=True): graph against graph
        copt, csched = torch_optimizer(net, model, train_cfg, capturable=True)

        def captured_step():
            # gradients zeroed in place, not set to None: the graph keeps writing the same buffers (a backward
            # that allocates them inside the capture fails against the legacy stream)
            loss = TF.cross_entropy(net(txb).view(-1, vocab), tyb.view(-1))
            copt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            copt.step()
            csched.step()  # host work only, as in the eager step (the rate itself is frozen in the graph)
            return loss

        # the eager run's last loss holds its autograd graph, whose gradient accumulators belong to the default
        # stream: let them go, or the capture's backward would wait on the default stream and fail
        last = None
        gc.collect()
        theirs = torch_captured(captured_step)
        row["pytorch_captured_seconds"] = time_of(theirs.replay)
        row["captured_ratio"] = captured_s / row["pytorch_captured_seconds"]
    else:
        row["pytorch_captured_skipped"] = "torch.cuda.graph needs a GPU (the --small check runs PyTorch on the cpu)"
    compiled = torch_compiled_step(net, model, train_cfg, txb, tyb, vocab, device)
    if isinstance(compiled, str):
        row["pytorch_compiled_skipped"] = compiled
    else:
        row["pytorch_compiled_seconds"] = time_of(compiled)
        row["compiled_ratio"] = captured_s / row["pytorch_compiled_seconds"]
    pytorch = {k: row[k] for k in ("pytorch_seconds", "pytorch_captured_seconds", "pytorch_compiled_seconds")
               if k in row}
    best = min(pytorch, key=pytorch.get)
    row["best_pytorch"] = {"pytorch_seconds": "eager", "pytorch_captured_seconds": "captured",
                           "pytorch_compiled_seconds": "compiled"}[best]
    row["best_ratio"] = captured_s / pytorch[best]
    rows.append(row)
    print(f"one step: captured {captured_s * 1e3:.3f} ms ({captured.launches} launches), from Python "
          f"{eager_s * 1e3:.2f} ms; PyTorch eager {torch_s * 1e3:.3f} ms ({captured_s / torch_s:.2f}x)"
          + (f", captured {row['pytorch_captured_seconds'] * 1e3:.3f} ms ({row['captured_ratio']:.2f}x)"
             if "captured_ratio" in row else f", captured skipped ({row['pytorch_captured_skipped']})")
          + (f", compiled {row['pytorch_compiled_seconds'] * 1e3:.3f} ms ({row['compiled_ratio']:.2f}x)"
             if "compiled_ratio" in row else f", compiled skipped ({row['pytorch_compiled_skipped']})"), flush=True)

    line = LINE[:t]
    maps = model.attention_maps(minitorch.tensor(tokenizer.encode(line)[None, :], dtype="int32"))
    for layer, probs in enumerate(maps):
        for head in range(model_cfg["n_head"]):
            rows.append({"kind": "attention_map", "layer": layer, "head": head, "text": line,
                         "probs": np.round(probs[0, head], 4).tolist()})
    ours = [r for r in rows if r["kind"] == "curve" and r["framework"] == "minitorch"][-1]
    theirs = [r for r in rows if r["kind"] == "curve" and r["framework"] == "pytorch"][-1]
    summary = {"kind": "summary", "steps": train_cfg["steps"], "eval_every": train_cfg["eval_every"],
               "val_loss": ours["val_loss"],
               "pytorch_val_loss": theirs["val_loss"], "train_seconds": ours_seconds,
               "pytorch_train_seconds": torch_seconds, "train_ratio": ours_seconds / torch_seconds,
               "sample_seconds": sampling, "step_ratio": captured_s / torch_s,
               "parameters": sum(p.size for p in model.parameters())}
    rows.append(summary)
    print(f"{train_cfg['steps']} steps, evaluations included: minitorch val {ours['val_loss']:.3f} in "
          f"{ours_seconds:.1f} s, PyTorch val {theirs['val_loss']:.3f} in {torch_seconds:.1f} s "
          f"({ours_seconds / torch_seconds:.2f}x); minitorch's samples took {sampling:.1f} s more", flush=True)
    rows.append(dropout_step_row(device, model_cfg, train_cfg, vocab, b, t, windows))
    return rows, {"vocab_size": vocab, **model_cfg, **train_cfg, "weight_decay": WEIGHT_DECAY, "clip": CLIP,
                  "seed": SEED, "eval_windows": EVAL_WINDOWS, "torch": torch.__version__, "tie_weights": TIE,
                  "tied_wpe_std": "d_model ** -0.5", "flat_adamw": True,
                  "dropout": DROPOUT, "timed_dropout": TIMED_DROPOUT,
                  "schedule": dataclasses.asdict(schedule_of(train_cfg)), "decay": "Linear matrices only"}


def dropout_step_row(device: str, model_cfg: dict, train_cfg: dict, vocab: int, b: int, t: int, windows) -> dict:
    """The same step with the head tied and dropout TIMED_DROPOUT in both frameworks (new models from the same
    weights; minitorch's masks from its Philox kernel, PyTorch's from its own generator, stored as a mask for its
    backward): minitorch captured against PyTorch eager and captured, on one batch. Timed only: the curve runs
    untied and without dropout."""
    import torch
    import torch.nn.functional as TF  # noqa: N812

    import minitorch
    from minitorch import graph, nn, optim

    time_of = timer(device)
    tdev = "cuda" if device == "cuda" else "cpu"
    model = nn.GPT(vocab, **model_cfg, seed=SEED, tie_weights=True, dropout=TIMED_DROPOUT)
    net = torch_gpt(model_cfg, vocab, tdev, tie=True, dropout=TIMED_DROPOUT)
    load_weights(net, model)
    opt = optim.AdamW(model.optimizer_groups(WEIGHT_DECAY), lr=train_cfg["lr"], schedule=schedule_of(train_cfg),
                      flat=True)
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    x, y = windows.sample()
    xb.copy_from(x)
    yb.copy_from(y)
    txb = torch.from_numpy(x.astype(np.int64)).to(tdev)
    tyb = torch.from_numpy(y.astype(np.int64)).to(tdev)
    captured = graph.capture(minitorch_step(model, opt, xb, yb, vocab))
    row = {"kind": "step_dropout", "dropout": TIMED_DROPOUT, "tie_weights": True,
           "captured_seconds": time_of(captured.replay),
           "launches": captured.launches}
    topt, tsched = torch_optimizer(net, model, train_cfg, capturable=device == "cuda")

    def torch_step():
        loss = TF.cross_entropy(net(txb).view(-1, vocab), tyb.view(-1))
        topt.zero_grad(set_to_none=device != "cuda")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        topt.step()
        tsched.step()
        return loss

    row["pytorch_seconds"] = time_of(torch_step)
    if device == "cuda":
        gc.collect()
        theirs = torch_captured(torch_step)
        row["pytorch_captured_seconds"] = time_of(theirs.replay)
        row["captured_ratio"] = row["captured_seconds"] / row["pytorch_captured_seconds"]
    row["ratio"] = row["captured_seconds"] / row["pytorch_seconds"]
    print(f"one step, tied, with dropout {TIMED_DROPOUT}: captured {row['captured_seconds'] * 1e3:.3f} ms "
          f"({captured.launches} launches); PyTorch eager {row['pytorch_seconds'] * 1e3:.3f} ms"
          + (f", captured {row['pytorch_captured_seconds'] * 1e3:.3f} ms ({row['captured_ratio']:.2f}x)"
             if "captured_ratio" in row else ""), flush=True)
    return row


def flat_step_rows(device: str, setup: dict) -> list[dict]:
    """The full configuration's captured step, its AdamW and clipping per parameter and over the flat buffer
    (``AdamW(..., flat=True)``), with the head untied and no dropout and with the lab's recipe (tied, dropout):
    replays of each from the same weights on the same batches must give the same losses before any is timed."""
    import minitorch
    from minitorch import graph, nn, optim, text

    model_cfg, train_cfg = setup["model"], setup["train"]
    tokenizer, train_ids, _ = shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    time_of, rows = timer(device), []
    for tie, dropout in ((False, 0.0), (True, RECIPE_DROPOUT)):
        steps = {}
        for flat in (False, True):
            model = nn.GPT(vocab, **model_cfg, seed=SEED, tie_weights=tie, dropout=dropout)
            opt = optim.AdamW(model.optimizer_groups(WEIGHT_DECAY), lr=train_cfg["lr"],
                              schedule=schedule_of(train_cfg), flat=flat)
            xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
            steps[flat] = (graph.capture(minitorch_step(model, opt, xb, yb, vocab)), xb, yb)
        windows, losses = text.RandomWindows(train_ids, t, b, seed=SEED), {False: [], True: []}
        for _ in range(5):
            x, y = windows.sample()
            for flat, (captured, xb, yb) in steps.items():
                xb.copy_from(x)
                yb.copy_from(y)
                captured.replay()
                losses[flat].append(captured.output.item())
        agree(f"flat against per-parameter AdamW, tied={tie}, dropout={dropout}: five replays' losses",
              np.array(losses[True]), np.array(losses[False]), 1e-4, 1e-5)
        seconds = {flat: [] for flat in steps}
        for _ in range(3):  # interleaved, A B A B A B: the median of each
            for flat, (captured, _, _) in steps.items():
                seconds[flat].append(time_of(captured.replay))
        for flat, (captured, _, _) in steps.items():
            rows.append({"kind": "step_flat", "flat": flat, "tie_weights": tie, "dropout": dropout,
                         "captured_seconds": statistics.median(seconds[flat]), "launches": captured.launches})
            print(f"captured step, tied={tie}, dropout={dropout}, flat={flat}: "
                  f"{rows[-1]['captured_seconds'] * 1e3:.3f} ms, {captured.launches} launches", flush=True)
    return rows


def recipe_rows(setup: dict, seeds: list[int]) -> list[dict]:
    """The lab's full recipe (tied head, dropout RECIPE_DROPOUT, flat AdamW) trained for its 1,000 steps as the lab
    trains it, from these seeds, each scored on the grader's 256 validation windows: the calibration of
    ``phase7.shakespeare_val_loss`` for that recipe."""
    runs = [(seed, RECIPE_TIE, RECIPE_DROPOUT) for seed in seeds]
    return [dict(row, kind="recipe_full") for row in train_reduced(setup, runs)]


def train_reduced(setup: dict, runs: list[tuple[int, bool, float]]) -> list[dict]:
    """Train ``setup``'s configuration as the lab trains it (captured steps, flat AdamW) for each (seed, tie,
    dropout) of ``runs``; one row each with its validation loss on the grader's 256 windows."""
    import minitorch
    from minitorch import functional as F  # noqa: N812
    from minitorch import graph, nn, optim, text

    model_cfg, train_cfg = setup["model"], setup["train"]
    tokenizer, train_ids, val_ids = shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    val_x, val_y = text.evaluation_windows(val_ids, t, EVAL_WINDOWS)
    val_xt, val_yt = minitorch.tensor(val_x, dtype="int32"), minitorch.tensor(val_y.reshape(-1), dtype="int32")
    rows = []
    for seed, tie, dropout in runs:
        start, cpu = time.perf_counter(), time.process_time()
        model = nn.GPT(vocab, **model_cfg, seed=seed, tie_weights=tie, dropout=dropout)
        opt = optim.AdamW(model.optimizer_groups(WEIGHT_DECAY), lr=train_cfg["lr"], schedule=schedule_of(train_cfg),
                          flat=True)
        xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
        captured = graph.capture(minitorch_step(model, opt, xb, yb, vocab))
        windows = text.RandomWindows(train_ids, t, b, seed=seed)
        for _ in range(train_cfg["steps"]):
            x, y = windows.sample()
            xb.copy_from(x)
            yb.copy_from(y)
            captured.replay()
        model.eval()
        with minitorch.no_grad():
            loss = F.cross_entropy(model(val_xt).reshape(-1, vocab), val_yt).item()
        rows.append({"seed": seed, "tie_weights": tie, "dropout": dropout, "val_loss": loss,
                     "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
                     "launches": captured.launches})
        print(f"seed {seed}, tie_weights={tie}, dropout={dropout}: validation loss {loss:.4f}", flush=True)
    return rows


def calibrate(seeds: list[int]) -> int:
    """The lab's reduced configuration (the emulator's) trained as the lab trains it (head tied, dropout
    REDUCED_DROPOUT), from several seeds (the initial weights and the batches), each scored on the grader's 256
    validation windows: the data behind ``phase7.shakespeare_val_loss_reduced`` in grader/thresholds.toml; the
    first seed also untied without dropout (the lab's recipe before) and tied with the full configuration's
    dropout RECIPE_DROPOUT. Writes ``phase7_gpt_reduced-<device>.json``."""
    import minitorch

    runs = ([(seed, RECIPE_TIE, REDUCED_DROPOUT) for seed in seeds]
            + [(seeds[0], False, 0.0), (seeds[0], RECIPE_TIE, RECIPE_DROPOUT)])
    rows = [dict(row, kind="reduced" if i < len(seeds) else "reduced_variant")
            for i, row in enumerate(train_reduced(REDUCED, runs))]
    device = minitorch.get_device()
    write_results("phase7_gpt_reduced", emulator_name() if device == "emu" else gpu_name(), rows,
                  config=REDUCED, weight_decay=WEIGHT_DECAY, clip=CLIP, eval_windows=EVAL_WINDOWS,
                  tie_weights=RECIPE_TIE, dropout=REDUCED_DROPOUT, schedule=dataclasses.asdict(schedule_of(REDUCED["train"])))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true",
                        help="the emulator, a reduced model, a few steps, tiny kernels: a check of this script")
    parser.add_argument("--workspace", help="a workspace that already holds the Phase 1-7 files")
    parser.add_argument("--kernels-only", action="store_true",
                        help="only the bandwidth rows (LayerNorm, softmax), printed: no JSON written, no training")
    parser.add_argument("--calibrate", metavar="SEEDS", help="train the lab's reduced configuration on the "
                        "emulator from these seeds (e.g. 0,1,2,3) and write phase7_gpt_reduced-<device>.json")
    parser.add_argument("--flat-steps", metavar="SEEDS", help="on a GPU: only the captured step with and without "
                        "the flat AdamW buffer (step_flat rows) and the lab's full recipe trained from these seeds "
                        "(recipe_full rows, e.g. 0,1; '' for none); writes phase7_gpt_flat-<device>.json")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = str(args.workspace or tempfile.mkdtemp(prefix="minitorch-bench-"))
    import minitorch
    from minitorch.kernels import write_source

    device = "emu" if args.small or args.calibrate else "cuda"
    if args.flat_steps is not None and os.environ.get("MINITORCH_DEVICE") == "emu":  # a check of the script
        device = "emu"
    if device == "cuda" and not minitorch.cuda_available():
        print("no usable GPU: run with --small for a check of the script on the emulator", file=sys.stderr)
        return 1
    minitorch.set_device(device)
    if not args.workspace:
        for lab in LABS:
            if not (ROOT / "solutions" / f"{lab}.ipynb").exists():
                print(f"solutions/{lab}.ipynb is missing: pass --workspace with the reference files", file=sys.stderr)
                return 1
            for name, source in solution_sources(f"{lab}.ipynb").items():
                write_source(name, source)
    if args.calibrate:
        return calibrate([int(seed) for seed in args.calibrate.split(",")])
    if args.flat_steps is not None:
        seeds = [int(seed) for seed in args.flat_steps.split(",") if seed]
        setup = FULL if device == "cuda" else SMALL  # the emulator: a check of the script, in a temporary file
        rows = flat_step_rows(device, setup)
        for part in ([], *([seed] for seed in seeds)):  # the file rewritten after each part: a run cut short keeps some
            rows += recipe_rows(setup, part)
            if device != "cuda":
                continue
            write_results("phase7_gpt_flat", gpu_name(), rows, config={**FULL["model"], **FULL["train"]},
                          weight_decay=WEIGHT_DECAY, clip=CLIP,
                          recipe={"tie_weights": RECIPE_TIE, "dropout": RECIPE_DROPOUT},
                          schedule=dataclasses.asdict(schedule_of(FULL["train"])))
        if device != "cuda":
            print(json.dumps(rows, indent=1))
        return 0
    name = gpu_name() if device == "cuda" else emulator_name()
    print(f"device: {name}", flush=True)
    if args.kernels_only:  # a quick look at the kernels: the JSON comes from full runs only
        bandwidth_rows(device, args.small)
        return 0
    rows = bandwidth_rows(device, args.small) + attention_rows(device, args.small)
    training, config = train_both(device, SMALL if args.small else FULL)
    if args.small:  # a check of the script: its numbers are no figure for the book
        path = Path(tempfile.mkdtemp(prefix="phase7-small-")) / "phase7_gpt-small.json"
        doc = {"benchmark": "phase7_gpt", "device": name, "date": datetime.date.today().isoformat(),
               "software": software(), "configuration": "small", "config": config, "results": rows + training}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path} (not a result for the book)")
        return 0
    write_results("phase7_gpt", name, rows + training, configuration="full", config=config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
