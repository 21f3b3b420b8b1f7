"""Figures of the Phase 6 chapter (CNNs and MNIST), drawn at build time.

Measured figures read ``benchmarks/results/phase6_conv-*.json`` (``benchmarks/phase6_conv.py``, GPU: the
convolution ladder, max pooling and softmax against cuDNN, PyTorch and the copy bandwidth),
``phase6_mnist-*.json`` (``benchmarks/phase6_mnist.py``, GPU: the deliverable against PyTorch eager) and
``phase6_mnist_recipe-*.json`` (``benchmarks/phase6_mnist_recipe.py``, GPU: the recipe's calibration).
Without them the chapter still builds, with a note saying which script to run. Every number quoted in the text
is generated here from those files or from ``grader/thresholds.toml``. The tile-and-halo diagram is drawn with
matplotlib.
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
    _cell,
    _load,
    fmt_time,
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

SCRIPTS = {"phase6_conv": "benchmarks/phase6_conv.py", "phase6_mnist": "benchmarks/phase6_mnist.py",
           "phase6_mnist_recipe": "benchmarks/phase6_mnist_recipe.py",
           "phase6_conv_error": "benchmarks/phase6_conv_error.py",
           "phase6_conv_sweep": "benchmarks/phase6_conv_sweep.py",
           "phase6_conv_small": "benchmarks/phase6_conv_small.py"}
SKY = "#56B4E9"  # Okabe-Ito's sky blue, for the Winograd rung
DEEP_SKY = "#1F6F9F"  # a darker sky blue, for the Winograd F(4x4, 3x3) rung
# The rungs in the ladder's order; a rung the JSON does not hold (measured before it existed) is absent.
VARIANT_STYLE = {"direct": VERMILLION, "im2col": ORANGE, "tiled": GREEN, "igemm": PURPLE, "winograd": SKY,
                 "winograd4": DEEP_SKY,
                 "best": BLUE, "best_tuned": "#0B3C5D", "cudnn": GREY}
PASS_LABEL = {"forward": "forward", "backward_input": "input gradient", "backward_weight": "weight gradient",
              "backward_bias": "bias gradient"}
SHAPE_LABEL = {"mnist-conv1": "MNIST layer 1 (64×1×28×28 → 8)", "mnist-conv2": "MNIST layer 2 (64×8×14×14 → 16)",
               "resnet": "ResNet layer (64×64×56×56 → 64)"}


def _placeholder(benchmark: str, what: str, where: str = "a GPU"):
    return missing_figure(benchmark, what, SCRIPTS[benchmark], where)


def _missing_md(benchmark: str, where: str = "a GPU") -> str:
    return missing_md(benchmark, SCRIPTS[benchmark], where)


def thresholds() -> dict:
    with open(REPO_ROOT / "grader" / "thresholds.toml", "rb") as fh:
        return tomllib.load(fh)["phase6"]


def _full(benchmark: str) -> tuple[Results, dict] | None:
    """The newest results of a GPU run (``mode``/``configuration`` full) when there is one, else the newest."""
    paths = sorted(results_dir().glob(f"{benchmark}-*.json"))
    if not paths:
        return None
    loaded = []
    for path in paths:
        doc = json.loads(path.read_text())
        full = doc.get("configuration", doc.get("mode", "full")) == "full"
        loaded.append((full, str(doc.get("date")), path.name, _load(path, benchmark), doc))
    _, _, _, res, doc = max(loaded, key=lambda t: t[:3])
    return res, doc


# --------------------------------------------------------------------------------------
# Kernels: softmax, the convolution ladder, pooling
# --------------------------------------------------------------------------------------

def phase6_softmax(fig_name: str = "fig-phase6-softmax", text_name: str = "phase6-softmax-text",
                   caption_name: str = "phase6-softmax-source") -> None:
    found = _full("phase6_conv")
    limits = thresholds()
    bars = (f"The grader asks softmax for {limits['softmax_warp']}× the copy bandwidth with a warp per row and "
            f"{limits['softmax_block']}× with a block per row (`grader/thresholds.toml`).")
    if found is None:
        glue_figure(fig_name, _placeholder("phase6_conv", "softmax's bandwidth"))
        glue_md(caption_name, "")
        glue_md(text_name, bars + " " + _missing_md("phase6_conv"))
        return
    res, _ = found
    rows = [r for r in res.rows if r.get("kind") == "softmax"]
    shapes = sorted({(r["rows"], r["cols"]) for r in rows}, key=lambda s: s[1])
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.38
    for i, (op, colour) in enumerate((("softmax", BLUE), ("cross_entropy", ORANGE))):
        ratios = [next(r["ratio"] for r in rows if (r["rows"], r["cols"]) == s and r["op"] == op) for s in shapes]
        ax.bar(np.arange(len(shapes)) + (i - 0.5) * width, ratios, width,
               label="softmax" if op == "softmax" else "cross-entropy, forward + backward", color=colour)
    ax.axhline(1.0, color="black", lw=0.8, ls=":")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{r:,} × {c:,}\n({'warp' if c <= 1024 else 'block'} per row)" for r, c in shapes],
                       fontsize=8)
    ax.set(ylabel="× the copy bandwidth", ylim=(0, 1.15))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    soft = {(r["rows"], r["cols"]): r for r in rows if r["op"] == "softmax"}
    parts = [f"{r:,} rows of {c:,}: {soft[(r, c)]['gbps']:,.0f} GB/s ({soft[(r, c)]['ratio']:.2f}× the copy's "
             f"{soft[(r, c)]['copy_gbps']:,.0f} GB/s)" for r, c in shapes]
    glue_md(text_name, "Softmax moved " + "; ".join(parts) + ". " + bars)


def _conv_rows(res: Results) -> list[dict]:
    rows = [r for r in res.rows if r.get("kind") == "conv"]
    if not rows:
        raise ValueError(f"{res.path}: no convolution rows")
    return rows


def phase6_conv_ladder(fig_name: str = "fig-phase6-conv", text_name: str = "phase6-conv-text",
                       caption_name: str = "phase6-conv-source") -> None:
    """Each rung's speed as a multiple of cuDNN's, per pass (forward, input and weight gradients) and shape."""
    limits = thresholds()
    bars = (f"The grader times variant `best` against cuDNN, forward and backward (both gradients and the bias) "
            f"together: at least {limits['conv_forward_mnist']}× and {limits['conv_backward_mnist']}× cuDNN on "
            f"MNIST's second layer, {limits['conv_forward_resnet']}× and {limits['conv_backward_resnet']}× on the "
            f"ResNet layer.")
    found = _full("phase6_conv")
    if found is None:
        glue_figure(fig_name, _placeholder("phase6_conv", "the convolution ladder against cuDNN"))
        glue_md(caption_name, "")
        glue_md(text_name, bars + " " + _missing_md("phase6_conv"))
        return
    res, _ = found
    rows = _conv_rows(res)
    shapes = [s for s in SHAPE_LABEL if any(r["shape"] == s for r in rows)]
    passes = tuple(p for p in PASS_LABEL if any(r["pass"] == p for r in rows))
    fig, axes = plt.subplots(1, len(shapes), figsize=(11, 3.6), sharey=True, squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        for j, pass_ in enumerate(passes):
            found_rows = sorted((r for r in rows if r["shape"] == shape and r["pass"] == pass_
                                 and r["variant"] != "cudnn"), key=lambda r: list(VARIANT_STYLE).index(r["variant"]))
            width = 0.8 / max(len(found_rows), 1)
            for i, r in enumerate(found_rows):
                x = j + (i - (len(found_rows) - 1) / 2) * width
                ax.bar(x, r["ratio"], 0.9 * width, color=VARIANT_STYLE[r["variant"]])
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xticks(range(len(passes)))
        ax.set_xticklabels([PASS_LABEL[p].replace(" ", "\n") for p in passes], fontsize=8)
        ax.set_title(SHAPE_LABEL[shape], fontsize=9)
    axes[0][0].set_ylabel("× cuDNN's speed (log)")
    measured = {r["variant"] for r in rows}
    handles = {v: plt.Rectangle((0, 0), 1, 1, color=c) for v, c in VARIANT_STYLE.items()
               if v != "cudnn" and v in measured}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8,
               bbox_to_anchor=(0.5, -0.01))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)

    def best(shape: str, pass_: str) -> str:
        ours = [r for r in rows if r["shape"] == shape and r["pass"] == pass_ and r["variant"] == "best"]
        ref = [r for r in rows if r["shape"] == shape and r["pass"] == pass_ and r["variant"] == "cudnn"]
        if not ours or not ref:
            return "not measured"
        said = (f"{ours[0]['ratio']:.2f}× cuDNN's speed ({fmt_time(ours[0]['seconds'])} against "
                f"{fmt_time(ref[0]['seconds'])})")
        tuned = [r for r in rows if r["shape"] == shape and r["pass"] == pass_ and r["variant"] == "best_tuned"]
        if tuned:
            said += f" ({tuned[0]['ratio']:.2f}× after `autotune()`, which chose `{tuned[0]['tuned']}`)"
        rungs = [r for r in rows if r["shape"] == shape and r["pass"] == pass_
                 and r["variant"] not in ("best", "best_tuned", "cudnn")]
        fastest = max(rungs, key=lambda r: r["ratio"], default=None)
        if fastest is not None and fastest["ratio"] > 1.05 * ours[0]["ratio"]:  # a rule older than this run's rungs
            said += f", where the {fastest['variant']} rung ran at {fastest['ratio']:.2f}×"
        return said

    text = " ".join(f"On {SHAPE_LABEL[s]}, `best` ran the forward pass at {best(s, 'forward')}, the "
                    f"input gradient at {best(s, 'backward_input')}, the weight gradient at "
                    f"{best(s, 'backward_weight')} and the bias gradient at {best(s, 'backward_bias')}."
                    for s in shapes)
    missing = [v for v in ("igemm", "winograd", "winograd4") if v not in measured]
    if missing:
        text += (f" This run predates the {' and '.join(f'`{v}`' for v in missing)} "
                 f"rung{'s' if len(missing) > 1 else ''}: not measured yet (`{SCRIPTS['phase6_conv']}` on a GPU).")
    glue_md(text_name, text + " " + bars)


def phase6_conv_error(text_name: str = "phase6-conv-error-text") -> None:
    """The forward rungs' rounding error against float64, Winograd's next to the direct rung's."""
    res = latest("phase6_conv_error")
    if res is None:
        glue_md(text_name, missing_md("phase6_conv_error", SCRIPTS["phase6_conv_error"], "the emulator or a GPU"))
        return
    def four(row: dict | None) -> str:  # F(4x4, 3x3), in results that measured it
        if row is None:
            return ""
        return (f"; F(4×4, 3×3)'s largest error is {row['eps_of_scale']:.2f} ε, its values "
                f"{row['winograd_scale']:.1f} times Σ|w·x|")

    parts = []
    for layer in dict.fromkeys(r["layer"] for r in res.rows):
        rung = {r["rung"]: r for r in res.rows if r["layer"] == layer}
        direct, wino = rung["direct"], rung["winograd"]
        igemm = rung["igemm"]
        same = ("the same bits as the direct rung's: the same products summed in the same order"
                if igemm.get("bitwise_equal_to_direct") else f"{igemm['eps_of_scale']:.2f} ε")
        images = f"{direct['n']} image{'s' if direct['n'] > 1 else ''}"
        parts.append(f"on {SHAPE_LABEL.get(layer, layer).split(' (')[0]} ({images}, {direct['c']} → "
                     f"{direct['k']} channels, {direct['h']} × {direct['w']}) the direct rung's largest error is "
                     f"{direct['eps_of_scale']:.2f} ε of Σ|w·x| and Winograd's {wino['eps_of_scale']:.2f} ε, "
                     f"although the values Winograd rounds are {wino['winograd_scale']:.1f} times Σ|w·x| "
                     f"(the implicit GEMM: {same})" + four(rung.get("winograd4")))
    glue_md(text_name, "Measured: " + "; ".join(parts) + f". {res.provenance}")


