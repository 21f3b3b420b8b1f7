"""Figures of the Phase 8b chapter (FlashAttention), drawn at build time.

Everything measured comes from ``benchmarks/results/phase8b_flash-<gpu>.json`` (``benchmarks/phase8b_flash.py``:
every forward rung and the backward against PyTorch's FlashAttention-2 and cuDNN backends in the same run),
``benchmarks/results/phase8b_memory-<gpu>.json`` (``benchmarks/phase8b_memory.py``: peak device memory of a
forward + backward, FlashAttention against Phase 7's materialised attention) and, for the memory bandwidth of the
card, ``phase1_kernels-<gpu>.json``. Without results the chapter still builds, with a note saying which script
to run.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    VERMILLION,
    Results,
    every_card,
    glue_figure,
    glue_md,
    missing_figure,
    missing_md,
)
from figures_phase8a import _file, _short, copy_gbps

BENCH = "phase8b_flash"
MEMORY = "phase8b_memory"
RUNGS = [  # (kernel in the JSON, label, colour)
    ("1_scalar", "1 scalar", GREY),
    ("2_mma", "2 mma.sync", ORANGE),
    ("3_mma_ldmatrix_swizzled", "3 + swizzle, ldmatrix", VERMILLION),
    ("4_mma_cp_async", "4 + cp.async", PURPLE),
    ("5_mma_tuned", "5 tuned tiles", BLUE),
    ("6_mma_lean_softmax", "6 lean softmax", BLUE),
    ("7_mma_split_kv_pipeline", "7 split K/V", BLUE),
    ("bwd", "backward", GREEN),
]
SHAPES = {128: "16x16x4096x128", 64: "16x32x4096x64"}


def ladder_results() -> list[Results]:
    """Every committed ladder, the H100 first (the chapter's reference card)."""
    return sorted(every_card(BENCH), key=lambda r: ("H100" not in r.device, r.device))


def _row(res: Results, kernel: str, d: int, dtype: str = "bf16", causal: bool = False) -> dict | None:
    for row in res.rows:
        if (row.get("kernel"), row.get("shape"), row.get("dtype"), row.get("causal")) == (
                kernel, SHAPES[d], dtype, causal) and row.get("tflops"):
            return row
    return None


def _ratios(res: Results, kernels: tuple[str, ...]) -> list[float]:
    return [r["ratio_fa2"] for r in res.rows if r.get("kernel") in kernels and r.get("ratio_fa2")]


def phase8b_ladder() -> None:
    results = ladder_results()
    if not results:
        glue_figure("fig-phase8b-ladder", missing_figure(BENCH, "the FlashAttention ladder",
                                                         "benchmarks/phase8b_flash.py"))
        glue_md("phase8b-ladder-text", missing_md(BENCH, "benchmarks/phase8b_flash.py"))
        return
    ref = results[0]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, d in zip(axes, (128, 64), strict=True):
        shown = [(label, colour, _row(ref, kernel, d)) for kernel, label, colour in RUNGS]
        shown = [(label, colour, row) for label, colour, row in shown if row]
        xs = range(len(shown))
        ax.bar(xs, [row["tflops"] for _, _, row in shown], color=[c for _, c, _ in shown])
        for x, (label, _, row) in zip(xs, shown, strict=True):
            ax.text(x, row["tflops"] + 5, f"{row['ratio_fa2']:.2f}", ha="center", fontsize=7)
            if label == "backward" and row.get("fa2_tflops"):  # its own reference: FA2's backward
                ax.hlines(row["fa2_tflops"], x - 0.45, x + 0.45, color=GREEN, lw=2.5,
                          label="FlashAttention-2 (backward)")
        fa2 = next(row for _, _, row in shown if row.get("fa2_tflops"))
        ax.axhline(fa2["fa2_tflops"], color=GREEN, ls="--", lw=1, label="FlashAttention-2 (forward)")
        if fa2.get("cudnn_tflops"):
            ax.axhline(fa2["cudnn_tflops"], color=GREY, ls=":", lw=1, label="cuDNN (forward)")
        ax.set_xticks(list(xs), [label for label, _, _ in shown], rotation=40, ha="right", fontsize=8)
        ax.set_title(f"D = {d}, B·H·T·D = {SHAPES[d].replace('x', '·')}, bf16", fontsize=9)
    axes[0].set_ylabel("TFLOP/s")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"The ladder on the {_short(ref)} (numbers: ratio to FlashAttention-2 in the same run)",
                 fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-ladder", fig)

    fwd = _ratios(ref, ("5_mma_tuned",))
    best = _ratios(ref, ("5_mma_tuned", "6_mma_lean_softmax", "7_mma_split_kv_pipeline"))
    bwd = _ratios(ref, ("bwd",))
    lo = _row(ref, "2_mma", 128)
    up = _row(ref, "3_mma_ldmatrix_swizzled", 128)
    text = (f"On the {_short(ref)}, at both benchmark sizes, both dtypes, causal and not, rung 5 (what "
            f"`variant=\"best\"` runs) reaches {min(fwd):.2f}–{max(fwd):.2f} of FlashAttention-2's forward, and "
            f"the best of rungs 5–7 {min(best):.2f}–{max(best):.2f}; the backward {min(bwd):.2f}–{max(bwd):.2f}. "
            f"The largest single step is swizzling and `ldmatrix` (rung 2 → 3 at D = 128, bf16: "
            f"{lo['tflops']:.0f} → {up['tflops']:.0f} TFLOP/s). {ref.provenance}")
    if len(results) > 1:
        other = results[1]
        text += (f" On the {_short(other)} ({_file(other.path)}): rung 5 "
                 f"{min(_ratios(other, ('5_mma_tuned',))):.2f}–{max(_ratios(other, ('5_mma_tuned',))):.2f}, "
                 f"the backward {min(_ratios(other, ('bwd',))):.2f}–{max(_ratios(other, ('bwd',))):.2f}.")
    glue_md("phase8b-ladder-text", text)


def phase8b_traffic() -> None:
    """Why FlashAttention wins although it computes more: the traffic Phase 7's attention adds, in time."""
    results = ladder_results()
    if not results:
        glue_md("phase8b-traffic-text", missing_md(BENCH, "benchmarks/phase8b_flash.py"))
        return
    ref = results[0]
    b, h, t, d = 16, 16, 4096, 128
    matrix = b * h * t * t * 4  # one T x T float32 matrix of every head
    forward_passes, backward_passes = 4, 6  # S written, read; P written, read / P, dP, dS: at least 6 passes
    flop = 4 * b * h * t * t * d
    row = _row(ref, "5_mma_tuned", 128)
    text = (f"At B·H·T·D = 16·16·4096·128 one T×T float32 matrix of every head is {matrix / 1e9:.1f} GB. A "
            f"materialised forward writes the scores and reads them for the softmax, writes the probabilities "
            f"and reads them for P·V: {forward_passes * matrix / 1e9:.0f} GB; its backward moves P, dP and dS "
            f"at least {backward_passes} times over ({backward_passes * matrix / 1e9:.0f} GB). The forward's arithmetic is {flop / 1e12:.1f} TFLOP, "
            f"which rung 5 does in {flop / (row['tflops'] * 1e12) * 1e3:.1f} ms")
    copy = copy_gbps(ref)
    if copy:
        gbps, path = copy
        text += (f"; the materialised forward's traffic alone, at the {gbps:,.0f} GB/s a copy reaches on the same "
                 f"card ({_file(path)}), takes {forward_passes * matrix / (gbps * 1e9) * 1e3:.1f} ms")
    text += (". FlashAttention's backward recomputes S and P from the logsumexp: five products instead of four, "
             "25% more tensor work, traded for none of that traffic.")
    glue_md("phase8b-traffic-text", text)


def phase8b_memory() -> None:
    results = sorted(every_card(MEMORY), key=lambda r: ("H100" not in r.device, r.device))
    if not results:
        glue_figure("fig-phase8b-memory", missing_figure(MEMORY, "attention's peak memory",
                                                         "benchmarks/phase8b_memory.py"))
        glue_md("phase8b-memory-text", missing_md(MEMORY, "benchmarks/phase8b_memory.py"))
        return
    ref = results[0]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    style = {"flash": dict(color=BLUE, marker="o", label="FlashAttention (bf16, flash.py)"),
             "materialised": dict(color=VERMILLION, marker="s", label="Phase 7, materialised (float32)")}
    by_method: dict[str, list[dict]] = {}
    for row in ref.rows:
        by_method.setdefault(row["method"], []).append(row)
    for method, rows in by_method.items():
        ok = [r for r in rows if not r.get("out_of_memory")]
        ax.plot([r["t"] for r in ok], [r["extra_bytes"] / 2 ** 30 for r in ok], **style[method])
        for r in rows:
            if r.get("out_of_memory"):
                ax.annotate("out of memory", (r["t"], ax.get_ylim()[1]), color=style[method]["color"], fontsize=8)
    ts = sorted({r["t"] for r in ref.rows})
    ax.plot(ts, [ref.rows[0]["b"] * ref.rows[0]["h"] * t * t * 4 / 2 ** 30 for t in ts], color=GREY, ls=":",
            label="one T×T float32 matrix of every head")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("peak memory of forward + backward, GiB")
    ax.legend(fontsize=8)
    row0 = ref.rows[0]
    ax.set_title(f"B = {row0['b']}, H = {row0['h']}, D = {row0['d']}, causal; {_short(ref)}", fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-memory", fig)
    pairs = []
    for t in (8192, 16384):
        f = next((r for r in by_method.get("flash", []) if r["t"] == t and not r.get("out_of_memory")), None)
        m = next((r for r in by_method.get("materialised", []) if r["t"] == t), None)
        if f:
            mat = ("not measured (the run ended first)" if m is None else "out of memory"
                   if m.get("out_of_memory") else f"{m['extra_bytes'] / 2 ** 30:.2f} GiB")
            pairs.append(f"T = {t}: FlashAttention {f['extra_bytes'] / 2 ** 20:.0f} MiB, the materialised "
                         f"attention {mat}")
    glue_md("phase8b-memory-text", "Peak memory of one forward + backward beyond its inputs, " + "; ".join(pairs)
            + f". {ref.provenance}")
