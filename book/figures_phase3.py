"""Figures of the Phase 3 chapters (the forward pass, the backward pass), drawn at build time.

The XOR figures read ``benchmarks/results/phase3_xor-*.json`` (``benchmarks/phase3_xor.py``, on a GPU or on the
emulator); without one the chapter still builds, with a note saying which script to run. Every number the
text quotes about the training comes from that file. The other figures are computed here (NumPy) or drawn
(matplotlib): the layer as a matmul and a broadcast, the computation graph, the sigmoid and its derivative,
finite-difference errors, and momentum on a narrow valley.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    VERMILLION,
    Results,
    _cell,
    glue_figure,
    glue_md,
    latest,
    missing_figure,
)
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

SCRIPT = "benchmarks/phase3_xor.py"


def _placeholder(what: str):
    return missing_figure("phase3_xor", what, SCRIPT, "a GPU (or with --device emu)")


def _rows(res: Results, kind: str) -> dict[str, dict]:
    return {r.get("framework", "minitorch"): r for r in res.rows if r.get("kind") == kind}


# --------------------------------------------------------------------------------------
# XOR: loss curve, decision boundary, timing
# --------------------------------------------------------------------------------------

def phase3_xor(loss_name: str = "fig-phase3-xor-loss", boundary_name: str = "fig-phase3-xor-boundary",
               caption_name: str = "phase3-xor-source", text_name: str = "phase3-xor-text") -> None:
    """Glue the loss curve, the decision boundary, their provenance and a summary of the run."""
    res = latest("phase3_xor")
    if res is None:
        glue_figure(loss_name, _placeholder("the XOR training"))
        glue_figure(boundary_name, _placeholder("the XOR decision boundary"))
        glue_md(caption_name, "")
        glue_md(text_name, f"*No XOR run is committed yet: run `python {SCRIPT}` and commit "
                           f"`benchmarks/results/phase3_xor-<device>.json`.*")
        return
    curves, times = _rows(res, "curve"), _rows(res, "time")
    [boundary] = _rows(res, "boundary").values()

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    styles = {"minitorch": dict(color=BLUE, lw=2, label="minitorch (reference kernels)"),
              "pytorch": dict(color=ORANGE, lw=1.2, ls="--", label="PyTorch, same initial weights")}
    for framework, row in curves.items():
        ax.semilogy(row["epoch"], np.maximum(row["loss"], 1e-16), **styles[framework])
    ax.axhline(0.01, color=GREY, lw=1, ls=":")
    ax.annotate("0.01: the deliverable's bound", xy=(max(curves["minitorch"]["epoch"]), 0.01), xytext=(0, 4),
                textcoords="offset points", ha="right", fontsize=8, color="#555555")
    ax.set_xlabel("epoch")
    ax.set_ylabel("MSE loss (log scale)")
    ax.legend(loc="lower left")
    fig.tight_layout()
    glue_figure(loss_name, fig)

    grid = np.asarray(boundary["grid"])
    surface = np.asarray(boundary["output"])
    fig, ax = plt.subplots(figsize=(4.8, 3.9))
    image = ax.contourf(grid, grid, surface, levels=np.linspace(-0.5, 1.5, 21), cmap="RdBu_r", extend="both")
    ax.contour(grid, grid, surface, levels=[0.5], colors="black", linewidths=1.5)
    points = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    ax.scatter(points[:, 0], points[:, 1], c=[0, 1, 1, 0], cmap="RdBu_r", vmin=-0.5, vmax=1.5, s=90,
               edgecolors="black", zorder=3)
    for (a, b), label in zip(points, ["0", "1", "1", "0"], strict=True):
        ax.annotate(label, (a, b), xytext=(8, 8), textcoords="offset points", fontsize=10, weight="bold")
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    ax.set_aspect("equal")
    ax.grid(False)
    fig.colorbar(image, ax=ax, label="network output")
    fig.tight_layout()
    glue_figure(boundary_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _xor_text(res, curves, times))


def _xor_text(res: Results, curves: dict, times: dict) -> str:
    mine = curves["minitorch"]
    below = next((e for e, v in zip(mine["epoch"], mine["loss"], strict=True) if v < 0.01), None)
    t = times["minitorch"]
    plateau = next((e for e, v in zip(mine["epoch"], mine["loss"], strict=True) if v < 0.2), None)
    text = (f"On {res.device}, the loss started at {mine['loss'][0]:.3f} (a network that outputs 0.5 everywhere "
            f"scores 0.25)"
            + (f", stayed above 0.2 until epoch {plateau}" if plateau else "")
            + (f", fell below 0.01 by epoch {below}" if below else ", never fell below 0.01")
            + f" and ended at {t['final_loss']:.1e} after {t['epochs']} epochs.")
    torch = times.get("pytorch")
    if res.device.startswith("CUDA C emulator"):
        text += (f" The {t['epochs']} epochs took {t['seconds']:.1f} s on the emulator, which says nothing about a "
                 f"GPU" + (f" (PyTorch on the CPU: {torch['seconds']:.2f} s)." if torch else "."))
    elif torch:
        text += (f" The {t['epochs']} epochs took {t['seconds']:.2f} s with minitorch and {torch['seconds']:.2f} s "
                 f"with PyTorch on the same GPU: minitorch needed {torch['ratio']:.2f}× PyTorch's time. With four "
                 f"samples every kernel is tiny, so both times are launch overhead: Python code and launches per "
                 f"epoch, not arithmetic.")
        graph = times.get("minitorch_graph")
        if graph:
            text += (f" Captured into a graph (appendix *Where a training step's time goes*), the same training took "
                     f"{graph['seconds']:.2f} s, {graph['seconds'] / torch['seconds']:.2f}× PyTorch's time.")
    else:
        text += f" The {t['epochs']} epochs took {t['seconds']:.2f} s (PyTorch was not installed for a comparison)."
    return text


# --------------------------------------------------------------------------------------
# Diagrams and computed figures
# --------------------------------------------------------------------------------------

def diagram_layer(batch: int = 4, n_in: int = 3, n_out: int = 2):
    """Y = X W + b: a matmul of (batch, in) by (in, out), then b added to every row."""
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.set_xlim(-0.5, 17.5)
    ax.set_ylim(-1.2, batch + 1.2)
    ax.axis("off")

    def matrix(x0, rows, cols, colour, label, shade_row=None, text=None):
        for r in range(rows):
            for c in range(cols):
                fc = colour if shade_row is None or r == shade_row else "white"
                _cell(ax, x0 + c, rows - 1 - r + (batch - rows) / 2, fc=fc, alpha=0.35 if fc != "white" else 1,
                      text=text(r, c) if text else "", fs=7)
        ax.text(x0 + cols / 2, batch + 0.45, label, ha="center", fontsize=9)

    matrix(0, batch, n_in, BLUE, f"X  ({batch} × {n_in})", text=lambda r, c: f"x{r}{c}")
    ax.text(n_in + 0.5, batch / 2, "@", ha="center", va="center", fontsize=14)
    matrix(n_in + 1, n_in, n_out, ORANGE, f"W  ({n_in} × {n_out})", text=lambda r, c: f"w{r}{c}")
    ax.text(n_in + n_out + 1.5, batch / 2, "+", ha="center", va="center", fontsize=14)
    x_b = n_in + n_out + 2
    for r in range(batch):  # the broadcast: the same bias row, repeated
        for c in range(n_out):
            _cell(ax, x_b + c, batch - 1 - r, fc=GREEN, alpha=0.45 if r == 0 else 0.12, text=f"b{c}", fs=7,
                  ec="black" if r == 0 else GREY)
    ax.text(x_b + n_out / 2, batch + 0.45, f"b  ({n_out},), on every row", ha="center", fontsize=9)
    ax.text(x_b + n_out + 0.5, batch / 2, "=", ha="center", va="center", fontsize=14)
    matrix(x_b + n_out + 1, batch, n_out, PURPLE, f"Y  ({batch} × {n_out})", text=lambda r, c: f"y{r}{c}")
    ax.text(x_b + n_out + 3.4, batch / 2 + 0.5, "y[r, c] = Σₖ x[r, k] w[k, c] + b[c]", fontsize=9, va="center",
            family="monospace")
    ax.text(x_b + n_out + 3.4, batch / 2 - 0.5, "add_bias: element i is in\ncolumn i % cols", fontsize=8,
            va="center", color="#555555")
    ax.text(0, -0.8, "matmul (Phase 2), then add_bias (Phase 3a): bias row b is read, never copied to every row",
            fontsize=8.5, color="#333333")
    fig.tight_layout()
    return fig


def _node(ax, x, y, text, colour, w=1.5, h=0.6):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.04", fc=colour, ec="black",
                                lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax, start, end, colour="black", ls="-", rad=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, lw=1.0, ls=ls,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))


def diagram_graph():
    """The tape of Linear -> Sigmoid -> Linear -> MSE: forward edges, and the gradients flowing back."""
    fig, ax = plt.subplots(figsize=(10, 3.7))
    step, w, h = 2.2, 1.5, 0.6
    ax.set_xlim(-1.0, 6 * step + 1.0)
    ax.set_ylim(-2.3, 2.5)
    ax.axis("off")
    leaf, op, data = "#dbe9f6", "#fde9c8", "#eeeeee"
    chain = ["X", "MatMul", "AddBias", "Sigmoid", "MatMul", "AddBias", "MSELoss"]
    xs = [i * step for i in range(len(chain))]
    for x, text in zip(xs, chain, strict=True):
        _node(ax, x, 0, text, data if text == "X" else op, w=w, h=h)
    for x0, x1 in zip(xs, xs[1:], strict=False):
        _arrow(ax, (x0 + w / 2 + 0.05, 0), (x1 - w / 2 - 0.05, 0))
    for i, text in ((1, "W₁"), (2, "b₁"), (4, "W₂"), (5, "b₂"), (6, "Y")):
        _node(ax, xs[i], 1.6, text, data if text == "Y" else leaf, w=0.8, h=0.5)
        _arrow(ax, (xs[i], 1.35), (xs[i], h / 2 + 0.05))
    ax.text(xs[1] - 0.4, 2.15, "leaves: parameters (requires_grad=True) and data", fontsize=8, color="#333333")
    back = ["g", "g · y (1 − y)", "g W₂ᵀ", "g", "2 (ŷ − Y) / n"]  # the gradient flowing into node i from i + 1
    for i, label in zip(range(1, 6), back, strict=True):
        _arrow(ax, (xs[i + 1] - 0.3, -h / 2 - 0.05), (xs[i] + 0.3, -h / 2 - 0.05), colour=VERMILLION, ls="--",
               rad=-0.45)
        ax.text((xs[i] + xs[i + 1]) / 2, -1.05, label, ha="center", va="top", fontsize=8, color=VERMILLION)
    ax.text(-0.8, -1.75, "black: forward; each operation is recorded as a Function whose context keeps its inputs.",
            fontsize=8, color="#333333")
    ax.text(-0.8, -2.15, "red: backward, grad_fn.backward(g) in reverse topological order; each parameter gets "
            "dW = (input)ᵀ g or db = column sums of g.", fontsize=8, color="#333333")
    fig.tight_layout()
    return fig


def figure_sigmoid():
    """sigma(x) and its derivative, written with the output y: y (1 - y)."""
    x = np.linspace(-8, 8, 401)
    y = 1 / (1 + np.exp(-x))
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.plot(x, y, color=BLUE, lw=2, label="y = σ(x)")
    ax.plot(x, y * (1 - y), color=VERMILLION, lw=2, label="σ'(x) = y (1 − y)")
    ax.axhline(0.25, color=GREY, lw=0.8, ls=":")
    ax.annotate("largest slope: 1/4 at x = 0", xy=(0, 0.25), xytext=(2.0, 0.45), fontsize=8,
                arrowprops=dict(arrowstyle="-", color=GREY))
    ax.set_xlabel("x")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def figure_finite_differences() -> None:
    """Error of a central difference of sigmoid at x = 0.7 against the step, in float32 and float64; glued
    with a sentence giving the best step of each."""
    x0 = 0.7
    exact = (lambda s: s * (1 - s))(1 / (1 + np.exp(-x0)))
    steps = np.logspace(-12, -0.5, 200)
    fig, ax = plt.subplots(figsize=(7, 3.0))
    best, errors_at = {}, {}
    for dtype, colour in ((np.float64, BLUE), (np.float32, ORANGE)):
        def f(v, dtype=dtype):
            v = dtype(v)
            return dtype(1) / (dtype(1) + np.exp(-v))

        errors = []
        for h in steps:
            hh = dtype(h)
            with np.errstate(all="ignore"):
                approx = (float(f(dtype(x0) + hh)) - float(f(dtype(x0) - hh))) / (2 * float(hh))
            errors.append(abs(approx - exact) / exact)
        errors = np.maximum(errors, 1e-17)
        ax.loglog(steps, errors, color=colour, lw=1.5, label=np.dtype(dtype).name)
        i = int(np.argmin(errors))
        best[np.dtype(dtype).name] = (steps[i], errors[i])
        errors_at[(np.dtype(dtype).name, 1e-6)] = float(np.interp(-6, np.log10(steps), errors))
    ax.axhline(1e-4, color=GREY, lw=0.8, ls=":")
    ax.text(1e-10, 1.6e-4, "1e-4: the gradient check's bound", fontsize=8, color="#555555")
    ax.set_xlabel("step ε")
    ax.set_ylabel("relative error")
    ax.legend(loc="upper right")
    fig.tight_layout()
    glue_figure("fig-phase3-finite-differences", fig)
    (h32, e32), (h64, e64) = best["float32"], best["float64"]
    at_1e6 = errors_at[("float32", 1e-6)]
    glue_md("phase3-finite-differences-text",
            f"In float64 the best step, about {h64:.0e}, gives a relative error of {e64:.0e}; in float32 the best "
            f"possible is {e32:.0e} (at a step of about {h32:.0e}), and a step of 10⁻⁶ gives an error of "
            f"{at_1e6:.0%}.")


def figure_momentum() -> None:
    """Gradient descent with and without momentum on the narrow valley f(x, y) = (x^2 + 25 y^2) / 2; glued with
    a sentence giving how far from the minimum each ends."""
    def run(lr: float, momentum: float, steps: int = 40) -> np.ndarray:
        p, v, path = np.array([-9.0, 1.8]), np.zeros(2), []
        for _ in range(steps + 1):
            path.append(p.copy())
            g = np.array([p[0], 25 * p[1]])
            v = momentum * v + g
            p = p - lr * v
        return np.array(path)

    xs, ys = np.meshgrid(np.linspace(-10, 2, 200), np.linspace(-2.2, 2.2, 120))
    fig, ax = plt.subplots(figsize=(8, 2.9))
    ax.contour(xs, ys, (xs ** 2 + 25 * ys ** 2) / 2, levels=np.geomspace(0.1, 150, 12), colors=GREY,
               linewidths=0.6)
    ends = {}
    for mom, colour in ((0.0, ORANGE), (0.6, BLUE)):
        path = run(0.075, mom)
        label = "gradient descent" if mom == 0 else f"with momentum {mom}"
        ax.plot(path[:, 0], path[:, 1], "o-", ms=3, lw=1, color=colour, label=f"{label}, lr 0.075, 40 steps")
        ends[mom] = float(np.linalg.norm(path[-1]))
    ax.plot([0], [0], marker="*", ms=12, color=GREEN)
    ax.set_xlabel("x (gentle slope)")
    ax.set_ylabel("y (steep)")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(False)
    fig.tight_layout()
    glue_figure("fig-phase3-momentum", fig)
    glue_md("phase3-momentum-text",
            f"After 40 steps from (−9, 1.8), plain gradient descent is still {ends[0.0]:.2f} from the minimum, "
            f"zigzagging across the valley; with momentum 0.6 and the same learning rate it is {ends[0.6]:.0e} away.")