def phase6_conv_profile(text_name: str = "phase6-conv-profile-text") -> None:
    """Nsight Compute's view of the Winograd and weight-gradient kernels on the ResNet layer, kernel by kernel."""
    res = latest("phase6_conv_profile")
    if res is None:
        glue_md(text_name, missing_md("phase6_conv_profile", "ncu, then benchmarks/phase6_conv_profile.py",
                                      "a GPU"))
        return
    names = {"forward winograd": "F(2×2, 3×3) forward", "forward winograd4": "F(4×4, 3×3) forward",
             "input winograd4": "F(4×4, 3×3) input gradient", "weight igemm": "the weight gradient (`igemm`)"}
    parts = []
    for pass_, label in names.items():
        rows = [r for r in res.rows if r.get("pass") == pass_]
        if not rows:
            continue
        each = ", ".join(f"`{r['kernel']}` {fmt_time(r['seconds'])} ({r['dram_pct']:.0f}% of the DRAM bandwidth, "
                         f"the L1/shared-memory pipeline {r['l1_pct']:.0f}% busy, {r['sm_pct']:.0f}% of the SMs' "
                         f"throughput, {r['registers']:.0f} registers a thread, occupancy "
                         f"{r['achieved_occupancy_pct']:.0f}%)" for r in rows)
        parts.append(f"{label}: {each}")
    glue_md(text_name, "Measured with `ncu --set full`: " + "; ".join(parts) + f". {res.provenance}")


