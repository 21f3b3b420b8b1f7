"""Figures of the Phase 5 chapter's training half (pool, Adam, initialisation, the deliverable), drawn at
build time.

Measured figures read ``benchmarks/results/phase5_pool-*.json`` (``benchmarks/phase5_pool.py``),
``phase5_sales_optim-*.json`` (``benchmarks/phase5_sales_optim.py``) and the graded run's performance
records ``grade-phase5-*.json`` (``benchmarks/grade_solutions.py phase5``); a GPU measurement is shown when
one is committed, the emulator's otherwise, and without any the chapter still builds with a note saying
which script to run. The bias-correction figure and the histograms of the generator are computed here
(NumPy, and ``minitorch.philox``: the host reference the learner's kernels match bit for bit).
"""

from __future__ import annotations

import json
import math
import sys

import matplotlib.pyplot as plt
import numpy as np
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    REPO_ROOT,
    VERMILLION,
    Results,
    _load,
    fmt_bytes,
    fmt_time,
    glue_figure,
    glue_md,
    missing_figure,
    missing_md,
    results_dir,
)

SCRIPTS = {"phase5_pool": "benchmarks/phase5_pool.py", "phase5_sales_optim": "benchmarks/phase5_sales_optim.py",
           "grade-phase5": "benchmarks/grade_solutions.py phase5"}


def _prefer_gpu(benchmark: str) -> tuple[Results, dict] | None:
    """The newest GPU result of `benchmark` when there is one, else the newest emulator result."""
    loaded = []
    for path in sorted(results_dir().glob(f"{benchmark}-*.json")):
        doc = json.loads(path.read_text())
        res = _load(path, benchmark)
        loaded.append(("emulator" not in res.device.lower(), res.date, path.name, res, doc))
    if not loaded:
        return None
    *_, res, doc = max(loaded, key=lambda t: t[:3])
    return res, doc


def _is_gpu(res: Results) -> bool:
    return "emulator" not in res.device.lower()


# --------------------------------------------------------------------------------------
# The pool: malloc + free against the device's own calls and CuPy's pool
# --------------------------------------------------------------------------------------

def phase5_pool(fig_name: str = "fig-phase5-pool", text_name: str = "phase5-pool-text",
                caption_name: str = "phase5-pool-source") -> None:
    found = _prefer_gpu("phase5_pool")
    if found is None:
        glue_figure(fig_name, missing_figure("phase5_pool", "the pool's allocation cost", SCRIPTS["phase5_pool"]))
        glue_md(caption_name, "")
        glue_md(text_name, missing_md("phase5_pool", SCRIPTS["phase5_pool"]))
        return
    res, _ = found
    rows = sorted(res.rows, key=lambda r: r["bytes"])
    gpu = _is_gpu(res)
    raw_key = "raw_cudaMalloc_cudaFree_s" if gpu else "raw_emu_malloc_free_s"
    series = [(raw_key, VERMILLION, "o", "cudaMalloc + cudaFree" if gpu else "emu.malloc + emu.free"),
              ("pool_s", BLUE, "s", "the pool (pool.py, warm)")]
    if gpu:
        series.append(("cupy_pool_s", GREEN, "^", "CuPy's MemoryPool (Cython)"))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    sizes = [r["bytes"] for r in rows]
    for key, color, marker, label in series:
        ax.plot(range(len(rows)), [r[key] * 1e6 for r in rows], color=color, marker=marker, label=label)
    ax.set_xticks(range(len(rows)), [fmt_bytes(b) for b in sizes])
    ax.set(xlabel="block size", ylabel="malloc + free (µs, log scale)", yscale="log")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    first, last = rows[0], rows[-1]
    text = (f"A warm malloc + free through the pool took {fmt_time(first['pool_s'])} to "
            f"{fmt_time(max(r['pool_s'] for r in rows))}, against {fmt_time(min(r[raw_key] for r in rows))} to "
            f"{fmt_time(max(r[raw_key] for r in rows))} for the device's own calls: "
            f"{min(r[raw_key] / r['pool_s'] for r in rows):.0f} to {max(r[raw_key] / r['pool_s'] for r in rows):.0f} "
            f"times faster.")
    if gpu:
        text += (f" CuPy's pool, the same idea compiled with Cython, took {fmt_time(first['cupy_pool_s'])} at "
                 f"{fmt_bytes(first['bytes'])} and {fmt_time(last['cupy_pool_s'])} at {fmt_bytes(last['bytes'])}: "
                 f"the gap to it is Python's overhead.")
    else:
        text += (" These are the emulator's numbers (its raw allocation maps guard pages); the GPU measurement "
                 f"(`python {SCRIPTS['phase5_pool']}` on a GPU) is not committed yet.")
    glue_md(text_name, text)


# --------------------------------------------------------------------------------------
# Adam: bias correction, and the fused kernel's bandwidth
# --------------------------------------------------------------------------------------

