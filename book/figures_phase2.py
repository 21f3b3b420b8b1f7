"""Figures of the Phase 2 chapter (first kernels), drawn at build time.

Measured figures read ``benchmarks/results/phase2_bandwidth-*.json`` and ``phase2_matmul-*.json``
(written by ``benchmarks/phase2_kernels.py``); without them the chapter still builds, with a note
saying which script to run. Every number quoted in the text is generated here from the same file.
Diagrams (a 2-D grid over a matrix, coalesced and strided accesses, shared-memory banks) are drawn
with matplotlib.
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
    _bytes_axis,
    _cell,
    fmt_bytes,
    fmt_gbps,
    glue_figure,
    glue_md,
    latest,
    missing_figure,
    missing_md,
)
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, NullLocator

SCRIPT = "benchmarks/phase2_kernels.py"


def _placeholder(benchmark: str, what: str):
    return missing_figure(benchmark, what, SCRIPT)


def _missing_md(benchmark: str) -> str:
    return missing_md(benchmark, SCRIPT)


def _glue_missing(benchmark: str, what: str, fig_name: str, text_name: str, caption_name: str) -> None:
    glue_figure(fig_name, _placeholder(benchmark, what))
    glue_md(caption_name, "")
    glue_md(text_name, _missing_md(benchmark))


# --------------------------------------------------------------------------------------
# Bandwidth of the elementwise kernels and the transposes against a copy
# --------------------------------------------------------------------------------------

_ELEMENTWISE_STYLE = {
    "add": dict(color=BLUE, marker="o", label="add"),
    "mul": dict(color=GREEN, marker="s", label="mul"),
    "scalar_mul": dict(color=ORANGE, marker="^", label="scalar_mul"),
    "relu": dict(color=PURPLE, marker="D", label="relu"),
}
_TRANSPOSE_STYLE = {
    "transpose_naive": dict(color=VERMILLION, marker="o", label="naive"),
    "transpose_tiled": dict(color=BLUE, marker="s", label="tiled, [32][33] tile"),
}
_COPY_STYLE = dict(color="black", ls="--", lw=1.2, marker="", label="cupy.copyto (ceiling)")


def _by_kernel(res: Results) -> dict[str, dict[int, dict]]:
    """{kernel: {bytes of one array: row}}."""
    out: dict[str, dict[int, dict]] = {}
    for row in res.rows:
        for key in ("kernel", "elements", "gbps", "fraction_of_copy"):
            if key not in row:
                raise ValueError(f"{res.path}: result row {row} lacks {key!r}")
        out.setdefault(row["kernel"], {})[4 * int(row["elements"])] = row
    missing = {"copy", *_ELEMENTWISE_STYLE, *_TRANSPOSE_STYLE} - set(out)
    if missing:
        raise ValueError(f"{res.path}: no rows for {sorted(missing)}")
    return out


def phase2_bandwidth(fig_name: str = "fig-phase2-bandwidth", text_name: str = "phase2-bandwidth-text",
                     caption_name: str = "phase2-bandwidth-source") -> None:
    """Glue the bandwidth figure (elementwise kernels, transposes, copy), its provenance and a summary."""
    res = latest("phase2_bandwidth")
    if res is None:
        _glue_missing("phase2_bandwidth", "the Phase 2 kernels' bandwidth", fig_name, text_name, caption_name)
        return
    data = _by_kernel(res)
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.5), sharey=True)
    top = max(r["gbps"] for rows in data.values() for r in rows.values())
    for ax, styles, title in ((axes[0], _ELEMENTWISE_STYLE, "elementwise"), (axes[1], _TRANSPOSE_STYLE, "transpose")):
        sizes = sorted(data["copy"])
        ax.plot(sizes, [data["copy"][b]["gbps"] for b in sizes], **_COPY_STYLE)
        for kernel, style in styles.items():
            xs = sorted(data[kernel])
            ax.plot(xs, [data[kernel][b]["gbps"] for b in xs], ms=4, **style)
        _bytes_axis(ax, sizes)
        ax.set_xlabel("size of one array")
        ax.set_title(title)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("GB/s (bytes read + written)")
    axes[0].set_ylim(0, top * 1.12)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _bandwidth_text(data))


def _bandwidth_text(data: dict[str, dict[int, dict]]) -> str:
    big = max(data["copy"])
    at = {k: rows[big] for k, rows in data.items() if big in rows}
    copy = at["copy"]["gbps"]
    parts = [f"With {fmt_bytes(big)} arrays, `cupy.copyto` moved {fmt_gbps(copy)} GB/s."]
    fractions = ", ".join(f"`{k}` {fmt_gbps(at[k]['gbps'])} GB/s ({at[k]['fraction_of_copy']:.2f} of copy)"
                          for k in _ELEMENTWISE_STYLE if k in at)
    parts.append(f"The elementwise kernels reached {fractions}.")
    naive, tiled = at.get("transpose_naive"), at.get("transpose_tiled")
    if naive and tiled:
        side = round((big // 4) ** 0.5)
        parts.append(f"Transposing a matrix of {side} × {side} floats, the naive kernel reached {fmt_gbps(naive['gbps'])} GB/s "
                     f"({naive['fraction_of_copy']:.2f} of copy) and the tiled one {fmt_gbps(tiled['gbps'])} GB/s "
                     f"({tiled['fraction_of_copy']:.2f}): {tiled['gbps'] / naive['gbps']:.1f}× faster, with the same "
                     f"bytes to move.")
    return " ".join(parts)


# --------------------------------------------------------------------------------------
# Naive matmul against cuBLAS
# --------------------------------------------------------------------------------------

def phase2_matmul(fig_name: str = "fig-phase2-matmul", text_name: str = "phase2-matmul-text",
                  caption_name: str = "phase2-matmul-source") -> None:
    """Glue the GFLOP/s figure of the naive matmul and cuBLAS, its provenance and a summary."""
    res = latest("phase2_matmul")
    if res is None:
        _glue_missing("phase2_matmul", "the naive matmul", fig_name, text_name, caption_name)
        return
    series: dict[str, dict[int, float]] = {}
    for row in res.rows:
        for key in ("kernel", "size", "gflops"):
            if key not in row:
                raise ValueError(f"{res.path}: result row {row} lacks {key!r}")
        series.setdefault(row["kernel"], {})[int(row["size"])] = float(row["gflops"])
    naive, cublas = series.get("matmul_naive"), series.get("cublas")
    if not naive or not cublas:
        raise ValueError(f"{res.path}: needs rows for matmul_naive and cublas")
    sizes = sorted(set(naive) & set(cublas))
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    ax.plot(sizes, [cublas[s] for s in sizes], color=GREEN, marker="s", ms=4, label="cupy.matmul (cuBLAS SGEMM)")
    ax.plot(sizes, [naive[s] for s in sizes], color=VERMILLION, marker="o", ms=4, label="matmul_naive (reference)")
    for s in sizes:
        ax.annotate(f"{cublas[s] / naive[s]:.0f}× slower", xy=(s, naive[s]), xytext=(0, -13),
                    textcoords="offset points", ha="center", fontsize=8, color="#555555")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("M = N = K")
    ax.set_yscale("log")
    ax.set_ylim(min(naive.values()) / 3, max(cublas.values()) * 2)
    ax.set_ylabel("GFLOP/s (2·M·N·K / time), log scale")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    ratios = [cublas[s] / naive[s] for s in sizes]
    mid = 1024 if 1024 in sizes else sizes[len(sizes) // 2]
    glue_md(text_name,
            f"At {mid} × {mid} the naive kernel reached {fmt_gbps(naive[mid])} GFLOP/s and cuBLAS "
            f"{fmt_gbps(cublas[mid])} GFLOP/s, {cublas[mid] / naive[mid]:.0f}× more; from {sizes[0]} to {sizes[-1]} "
            f"cuBLAS was {min(ratios):.0f} to {max(ratios):.0f} times faster.")


# --------------------------------------------------------------------------------------
# Diagrams
# --------------------------------------------------------------------------------------

_BLOCK_COLOURS = [BLUE, ORANGE, GREEN, PURPLE, VERMILLION, GREY]


def diagram_2d_grid(rows: int = 7, cols: int = 10, block: tuple[int, int] = (4, 4)):
    """A rows x cols matrix covered by a 2-D grid of blocks; threads past the edges hatched; one thread traced."""
    bx, by = block
    gx, gy = -(-cols // bx), -(-rows // by)
    fig, ax = plt.subplots(figsize=(9.5, 4.6))
    ax.set_xlim(-5.0, gx * bx + 7.5)
    ax.set_ylim(gy * by + 0.4, -3.4)  # row 0 at the top, as a matrix is written
    ax.axis("off")
    for j in range(gy):
        for i in range(gx):
            c = _BLOCK_COLOURS[(j * gx + i) % len(_BLOCK_COLOURS)]
            for ty in range(by):
                for tx in range(bx):
                    col, row = i * bx + tx, j * by + ty
                    if row < rows and col < cols:
                        _cell(ax, col, row, fc=c, alpha=0.35, text=row * cols + col, fs=7)
                    else:
                        _cell(ax, col + 0.08, row + 0.08, 0.84, 0.84, fc="white", ec=GREY, hatch="///", lw=0.5)
            ax.add_patch(Rectangle((i * bx, j * by), bx, by, fill=False, ec=c, lw=2.2))
    for i in range(gx):
        ax.text(i * bx + bx / 2, -0.9, f"blockIdx.x = {i}", ha="center", va="bottom", fontsize=8, weight="bold")
    for j in range(gy):
        ax.text(-1.0, j * by + by / 2, f"blockIdx.y = {j}", ha="center", va="center", rotation=90, fontsize=8,
                weight="bold")
    ax.add_patch(Rectangle((0, 0), cols, rows, fill=False, ec="black", lw=1.2, ls="--"))
    for col in range(gx * bx):
        ax.text(col + 0.5, -0.2, str(col), ha="center", va="bottom", fontsize=7, color="#444444")
    for row in range(gy * by):
        ax.text(-0.2, row + 0.5, str(row), ha="right", va="center", fontsize=7, color="#444444")
    ax.text(gx * bx / 2, -2.2, "col = blockIdx.x · blockDim.x + threadIdx.x", ha="center", va="bottom", fontsize=9,
            family="monospace")
    ax.text(-2.3, gy * by / 2, "row = blockIdx.y · blockDim.y + threadIdx.y", ha="center", va="center", rotation=90,
            fontsize=9, family="monospace")
    # one thread, traced: block (2, 1), thread (1, 1), in the block that hangs over the right edge
    tcol, trow = 2 * bx + 1, 1 * by + 1
    ax.add_patch(Rectangle((tcol, trow), 1, 1, fill=False, ec="black", lw=2.2))
    x0 = gx * bx + 0.6
    ax.annotate("", xy=(tcol + 1, trow + 0.5), xytext=(x0, trow + 0.5),
                arrowprops=dict(arrowstyle="-|>", color="black", lw=0.9))
    ax.text(x0 + 0.1, trow + 0.5,
            f"blockIdx = (2, 1), threadIdx = (1, 1)\ncol = 2·{bx} + 1 = {tcol}, row = 1·{by} + 1 = {trow}\n"
            f"element {trow}·{cols} + {tcol} = {trow * cols + tcol}", va="center", fontsize=8, family="monospace")
    ax.text(x0 + 0.1, 1.6, f"{rows} × {cols} matrix (dashed), blocks of {bx} × {by} threads,\n"
            f"grid ⌈{cols}/{bx}⌉ × ⌈{rows}/{by}⌉ = {gx} × {gy} blocks;\nhatched: threads outside the matrix",
            va="center", fontsize=8, color="#333333")
    fig.tight_layout()
    return fig


def diagram_coalescing(floats_per_sector: int = 8, lanes: int = 8, width: int = 16, height: int = 8):
    """What a warp's access costs: a row of consecutive floats (few sectors) vs a column (one sector per float)."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for ax, column, title in ((axes[0], False, "a warp reads a row: consecutive addresses"),
                              (axes[1], True, "a warp writes a column: addresses a row apart")):
        ax.set_xlim(-0.3, width + 0.3)
        ax.set_ylim(height + 1.6, -0.6)
        ax.axis("off")
        # (col, row) of the float each lane touches
        touched = {(2, lane) for lane in range(lanes)} if column else {(lane, 2) for lane in range(lanes)}
        sectors = {(r, c // floats_per_sector) for c, r in touched}
        for r in range(height):
            for c in range(width):
                in_sector = (r, c // floats_per_sector) in sectors
                _cell(ax, c, r, fc=ORANGE if (c, r) in touched else ("#fbe3bd" if in_sector else "white"),
                      ec="#bbbbbb", lw=0.5)
            for s in range(0, width + 1, floats_per_sector):
                ax.plot([s, s], [r, r + 1], color="black", lw=1.6)
        for lane, (c, r) in enumerate(sorted(touched, key=lambda cr: (cr[1], cr[0]))):
            ax.text(c + 0.5, r + 0.5, str(lane), ha="center", va="center", fontsize=7)
        useful = len(touched) * 4
        moved = len(sectors) * floats_per_sector * 4
        ax.set_title(title, fontsize=9.5)
        ax.text(0, height + 0.5, f"{len(touched)} threads, {len(sectors)} sector{'s' * (len(sectors) > 1)} "
                f"of {floats_per_sector * 4} bytes: {moved} bytes moved for {useful} used", fontsize=8.5, va="top")
    fig.tight_layout()
    return fig


def diagram_bank_conflicts(shown_rows: int = 8, shown_cols: int = 8, banks: int = 32):
    """Banks of tile[32][32] vs tile[32][33]: reading column 0 hits one bank 32 times, or 32 banks once each."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.9))
    for ax, width in ((axes[0], 32), (axes[1], 33)):
        ax.set_xlim(-1.4, shown_cols + 1.6)
        ax.set_ylim(shown_rows + 2.2, -1.2)
        ax.axis("off")
        for r in range(shown_rows):
            ax.text(-0.2, r + 0.5, f"row {r}", ha="right", va="center", fontsize=7)
            for c in range(shown_cols):
                bank = (r * width + c) % banks
                _cell(ax, c, r, fc=ORANGE if c == 0 else "white", alpha=0.8 if c == 0 else 1.0, ec="#999999",
                      text=bank, fs=7, lw=0.5)
            ax.text(shown_cols + 0.5, r + 0.5, "…", ha="center", va="center", fontsize=8)
        for c in range(shown_cols):
            ax.text(c + 0.5, -0.3, str(c), ha="center", va="bottom", fontsize=7, color="#444444")
        ax.text(0.5, shown_rows + 0.3, "⋮", ha="center", va="top", fontsize=9)
        column_banks = sorted({(r * width) % banks for r in range(32)})
        verdict = (f"column 0: all 32 elements in bank {column_banks[0]},\n32 accesses one after another"
                   if len(column_banks) == 1 else "column 0: 32 elements in 32 different banks,\none access for the warp")
        ax.set_title(f"__shared__ float tile[32][{width}]", fontsize=9.5, family="monospace")
        ax.text(shown_cols / 2, shown_rows + 1.0, verdict, ha="center", va="top", fontsize=8.5,
                color=VERMILLION if len(column_banks) == 1 else GREEN)
    fig.suptitle("each cell shows its bank, (row · width + col) mod 32; a warp of the write phase reads one column",
                 fontsize=8.5, y=0.02, va="bottom", color="#333333")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