def phase6_conv_sweep(text_name: str = "phase6-conv-sweep-text") -> None:
    """The weight gradient's speed against its split (MIN_CHUNK) on MNIST's layers, and what conv.py chose."""
    res = latest("phase6_conv_sweep")
    if res is None:
        glue_md(text_name, missing_md("phase6_conv_sweep", SCRIPTS["phase6_conv_sweep"], "a GPU"))
        return

    def ratio(shape: str, variant: str, chunk: int) -> str:
        found = [r["ratio"] for r in res.rows if r["pass"] == "weight" and r["shape"] == shape
                 and r["variant"] == variant and r["min_chunk"] == chunk and r["split_blocks"] == 1024]
        return f"{found[0]:.2f}×" if found else "not measured"

    chunks = sorted({r["min_chunk"] for r in res.rows if r["pass"] == "weight"})
    parts = []
    for shape, variant in (("mnist-conv2", "igemm"), ("mnist-conv2", "tiled"), ("mnist-conv1", "tiled"),
                           ("mnist-conv1", "igemm")):
        each = ", ".join(f"{ratio(shape, variant, c)} at {c}" for c in chunks)
        parts.append(f"{SHAPE_LABEL.get(shape, shape).split(' (')[0]}, `{variant}`: {each}")
    glue_md(text_name, "The weight gradient against cuDNN for chunks of at least `MIN_CHUNK` positions "
            "(`SPLIT_BLOCKS` 1024): " + "; ".join(parts) + ". `conv.py` now takes `MIN_CHUNK` = 128 and runs "
            "`igemm` from 16 output channels (`tiled` below). " + res.provenance)