def adam_bias_correction(fig_name: str = "fig-phase5-adam-bias") -> None:
    """Adam's step over lr for a gradient that stays the same, with and without bias correction: exactly
    1 with it, (1 - beta1^t) / sqrt(1 - beta2^t) without (computed here)."""
    b1, b2 = 0.9, 0.999
    t = np.unique(np.logspace(0, 4, 200).astype(int))
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(t, (1 - b1**t) / np.sqrt(1 - b2**t), color=VERMILLION, label="m / sqrt(v): no correction")
    ax.plot(t, np.ones_like(t, dtype=float), color=BLUE, label="m / (1 - β₁ᵗ) over sqrt(v / (1 - β₂ᵗ))")
    ax.set(xlabel="step t (log scale)", ylabel="step / lr", xscale="log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    glue_figure(fig_name, fig)


def _grade_perf() -> tuple[Results, dict[str, dict]] | None:
    found = _prefer_gpu("grade-phase5")
    if found is None or not _is_gpu(found[0]):
        return None
    res, _ = found
    return res, {r["name"]: r for r in res.rows}


def phase5_kernels_text(text_name: str = "phase5-training-perf-text") -> None:
    """The fused Adam update and the generator against their references, from the graded GPU run."""
    found = _grade_perf()
    names = {"adam_update bandwidth": "the fused Adam update reached {m:,.0f} GB/s (28 bytes a weight), "
                                      "{r:.2f}× a device copy's {ref:,.0f} GB/s",
             "philox_uniform": "`philox_uniform` wrote {m:,.0f} GB/s of numbers, {r:.2f}× cuRAND's Philox",
             "philox_normal": "`philox_normal` {m:,.0f} GB/s, {r:.2f}× cuRAND's"}
    if found is None or not any(n in found[1] for n in names):
        glue_md(text_name, missing_md("grade-phase5", SCRIPTS["grade-phase5"]))
        return
    res, perf = found
    parts = [fmt.format(m=perf[n]["measured"], r=perf[n]["ratio"], ref=perf[n]["reference"])
             for n, fmt in names.items() if n in perf]
    glue_md(text_name, f"In the graded run on {res.device} ({res.date}, `{res.path.relative_to(REPO_ROOT)}`), "
            + "; ".join(parts) + ".")


# --------------------------------------------------------------------------------------
# The generator: histograms of the reference stream
# --------------------------------------------------------------------------------------

def _ks(sample: np.ndarray, cdf) -> float:
    x = np.sort(sample)
    f = cdf(x)
    n = x.size
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def philox_histograms(fig_name: str = "fig-phase5-philox", text_name: str = "phase5-philox-text") -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from minitorch import philox

    n, seed = 200_000, 2024
    u = philox.uniform(n, seed).astype(np.float64)
    z = philox.normal(n, seed).astype(np.float64)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    left.hist(u, bins=50, density=True, color=BLUE, alpha=0.7)
    left.axhline(1.0, color="black", lw=1)
    left.set(xlabel="u", ylabel="density", title=f"{n:,} uniforms, seed {seed}")
    right.hist(z, bins=80, range=(-4.5, 4.5), density=True, color=ORANGE, alpha=0.7)
    xs = np.linspace(-4.5, 4.5, 200)
    right.plot(xs, np.exp(-xs**2 / 2) / math.sqrt(2 * math.pi), color="black", lw=1)
    right.set(xlabel="z", title=f"{n:,} Box-Muller normals")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    erf = np.vectorize(math.erf)
    ks_u, ks_z = _ks(u, lambda x: x), _ks(z, lambda x: 0.5 * (1 + erf(x / math.sqrt(2))))
    glue_md(text_name, f"For these {n:,} numbers the Kolmogorov-Smirnov distance to U(0, 1) is {ks_u:.4f} and to "
            f"N(0, 1) {ks_z:.4f}; at the 0.1% level a sample this size is rejected above "
            f"{1.95 / math.sqrt(n):.4f}. The normals' mean is {z.mean():+.4f}, their variance {z.var():.4f}.")


# --------------------------------------------------------------------------------------
# The deliverable: SGD against Adam
# --------------------------------------------------------------------------------------

def phase5_optim(fig_name: str = "fig-phase5-optim", text_name: str = "phase5-optim-text",
                 caption_name: str = "phase5-optim-source", timing_name: str = "phase5-optim-timing") -> None:
    found = _prefer_gpu("phase5_sales_optim")
    if found is None:
        glue_figure(fig_name, missing_figure("phase5_sales_optim", "SGD against Adam", SCRIPTS["phase5_sales_optim"],
                                             "a GPU (or the emulator, --emu-small)"))
        for name in (caption_name, timing_name):
            glue_md(name, "")
        glue_md(text_name, missing_md("phase5_sales_optim", SCRIPTS["phase5_sales_optim"], "a GPU"))
        return
    res, doc = found
    curves = {(r["framework"], r["optimizer"]): [] for r in res.rows if r.get("kind") == "epoch"}
    for r in res.rows:
        if r.get("kind") == "epoch":
            curves[r["framework"], r["optimizer"]].append((r["epoch"], r["train_loss"]))
    summary = {(r["framework"], r["optimizer"]): r for r in res.rows if r.get("kind") == "summary"}
    if ("minitorch", "sgd") not in curves or ("minitorch", "adam") not in curves:
        raise ValueError(f"{res.path}: needs minitorch epochs of both optimizers")
    config = doc["config"]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    style = {"sgd": dict(color=VERMILLION, marker="o", label=f"SGD, momentum {doc['sgd']['momentum']}, "
                                                              f"lr {doc['sgd']['lr']}"),
             "adam": dict(color=BLUE, marker="s", label=f"Adam, lr {doc['adam']['lr']}")}
    for (framework, optimizer), points in curves.items():
        if framework not in ("minitorch", "pytorch"):
            continue  # PyTorch captured or compiled: the same curve as eager (only its time differs)
        xs, ys = zip(*points, strict=True)
        if framework == "minitorch":
            ax.plot(xs, ys, ms=3, **style[optimizer])
        else:
            ax.plot(xs, ys, color=style[optimizer]["color"], ls=":", lw=1.5,
                    label=f"{style[optimizer]['label'].split(',')[0]} in PyTorch ({summary[framework, optimizer].get('torch_device', '')})")
    sgd, adam = summary["minitorch", "sgd"], summary["minitorch", "adam"]
    ax.axhline(sgd["final_loss"], color=GREY, ls="--", lw=1, label="SGD's final loss")
    reached = adam["epoch_reaching_sgd_final_loss"]
    if reached:
        ax.plot([reached], [dict(curves["minitorch", "adam"])[reached]], "k*", ms=11, label=f"Adam there: epoch {reached}")
    ax.set(xlabel="epoch", ylabel="training loss (MSE, normalised log price)", yscale="log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    configuration = ("the full configuration" if doc.get("configuration") == "full"
                     else f"the reduced configuration ({doc['train_rows']:,} training rows)")
    glue_md(caption_name, f"{config['epochs']} epochs, batches of {config['batch_size']}, {configuration}. "
            + res.provenance)
    text = (f"SGD ended at a training loss of {sgd['final_loss']:.2e}; Adam reached it "
            + (f"after {reached} of the {config['epochs']} epochs" if reached else "in none of the epochs")
            + f" and ended at {adam['final_loss']:.2e}. Test MAE: SGD {sgd['test_mae']:.2f}, Adam "
            f"{adam['test_mae']:.2f}, against the mean predictor's {sgd['baseline_mae']:.2f} "
            f"({sgd['ratio']:.3f}× and {adam['ratio']:.3f}×).")
    if ("pytorch", "sgd") in summary:
        torch_sgd = summary["pytorch", "sgd"]
        text += (f" PyTorch ({torch_sgd.get('torch_device')}), from the same weights with the same batches, "
                 f"ended at {torch_sgd['final_loss']:.2e} with SGD and {summary['pytorch', 'adam']['final_loss']:.2e} "
                 f"with Adam.")
    glue_md(text_name, text)
    if not _is_gpu(res):
        glue_md(timing_name, f"*These curves come from the emulator ({res.device}); its time says nothing about a "
                f"GPU. The GPU measurement (`python {SCRIPTS['phase5_sales_optim']}` on a GPU) is not committed "
                f"yet.*")
        return
    warmed = (" (each optimizer's kernels compiled before its timer, its graphs captured inside it, as PyTorch's "
              "graph is)" if doc.get("minitorch_warm_up") else "")
    timing = (f"On {res.device}, with every step replayed from a graph{warmed}, SGD's {config['epochs']} epochs took "
              f"{sgd['train_seconds']:.1f} s and Adam's {adam['train_seconds']:.1f} s")
    # PyTorch three ways (benchmarks/torch_race.py); ours is captured, so the like-for-like race is the graph's
    ways = (("pytorch", "eager"), ("pytorch_graph", "captured in a CUDA graph"),
            ("pytorch_compile", "through torch.compile"))
    missing = []
    for framework, what in ways:
        if (framework, "adam") not in summary:
            missing.append(what)
            continue
        t_sgd, t_adam = summary[framework, "sgd"], summary[framework, "adam"]
        earlier = t_sgd.get("measured_on")
        timing += (f"; PyTorch {what} took {t_sgd['train_seconds']:.1f} s and {t_adam['train_seconds']:.1f} s "
                   + (f"in an earlier run ({earlier}) " if earlier else "")
                   + f"(minitorch / PyTorch: {t_sgd['minitorch_over_pytorch_time']:.2f} and "
                   f"{t_adam['minitorch_over_pytorch_time']:.2f})")
    if missing:
        timing += f". Not measured yet: PyTorch {', '.join(missing)}"
    glue_md(timing_name, timing + ".")
