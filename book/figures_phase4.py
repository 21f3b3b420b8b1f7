"""Figures of the Phase 4 chapter (reductions and real data), drawn at build time.

Measured figures read ``benchmarks/results/phase4_reductions-*.json`` (``benchmarks/phase4_reductions.py``,
GPU) and ``phase4_sales-*.json`` (``benchmarks/phase4_sales.py``, GPU or emulator); without them the
chapter still builds, with a note saying which script to run. Every number quoted in the text is
generated here from those files or from ``grader/thresholds.toml``. The variance figure is computed
here, in NumPy float32; the diagrams (two passes, the tree, the shuffles) are drawn with matplotlib.
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    REPO_ROOT,
    VERMILLION,
    Results,
    _bytes_axis,
    _cell,
    _load,
    fmt_bytes,
    fmt_gbps,
    glue_figure,
    glue_md,
    latest,
    missing_figure,
    missing_md,
    results_dir,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SCRIPTS = {"phase4_reductions": "benchmarks/phase4_reductions.py", "phase4_sales": "benchmarks/phase4_sales.py"}


def _placeholder(benchmark: str, what: str, where: str = "a GPU"):
    return missing_figure(benchmark, what, SCRIPTS[benchmark], where)


def _missing_md(benchmark: str, where: str = "a GPU") -> str:
    return missing_md(benchmark, SCRIPTS[benchmark], where)


def thresholds() -> dict:
    with open(REPO_ROOT / "grader" / "thresholds.toml", "rb") as fh:
        return tomllib.load(fh)["phase4"]


def _fmt_ratio(x: float) -> str:
    return f"{x:.2f}" if x >= 0.1 else f"{x:.3f}" if x >= 0.01 else f"{x:.4f}"


# --------------------------------------------------------------------------------------
# The ladder: bandwidth of each variant against the copy ceiling
# --------------------------------------------------------------------------------------

_LADDER_STYLE = {
    "sum_atomic": dict(color=VERMILLION, marker="o", label="sum_atomic (an atomicAdd per element)"),
    "sum_shared": dict(color=ORANGE, marker="s", label="sum_shared (shared-memory tree)"),
    "sum_warp": dict(color=BLUE, marker="^", label="sum_warp (tree + warp shuffles)"),
    "max_warp": dict(color=PURPLE, marker="D", label="max_warp (shuffles only)"),
    "cupy_sum": dict(color=GREEN, marker="", ls="-.", label="cupy.sum (CUB)"),
}
_COPY_STYLE = dict(color="black", ls="--", lw=1.2, marker="", label="cupy.copyto: the copy ceiling")


def _ladder_rows(res: Results) -> dict[str, dict[int, dict]]:
    """{kernel: {bytes read by a reduction (4 n): row}} for the 1-D rows."""
    out: dict[str, dict[int, dict]] = {}
    for row in res.rows:
        if "n" not in row:
            continue
        for key in ("kernel", "gbps", "seconds"):
            if key not in row:
                raise ValueError(f"{res.path}: result row {row} lacks {key!r}")
        out.setdefault(row["kernel"], {})[4 * int(row["n"])] = row
    missing = {"copy", *_LADDER_STYLE} - set(out)
    if missing:
        raise ValueError(f"{res.path}: no rows for {sorted(missing)}")
    return out


def phase4_ladder(fig_name: str = "fig-phase4-ladder", text_name: str = "phase4-ladder-text",
                  caption_name: str = "phase4-ladder-source") -> None:
    """Glue the ladder figure (GB/s of each variant and of the copy against the array size) and its text."""
    res = latest("phase4_reductions")
    if res is None:
        glue_figure(fig_name, _placeholder("phase4_reductions", "the reduction ladder"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase4_reductions"))
        return
    data = _ladder_rows(res)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    sizes = sorted(data["copy"])
    ax.plot(sizes, [data["copy"][b]["gbps"] for b in sizes], ms=4, **_COPY_STYLE)
    for kernel, style in _LADDER_STYLE.items():
        xs = sorted(data[kernel])
        ax.plot(xs, [data[kernel][b]["gbps"] for b in xs], ms=4, **({"ls": "-"} | style))
    _bytes_axis(ax, sizes, max_ticks=9)
    ax.set_xlabel("array size (bytes a reduction reads)")
    ax.set_ylabel("GB/s")
    ax.set_yscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _ladder_text(data))


def _ladder_text(data: dict[str, dict[int, dict]]) -> str:
    big = max(set(data["copy"]) & set(data["sum_warp"]))
    copy = data["copy"][big]["gbps"]
    limits = thresholds()

    def at(kernel: str) -> str:
        gbps = data[kernel][big]["gbps"]
        return f"{fmt_gbps(gbps)} GB/s ({_fmt_ratio(gbps / copy)}× the copy)"

    warp, cub = data["sum_warp"][big]["gbps"], data["cupy_sum"][big]["gbps"]
    small = min(set(data["sum_warp"]) & set(data["cupy_sum"]))
    return (f"At {fmt_bytes(big)} ({big // 4:,} floats) the copy moved {fmt_gbps(copy)} GB/s. The atomic sum "
            f"read {at('sum_atomic')}, the shared-memory tree {at('sum_shared')}, the tree with a warp-shuffle "
            f"final stage {at('sum_warp')}, and the all-shuffle max {at('max_warp')}; `cupy.sum` read "
            f"{at('cupy_sum')}, so the warp sum ran at {_fmt_ratio(warp / cub)}× CUB's speed. The grader asks your "
            f"warp sum for {limits['sum_vs_copy']}× the copy bandwidth and {limits['sum_vs_cupy']}× `cupy.sum` "
            f"(`grader/thresholds.toml`). At {fmt_bytes(small)} every kernel, CUB's included, took "
            f"{min(data[k][small]['seconds'] for k in ('sum_warp', 'cupy_sum')) * 1e6:.1f} µs or more: at that size "
            f"the fixed cost of launching kernels, not memory, sets the time.")


def phase4_columns(text_name: str = "phase4-columns-text") -> None:
    """Glue a sentence with the measured column statistics: GB/s per shape, against CuPy and the copy."""
    res = latest("phase4_reductions")
    rows = [r for r in res.rows if r.get("kernel") in ("column_mean_var", "cupy_mean_var")] if res else []
    if not rows:
        glue_md(text_name, _missing_md("phase4_reductions"))
        return
    ours = {(r["rows"], r["cols"]): r for r in rows if r["kernel"] == "column_mean_var"}
    cupy = {(r["rows"], r["cols"]): r for r in rows if r["kernel"] == "cupy_mean_var"}
    copy = max((r for r in res.rows if r.get("kernel") == "copy"), key=lambda r: r["bytes"])
    parts = [f"{m:,} × {n}: {fmt_gbps(ours[m, n]['gbps'])} GB/s (CuPy: {fmt_gbps(cupy[m, n]['gbps'])} GB/s)"
             for (m, n) in ours if (m, n) in cupy]
    limit = thresholds()["column_mean_var"]
    glue_md(text_name,
            f"{res.provenance} Bytes of x read per second: "
            + "; ".join(parts) + f". The copy moved {fmt_gbps(copy['gbps'])} GB/s. The grader asks for "
            f"{limit}× the copy bandwidth on the two tall, narrow shapes, which a kernel with one block per "
            f"32 columns does not reach (the calibration note in `grader/thresholds.toml`).")


# --------------------------------------------------------------------------------------
# Variance: the textbook formula against two passes and Welford, in float32
# --------------------------------------------------------------------------------------

def _variances_float32(x: np.ndarray) -> dict[str, float]:
    """Population variance of x by three methods, every operation in float32 (sums sequential, as a thread)."""
    n = np.float32(len(x))
    s = np.cumsum(x, dtype=np.float32)[-1]
    s2 = np.cumsum(x * x, dtype=np.float32)[-1]
    mean = s / n
    naive = s2 / n - mean * mean
    d = x - mean
    two_pass = np.cumsum(d * d, dtype=np.float32)[-1] / n
    m, m2 = np.float32(0), np.float32(0)
    for k, v in enumerate(x, start=1):  # Welford: running mean and sum of squared deviations
        delta = v - m
        m = np.float32(m + delta / np.float32(k))
        m2 = np.float32(m2 + delta * (v - m))
    return {"naive": float(naive), "two_pass": float(two_pass), "welford": float(m2 / n)}


def phase4_variance(fig_name: str = "fig-phase4-variance", text_name: str = "phase4-variance-text") -> None:
    """Glue the relative error of the three variance methods against mean / standard deviation."""
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(4096)
    offsets = 10.0 ** np.arange(0, 6.5, 0.5)
    errors: dict[str, list[float]] = {"naive": [], "two_pass": [], "welford": []}
    for offset in offsets:
        x = (offset + noise).astype(np.float32)
        exact = x.astype(np.float64).var()
        for method, value in _variances_float32(x).items():
            errors[method].append(max(abs(value - exact) / exact, 1e-9))
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    style = {"naive": dict(color=VERMILLION, marker="o", label="E[x²] − E[x]² (one pass)"),
             "two_pass": dict(color=BLUE, marker="s", label="two passes: mean, then Σ(x − mean)²"),
             "welford": dict(color=GREEN, marker="^", label="Welford (one pass, running mean)")}
    for method, values in errors.items():
        ax.loglog(offsets, values, ms=4, **style[method])
    ax.axhline(1.0, color=GREY, lw=1, ls=":")
    ax.annotate("100% error", xy=(offsets[0], 1.0), xytext=(0, 4), textcoords="offset points", fontsize=8,
                color="#555555")
    ax.set_xlabel("mean / standard deviation of the data")
    ax.set_ylabel("relative error of the variance")
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    at = int(np.argmin(np.abs(offsets - 1e4)))
    glue_md(text_name,
            f"At a mean of {offsets[at]:,.0f} standard deviations the textbook formula's error was "
            f"{100 * errors['naive'][at]:,.0f}%, the two-pass method's {100 * errors['two_pass'][at]:.2g}% and "
            f"Welford's {100 * errors['welford'][at]:.2g}% ({len(noise):,} values, float32, computed when this book "
            f"was built).")


# --------------------------------------------------------------------------------------
# The deliverable
# --------------------------------------------------------------------------------------

def _sales_results() -> tuple[Results, dict] | None:
    """The phase4_sales file to show: a GPU run (full configuration) when there is one, the newest otherwise."""
    paths = sorted(results_dir().glob("phase4_sales-*.json"))
    if not paths:
        return None
    loaded = []
    for path in paths:
        doc = json.loads(path.read_text())
        loaded.append((doc.get("configuration") == "full", str(doc.get("date")), path.name, _load(path, "phase4_sales"),
                       doc))
    _, _, _, res, doc = max(loaded, key=lambda t: t[:3])
    return res, doc


def _summary(res: Results, framework: str, features: str) -> dict | None:
    found = [r for r in res.rows if r.get("kind") == "summary" and r.get("framework") == framework
             and r.get("features") == features]
    return found[0] if found else None


def phase4_sales(fig_name: str = "fig-phase4-sales", text_name: str = "phase4-sales-text",
                 caption_name: str = "phase4-sales-source", timing_name: str = "phase4-sales-timing") -> None:
    """Glue the training figure (loss and test MAE per epoch, predicted vs actual) and the deliverable's numbers."""
    limit = thresholds()["sales_mae_ratio"]
    found = _sales_results()
    if found is None:
        glue_figure(fig_name, _placeholder("phase4_sales", "the sales regression", "a GPU (or the emulator)"))
        glue_md(caption_name, "")
        glue_md(text_name, f"The grader's threshold is {limit}× the mean predictor's MAE. "
                + _missing_md("phase4_sales", "a GPU (or the emulator)"))
        glue_md(timing_name, "")
        return
    res, doc = found
    epochs = {f: [r for r in res.rows if r.get("kind") == "epoch" and r.get("features") == f
                  and r.get("framework", "minitorch") == "minitorch"] for f in ("log", "raw")}
    [prediction] = [r for r in res.rows if r.get("kind") == "prediction"]
    log, raw = _summary(res, "minitorch", "log"), _summary(res, "minitorch", "raw")
    if log is None or not epochs["log"]:
        raise ValueError(f"{res.path}: no summary or epochs of the log-space model")

    fig, (loss_ax, mae_ax, scatter_ax) = plt.subplots(1, 3, figsize=(11, 3.4))
    style = {"log": dict(color=BLUE, marker="o", label="log quantity and price (the lab)"),
             "raw": dict(color=VERMILLION, marker="s", label="raw quantity and price")}
    for features, rows in epochs.items():
        if rows:
            xs = [r["epoch"] for r in rows]
            loss_ax.plot(xs, [r["train_loss"] for r in rows], ms=3, **style[features])
            mae_ax.plot(xs, [r["test_mae"] for r in rows], ms=3, **style[features])
    loss_ax.set(xlabel="epoch", ylabel="training loss (normalised MSE)", yscale="log", title="training loss")
    mae_ax.axhline(log["baseline_mae"], color=GREY, ls="--", lw=1, label="mean predictor")
    mae_ax.axhline(limit * log["baseline_mae"], color="black", ls=":", lw=1, label=f"threshold ({limit}×)")
    mae_ax.set(xlabel="epoch", ylabel="test MAE (price units)", yscale="log", title="test MAE")
    actual, predicted = np.asarray(prediction["actual"]), np.asarray(prediction["predicted"])
    scatter_ax.loglog(actual, predicted, ".", ms=2, alpha=0.4, color=BLUE)
    lo, hi = actual.min(), actual.max()
    scatter_ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    scatter_ax.set(xlabel="actual total price", ylabel="predicted total price",
                   title=f"{len(actual):,} test sales (log model)")
    fig.legend(*mae_ax.get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8,
               bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    glue_figure(fig_name, fig)
    config = doc.get("config", {})
    configuration = ("the full configuration" if doc.get("configuration") == "full" else
                     f"the reduced configuration ({doc.get('train_rows', config.get('train_rows')):,} training rows)")
    glue_md(caption_name, f"{config.get('epochs')} epochs, batches of {config.get('batch_size')}, {configuration}. "
            + res.provenance)
    text = (f"With {configuration} the reference solution reached a test MAE of {log['test_mae']:.3f} on "
            f"{doc.get('test_rows', 0):,} test sales, where the mean predictor's is {log['baseline_mae']:.2f}: "
            f"{_fmt_ratio(log['ratio'])}× the baseline. The grader's threshold is {limit}×, "
            f"{limit / log['ratio']:.0f} times the reference's ratio.")
    if raw is not None:
        text += (f" The same model and settings on raw quantity and price, predicting the raw total, ended at "
                 f"{_fmt_ratio(raw['ratio'])}× the baseline.")
    glue_md(text_name, text)
    glue_md(timing_name, _timing_text(res, log, doc))


def _timing_text(res: Results, log: dict, doc: dict) -> str:
    epochs = doc.get("config", {}).get("epochs")
    if doc.get("configuration") != "full":
        return (f"*These figures come from the emulator ({res.device}), where {epochs} epochs took "
                f"{log['train_seconds']:.0f} s; the emulator's time says nothing about a GPU. The GPU measurement "
                f"(`python {SCRIPTS['phase4_sales']}` on a GPU) is not committed yet.*")
    text = f"On {res.device}, {epochs} epochs took {log['train_seconds']:.1f} s"
    if "gpu_memory_bytes" in log:
        text += f", and CuPy's memory pool held {log['gpu_memory_bytes'] / 2**20:.0f} MiB of GPU memory afterwards"
    text += "."
    graph = _summary(res, "minitorch_graph", "log")
    if graph is not None:
        text += (f" With each training step captured into a graph (appendix *Where a training step's time goes*), "
                 f"the same training took {graph['train_seconds']:.1f} s, to the same test MAE.")
    # PyTorch three ways (benchmarks/torch_race.py), like against like: eager against eager, graph against graph
    ways = (("pytorch", "eager", log), ("pytorch_graph", "captured in a CUDA graph", graph),
            ("pytorch_compile", "through torch.compile", log))
    missing = []
    for framework, what, ours in ways:
        torch = _summary(res, framework, "log")
        if torch is None:
            missing.append(what)
            continue
        text += (f" PyTorch {torch.get('torch', '')} {what}, with the same batches copied from the host and the "
                 f"same evaluation after every epoch, took {torch['train_seconds']:.1f} s")
        if ours is not None:
            text += f" (minitorch {'captured' if ours is graph else 'eager'}: {ours['train_seconds'] / torch['train_seconds']:.2f}× that)"
        if framework == "pytorch_compile" and "first_epoch_seconds" in torch:
            text += f" (its first epoch, compiling the model, took {torch['first_epoch_seconds']:.1f} s)"
        if "gpu_memory_bytes" in torch:
            text += f", allocated at most {torch['gpu_memory_bytes'] / 2**20:.0f} MiB"
        text += f"; its test MAE was {torch['test_mae']:.3f}."
    if missing:
        text += f" Not measured yet: PyTorch {', '.join(missing)}."
    return text


# --------------------------------------------------------------------------------------
# Diagrams
# --------------------------------------------------------------------------------------

def diagram_two_pass(blocks: int = 4, per_block: int = 6):
    """Pass 1: each block reduces its grid-stride share to one partial; pass 2: one block reduces the partials."""
    n = blocks * per_block
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.set_xlim(-1.5, n + 0.5)
    ax.set_ylim(-2.3, 3.2)
    ax.axis("off")
    colours = [BLUE, ORANGE, GREEN, PURPLE, VERMILLION]
    for i in range(n):
        b = i % blocks  # grid-stride: element i belongs to block (i // threads) % blocks; one thread a block here
        _cell(ax, i, 2.0, fc=colours[b], alpha=0.45, text=f"x{i}", fs=7)
    ax.text(-0.3, 2.5, "x", ha="right", va="center", fontsize=9)
    centre = n / 2 - blocks / 2
    for b in range(blocks):
        _cell(ax, centre + b, 0.0, fc=colours[b], alpha=0.8, text=f"p{b}", fs=8)
        for i in range(b, n, blocks):
            ax.plot([i + 0.5, centre + b + 0.5], [2.0, 1.0], color=colours[b], lw=0.5, alpha=0.6)
    ax.text(centre - 0.3, 0.5, "partial", ha="right", va="center", fontsize=9)
    _cell(ax, n / 2 - 0.5, -2.0, fc=GREY, alpha=0.8, text="out", fs=8)
    for b in range(blocks):
        ax.plot([centre + b + 0.5, n / 2], [0.0, -1.0], color="black", lw=0.7)
    ax.text(n + 0.3, 1.5, "pass 1: block b reduces its share\n(grid-stride: every 4th element)", ha="right",
            va="center", fontsize=8)
    ax.text(n + 0.3, -1.0, "pass 2: one block\nreduces the partials", ha="right", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def diagram_tree(values: int = 16):
    """Sequential addressing: at each step thread t < s adds slot t + s; a barrier between steps."""
    steps = int(np.log2(values))
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.set_xlim(-3.2, values + 0.2)
    ax.set_ylim(-0.6, steps + 1.4)
    ax.axis("off")
    active = values
    for level in range(steps + 1):
        y = steps - level
        for t in range(values):
            live = t < active
            _cell(ax, t + 0.05, y + 0.1, 0.9, 0.7, fc=BLUE if live else "white", alpha=0.5 if live else 1.0,
                  ec="black" if live else GREY, text=str(t) if live else "", fs=7)
        label = "cache[t]" if level == 0 else f"s = {active}: t < {active}"
        ax.text(-0.3, y + 0.45, label, ha="right", va="center", fontsize=8, family="monospace")
        if level < steps:
            s = active // 2
            for t in range(s):
                ax.annotate("", xy=(t + 0.5, y - 0.2), xytext=(t + s + 0.5, y + 0.1),
                            arrowprops=dict(arrowstyle="-|>", color=ORANGE, lw=0.8))
                ax.plot([t + 0.5, t + 0.5], [y + 0.1, y - 0.2], color=BLUE, lw=0.8)
            ax.plot([-0.1, values], [y - 0.05, y - 0.05], color=VERMILLION, lw=0.6, ls=":")
            active = s
    ax.text(values, -0.45, "dotted: __syncthreads() between steps; cache[t] += cache[t + s] for t < s",
            ha="right", fontsize=8, color="#555555")
    fig.tight_layout()
    return fig


def diagram_shuffle(lanes: int = 8):
    """__shfl_down_sync: lane i adds the value of lane i + offset; offsets halve; lane 0 ends with the sum."""
    steps = int(np.log2(lanes))
    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    ax.set_xlim(-2.8, lanes + 0.2)
    ax.set_ylim(-0.6, steps + 1.3)
    ax.axis("off")
    offset = lanes // 2
    for level in range(steps + 1):
        y = steps - level
        for lane in range(lanes):
            useful = lane < (lanes >> level)
            _cell(ax, lane + 0.05, y + 0.1, 0.9, 0.7, fc=GREEN if useful else "white", alpha=0.5 if useful else 1.0,
                  ec="black" if useful else GREY, text=f"lane {lane}" if level == 0 else "", fs=6.5)
        ax.text(-0.3, y + 0.45, "v" if level == 0 else f"offset {lanes >> level}", ha="right", va="center",
                fontsize=8, family="monospace")
        if level < steps:
            for lane in range(lanes - offset):
                ax.annotate("", xy=(lane + 0.5, y - 0.2), xytext=(lane + offset + 0.5, y + 0.1),
                            arrowprops=dict(arrowstyle="-|>", color=ORANGE, lw=0.7))
            offset //= 2
    ax.text(lanes, -0.45, f"v += __shfl_down_sync(0xffffffff, v, offset): registers to registers, no barrier "
            f"({lanes} of the 32 lanes shown)", ha="right", fontsize=7.5, color="#555555")
    fig.tight_layout()
    return fig