def phase6_conv_small(text_name: str = "phase6-conv-small-text") -> None:
    """MNIST's second layer: rung 3 against Winograd, the input gradient's direct and tiled kernels and the bias
    gradient's grids, from benchmarks/phase6_conv_small.py's sweep. Times only: the sweep's own cuDNN timings
    (its first measurements, the GPU's clocks still rising) are no reference; the ladder's ratios are."""
    res = latest("phase6_conv_small")
    if res is None:
        glue_md(text_name, missing_md("phase6_conv_small", SCRIPTS["phase6_conv_small"], "a GPU"))
        return
    rows = [r for r in res.rows if r["shape"] == "mnist-conv2" and r["variant"] != "cudnn"]

    def fastest(pass_: str, variant: str, count: int, say) -> str:
        found = sorted((r for r in rows if r["pass"] == pass_ and r["variant"] == variant), key=lambda r: r["seconds"])
        return ", ".join(f"{say(r)} {fmt_time(r['seconds'])}" for r in found[:count])

    parts = []
    forward = fastest("forward", "tiled", 6, lambda r: f"rung 3 with {r['ktile']} filters a block and "
                                                       f"{r['cgroup']} channels a step")
    wino = fastest("forward", "winograd", 1, lambda r: "Winograd F(2×2, 3×3)")
    if forward:
        parts.append("the forward pass in " + forward + (f", in {wino}" if wino else ""))
    direct = fastest("backward_input", "direct", 1, lambda r: "the direct gather")
    tiled = fastest("backward_input", "tiled", 3, lambda r: (
        f"the tiled kernel with {r['ict']} channels a block, "
        + (f"{r['istage']} values of dy loaded at once, " if "istage" in r else "")
        + f"{r['kgroup']} of dy's channels a step" + (" and its r, s loops unrolled" if r.get("unroll_rs") else "")))
    if direct or tiled:
        parts.append("the input gradient in " + ", in ".join(p for p in (direct, tiled) if p))
    bias = fastest("backward_bias", "split", 4, lambda r: (
        f"{r['splits']} block{'s' if r['splits'] > 1 else ''} of {r['threads']} threads a channel"
        + ("" if r["splits"] == 1 else " and `splitk_reduce`")))
    if bias:
        parts.append("the bias gradient in " + bias)
    glue_md(text_name, "On MNIST's second layer, a pass took: " + "; ".join(parts) + " (the fastest few of "
            "each). " + res.provenance)


def phase6_maxpool(text_name: str = "phase6-maxpool-text") -> None:
    found = _full("phase6_conv")
    if found is None:
        glue_md(text_name, _missing_md("phase6_conv"))
        return
    res, _ = found
    rows = [r for r in res.rows if r.get("kind") == "maxpool"]
    parts = [f"{SHAPE_LABEL.get(r['shape'], r['shape']).split(' (')[0]} {r['pass']}: {fmt_time(r['seconds'])}, "
             f"{r['ratio']:.2f}× PyTorch's speed" for r in rows]
    glue_md(text_name, "Measured (2 × 2 pooling of the layers' outputs): " + "; ".join(parts) + ". "
            + res.provenance)


# --------------------------------------------------------------------------------------
# The deliverable
# --------------------------------------------------------------------------------------

def _epochs(res: Results, framework: str, recipe: str) -> list[dict]:
    return [r for r in res.rows if r.get("kind") == "epoch" and r["framework"] == framework and r["recipe"] == recipe]


LAB_RECIPE = "cosine_shift"  # benchmarks/phase6_mnist.py's name for the lab's recipe


def _summary(res: Results, framework: str, recipe: str = LAB_RECIPE) -> dict | None:
    found = [r for r in res.rows if r.get("kind") == "summary" and r["framework"] == framework
             and r.get("recipe") == recipe]
    return found[0] if found else None


def phase6_mnist(fig_name: str = "fig-phase6-mnist", text_name: str = "phase6-mnist-text",
                 caption_name: str = "phase6-mnist-source", time_fig: str = "fig-phase6-mnist-time",
                 time_text: str = "phase6-mnist-time-text", progress_name: str = "phase6-mnist-progress") -> None:
    """Loss and test accuracy per epoch (minitorch's recipe and plain Adam, PyTorch on the same batches), the
    time of an epoch, and the progress bar's last line."""
    limits = thresholds()
    bars = (f"The grader's bar is {limits['mnist_accuracy']:.0%} for the full configuration and "
            f"{limits['mnist_accuracy_reduced']:.0%} for the emulator's reduced one.")
    found = _full("phase6_mnist")
    if found is None or found[1].get("configuration") != "full":
        for name, what in ((fig_name, "the MNIST training"), (time_fig, "the time of an MNIST epoch")):
            glue_figure(name, _placeholder("phase6_mnist", what))
        glue_md(caption_name, "")
        glue_md(text_name, bars + " " + _missing_md("phase6_mnist"))
        glue_md(time_text, "")
        glue_md(progress_name, "*The progress bar of a GPU run appears here once its results are committed.*")
        return
    res, doc = found
    series = {("minitorch", LAB_RECIPE): dict(color=BLUE, marker="o", label="minitorch, the lab's recipe"),
              ("pytorch", LAB_RECIPE): dict(color=GREY, marker="x", ls="--", label="PyTorch, same weights and batches"),
              ("minitorch", "constant"): dict(color=ORANGE, marker="s", label="minitorch, plain Adam 1e-3")}
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 3.5))
    for (framework, recipe), style in series.items():
        rows = _epochs(res, framework, recipe)
        if rows:
            xs = [r["epoch"] for r in rows]
            loss_ax.plot(xs, [r["train_loss"] for r in rows], ms=4, **style)
            acc_ax.plot(xs, [100 * r["test_accuracy"] for r in rows], ms=4, **style)
    loss_ax.set(xlabel="epoch", ylabel="training loss (cross-entropy)", yscale="log")
    acc_ax.axhline(100 * limits["mnist_accuracy"], color="black", ls=":", lw=1)
    acc_ax.axhline(99.0, color=GREEN, ls=":", lw=1)
    acc_ax.set(xlabel="epoch", ylabel="accuracy on the 10,000 test images (%)", ylim=(97.0, 99.6))
    acc_ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    ours, plain, torch = _summary(res, "minitorch"), _summary(res, "minitorch", "constant"), _summary(res, "pytorch")
    text = f"With the lab's recipe the reference reached {ours['test_accuracy']:.2%} after 10 epochs"
    if torch is not None:
        text += f"; PyTorch, from the same initial weights on the same batches, {torch['test_accuracy']:.2%}"
    if plain is not None:
        text += f"; plain Adam at a constant 1e-3, {plain['test_accuracy']:.2%}"
    glue_md(text_name, text + ". " + bars)

    eager = [r for r in res.rows if r.get("kind") == "eager_epoch"]
    labels, seconds, colours = ["minitorch, captured step"], [ours["epoch_seconds"]], [BLUE]
    if eager:
        labels.append("minitorch, launched from Python")
        seconds.append(eager[0]["seconds"])
        colours.append(PURPLE)
    # PyTorch three ways (benchmarks/torch_race.py): a way with no summary row is drawn as "not measured"
    ways = [("pytorch", "eager"), ("pytorch_graph", "captured in a CUDA graph"), ("pytorch_compile", "torch.compile")]
    measured = {}
    version = (torch or {}).get("torch", "")
    for framework, what in ways:
        found = _summary(res, framework)
        labels.append(f"PyTorch {version} {what}".replace("  ", " "))
        colours.append(GREY)
        seconds.append(found["epoch_seconds"] if found else 0.0)
        if found:
            measured[what] = found["epoch_seconds"]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.barh(range(len(labels)), seconds, color=colours)
    for i, value in enumerate(seconds):
        if value == 0.0:
            ax.text(0, i, "  not measured", va="center", fontsize=8, color=GREY)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds for one epoch ({ours['steps_per_epoch']} steps of {doc.get('batch_size', 64)} images)")
    fig.tight_layout()
    glue_figure(time_fig, fig)
    text = (f"An epoch took {ours['epoch_seconds']:.2f} s with the step captured: {ours['launches_per_step']} of "
            f"your kernels replayed with one call per batch")
    if eager:
        text += f"; launched one by one from Python, {eager[0]['seconds']:.2f} s"
    for what, value in measured.items():
        text += (f". PyTorch {what} took {value:.2f} s: minitorch ran at {ours['epoch_seconds'] / value:.2f}× "
                 f"its time")
    missing = [what for framework, what in ways if what not in measured]
    if missing:
        text += f". Not measured yet: PyTorch {', '.join(missing)}"
    if measured:
        best = min(measured, key=measured.get)
        text += (f". Against the fastest PyTorch measured ({best}) minitorch is at "
                 f"{ours['epoch_seconds'] / measured[best]:.2f}×; the course's goal is 1.0× or less")
    glue_md(time_text, text + ". " + res.provenance)
    glue_md(progress_name, f"```text\n{ours.get('progress', '')}\n```")


def phase6_mnist_examples(confusion_fig: str = "fig-phase6-confusion", mistakes_fig: str = "fig-phase6-mistakes",
                          filters_fig: str = "fig-phase6-filters") -> None:
    found = _full("phase6_mnist")
    if found is None or found[1].get("configuration") != "full":
        for name, what in ((confusion_fig, "the confusion matrix"), (mistakes_fig, "the misclassified digits"),
                           (filters_fig, "the first layer's filters")):
            glue_figure(name, _placeholder("phase6_mnist", what))
        return
    res, _ = found
    [confusion] = [r for r in res.rows if r.get("kind") == "confusion"]
    [mistakes] = [r for r in res.rows if r.get("kind") == "mistakes"]
    [filters] = [r for r in res.rows if r.get("kind") == "filters"]

    matrix = np.asarray(confusion["matrix"])
    fig, ax = plt.subplots(figsize=(4.8, 4.3))
    ax.imshow(np.log1p(matrix), cmap="Blues")
    for i in range(10):
        for j in range(10):
            if matrix[i, j]:
                ax.text(j, i, matrix[i, j], ha="center", va="center", fontsize=6.5,
                        color="white" if i == j else "black")
    ax.set(xticks=range(10), yticks=range(10), xlabel="predicted", ylabel="true digit")
    ax.grid(False)
    fig.tight_layout()
    glue_figure(confusion_fig, fig)

    pixels = np.asarray(mistakes["pixels"], np.uint8)[:16]
    fig, axes = plt.subplots(2, 8, figsize=(9, 2.8))
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k < len(pixels):
            ax.imshow(pixels[k], cmap="gray_r")
            ax.set_title(f"{mistakes['label'][k]} → {mistakes['predicted'][k]}", fontsize=8)
    fig.tight_layout()
    glue_figure(mistakes_fig, fig)

    weights = np.asarray(filters["weights"])
    limit = float(np.abs(weights).max())
    fig, axes = plt.subplots(1, len(weights), figsize=(9, 1.5))
    for k, ax in enumerate(axes):
        ax.imshow(weights[k], cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.set_title(f"filter {k}", fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    glue_figure(filters_fig, fig)


def phase6_recipe(fig_name: str = "fig-phase6-recipe", text_name: str = "phase6-recipe-text",
                  caption_name: str = "phase6-recipe-source") -> None:
    res = latest("phase6_mnist_recipe")
    if res is None:
        glue_figure(fig_name, _placeholder("phase6_mnist_recipe", "the recipe's calibration", "a CPU or a GPU"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase6_mnist_recipe", "a CPU or a GPU"))
        return
    style = {"constant": dict(color=ORANGE, label="Adam, 1e-3 constant"),
             "cosine": dict(color=GREY, label="Adam, 2e-3, cosine decay"),
             LAB_RECIPE: dict(color=BLUE, label="the same, images moved ≤ 1 pixel (the lab's)")}
    fig, ax = plt.subplots(figsize=(7, 3.2))
    final: dict[str, list[float]] = {}
    for recipe, st in style.items():
        seeds = sorted({r["seed"] for r in res.rows if r["recipe"] == recipe})
        if not seeds:
            continue
        for i, seed in enumerate(seeds):
            rows = sorted((r for r in res.rows if r["recipe"] == recipe and r["seed"] == seed), key=lambda r: r["epoch"])
            ax.plot([r["epoch"] for r in rows], [100 * r["test_accuracy"] for r in rows], color=st["color"],
                    alpha=0.8, lw=1.2, label=st["label"] if i == 0 else None)
            final.setdefault(recipe, []).append(rows[-1]["test_accuracy"])
    ax.axhline(99.0, color=GREEN, ls=":", lw=1)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(97.5, 99.6))
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    parts = [f"{style[r]['label']}: {', '.join(f'{a:.2%}' for a in accs)} after 10 epochs "
             f"({sum(a >= 0.99 for a in accs)} of {len(accs)} runs at 99.0% or more)" for r, accs in final.items()]
    glue_md(text_name, "; ".join(parts) + ".")


# --------------------------------------------------------------------------------------
# Diagrams
# --------------------------------------------------------------------------------------

def diagram_tile_halo(tile: int = 4, r: int = 3):
    """A block's output tile, and the input tile with its halo that the block stages in shared memory."""
    halo = r - 1
    size = tile + halo
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.4))
    for ax in (left, right):
        ax.set_aspect("equal")
        ax.axis("off")
    for i in range(size):
        for j in range(size):
            inside = halo // 2 <= i < halo // 2 + tile and halo // 2 <= j < halo // 2 + tile
            _cell(left, j, size - 1 - i, fc="#cfe3f3" if inside else "#fbe3c2", ec=GREY)
    left.add_patch(plt.Rectangle((0, size - r), r, r, fc="none", ec=VERMILLION, lw=2.5))  # one output's window
    left.set_xlim(-0.5, size + 0.5)
    left.set_ylim(-1.2, size + 0.3)
    left.text(size / 2, -0.9, f"input tile in shared memory: ({tile} + {halo}) × ({tile} + {halo})", ha="center",
              fontsize=9)
    for i in range(tile):
        for j in range(tile):
            _cell(right, j, tile - 1 - i, fc="#cfe3f3", ec=GREY)
    _cell(right, 0, tile - 1, fc=VERMILLION, ec=GREY, text="y", tc="white")
    right.set_xlim(-0.5, size + 0.5)
    right.set_ylim(-1.2, size + 0.3)
    right.text(tile / 2, -0.9, f"output tile: {tile} × {tile}, one thread each", ha="center", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, fc="#cfe3f3", ec=GREY), plt.Rectangle((0, 0), 1, 1, fc="#fbe3c2", ec=GREY),
               plt.Rectangle((0, 0), 1, 1, fc="none", ec=VERMILLION, lw=2)]
    fig.legend(handles, ["positions of the tile", "halo (read by the edge outputs)", "one output's 3 × 3 window"],
               loc="upper center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


def phase6_reduced(text_name: str = "phase6-reduced-text") -> None:
    """The reduced configuration's calibration (the emulator), behind its bar."""
    limit = thresholds()["mnist_accuracy_reduced"]
    res = latest("phase6_mnist_reduced")
    if res is None:
        glue_md(text_name, f"On the emulator the bar is {limit:.0%}. "
                + missing_md("phase6_mnist_reduced", "benchmarks/phase6_mnist.py --calibrate 0,1,2", "the emulator"))
        return
    accuracies = sorted(r["test_accuracy"] for r in res.rows if r.get("kind") == "reduced")
    glue_md(text_name, f"On the emulator the lab trains a reduced configuration, 2 epochs on 3,000 images: from "
            f"{len(accuracies)} seeds the reference reached {accuracies[0]:.1%} to {accuracies[-1]:.1%} on the 10,000 "
            f"test images, and the bar there is {limit:.0%}. {res.provenance}")
