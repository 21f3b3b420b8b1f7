"""Figures of the Phase 8a chapter (tensor cores: the HGEMM ladder), drawn at build time.

Everything measured comes from ``benchmarks/results/phase8a_hgemm-<gpu>.json`` (``benchmarks/phase8a_hgemm.py``
on a GPU: every rung and cuBLAS at 4096^3 and at the GPT's training shapes, the mma.sync and wgmma ceiling
kernels, the validation's largest errors), from the Nsight Compute texts
``benchmarks/results/phase8a_hgemm_ncu_rung{3,4,5,6}-<gpu>.txt`` (``benchmarks/phase8a_hgemm_gpu.sh``) and, for
the roofline's memory ceiling, from the copy bandwidth of ``phase1_kernels-<gpu>.json`` on the same card.
The fragment diagram is computed from the PTX ISA's formulas for ``mma.m16n8k16`` (the ones the kernels'
epilogue uses), and checks that every element of A, B and C belongs to exactly one lane and register.
Without results the chapter still builds, with a note saying which script to run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    REPO_ROOT,
    VERMILLION,
    Results,
    _load,
    every_card,
    glue_figure,
    glue_md,
    missing_figure,
    missing_md,
    results_dir,
)
from matplotlib.patches import Rectangle

BENCH = "phase8a_hgemm"
SCRIPT = "benchmarks/phase8a_hgemm.py"
RUNGS = [  # (kernel in the JSON, label, colour)
    ("1_wmma", "1 WMMA, per warp", GREY),
    ("2_wmma_smem", "2 WMMA + shared tiles", ORANGE),
    ("3_mma_ldmatrix", "3 mma.sync + ldmatrix", VERMILLION),
    ("4_mma_swizzled", "4 + swizzle", PURPLE),
    ("5_mma_pipelined", "5 + cp.async pipeline", BLUE),
    ("6_wgmma_tma", "6 wgmma + TMA", GREEN),
]
SQUARE = "square_4096"
BF16_BYTES = 2


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

def _slug(path: Path) -> str:
    return path.stem.split("-", 1)[1]


def all_results() -> list[Results]:
    """Every committed ladder, the H100 first (the chapter's reference card), then the others by name."""
    return sorted(every_card(BENCH), key=lambda r: ("H100" not in r.device, r.device))


def _raw(res: Results) -> dict:
    import json

    return json.loads(res.path.read_text())


def _row(res: Results, kernel: str, shape: str = SQUARE, dtype: str = "bf16", out: str | None = None) -> dict:
    out = out or dtype
    for row in res.rows:
        if (row["kernel"], row["shape"], row["dtype"], row.get("out", dtype)) == (kernel, shape, dtype, out):
            if row.get("tflops") is None:
                raise ValueError(f"{res.path}: {kernel} {shape} {dtype} was not timed ({row.get('note')})")
            return row
    raise ValueError(f"{res.path}: no row for {kernel} {shape} {dtype}->{out}")


def _short(res: Results) -> str:
    return res.device.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def _file(path: Path) -> str:
    return f"`{path.relative_to(REPO_ROOT).as_posix()}`" if path.is_relative_to(REPO_ROOT) else f"`{path}`"


def copy_gbps(res: Results) -> tuple[float, Path] | None:
    """The largest copy `phase1_memory.py` measured on the same card (cupy.copyto), GB/s."""
    path = results_dir() / f"phase1_kernels-{_slug(res.path)}.json"
    if not path.exists():
        return None
    rows = [r for r in _load(path, "phase1_kernels").rows if r.get("kernel") == "cupy_copy"]
    if not rows:
        return None
    return float(max(rows, key=lambda r: r["bytes"])["gbps"]), path


def _missing(figs: list[str], texts: list[str], what: str) -> None:
    for name in figs:
        glue_figure(name, missing_figure(BENCH, what, SCRIPT, "a GPU (Hopper for rung 6)"))
    for name in texts:
        glue_md(name, missing_md(BENCH, SCRIPT))


# --------------------------------------------------------------------------------------
# The two numbers, and the error bound
# --------------------------------------------------------------------------------------

def work(m: int, k: int, n: int) -> tuple[float, float]:
    """(FLOP, compulsory bytes) of a 16-bit product: 2mnk, and A, B and C read or written once."""
    return 2.0 * m * n * k, float(BF16_BYTES * (m * k + k * n + m * n))


def phase8a_intro() -> None:
    names = ["phase8a-intro-text", "phase8a-error-text"]
    results = all_results()
    if not results:
        _missing([], names, "the HGEMM ladder")
        return
    ref = results[0]
    raw = _raw(ref)
    flops, nbytes = work(4096, 4096, 4096)
    ceil = raw["ceilings_tflops"]
    cublas = _row(ref, "6_wgmma_tma")["cublas_tflops"]
    copy = copy_gbps(ref)
    text = (f"At 4096³ a product is {flops / 1e9:.0f} GFLOP on {nbytes / 1e6:.1f} MB of compulsory traffic "
            f"(A and B read once, C written once, 2 bytes an element): {flops / nbytes:.0f} FLOP a byte. "
            f"On the {_short(ref)} the fastest tensor-core instruction, measured with no memory traffic at all "
            f"(below), runs at {ceil['wgmma_bf16']:.1f} TFLOP/s in bf16, so the arithmetic needs at least "
            f"{flops / (ceil['wgmma_bf16'] * 1e12) * 1e6:.0f} µs")
    if copy:
        gbps, path = copy
        text += (f"; the traffic, at the {gbps:,.0f} GB/s a copy reaches on the same card ({_file(path)}), "
                 f"{nbytes / (gbps * 1e9) * 1e6:.0f} µs")
    text += (f". cuBLAS (`torch.matmul`, bf16) took {flops / (cublas * 1e12) * 1e6:.0f} µs = {cublas:.1f} "
             f"TFLOP/s in the same run. {ref.provenance}")
    glue_md(names[0], text)

    v = raw["validation"]
    worst = v["worst_units"]
    rungs = sorted(k for k in worst if k != "cublas")
    shapes = ", ".join(f"{m}×{k}×{n}" for m, k, n in v["shapes"])
    failed = {_short(r): len(_raw(r)["validation"]["failures"]) for r in results}
    if not any(failed.values()):
        outcome = f"Every case passed on the {' and the '.join(failed)}"
    else:
        outcome = "; ".join(f"{n} cases failed on the {card}" for card, n in failed.items())
    err = (f"The harness checks every rung, bf16 and fp16 in, fp32 and 16-bit out, all four layouts (A or Aᵀ, "
           f"B or Bᵀ), at (m, k, n) = {shapes}, with c = {v['bound_c']:g}. "
           f"{outcome}. "
           f"The largest error of an fp32 output, in units of √K·2⁻²⁴·Σ|a||b|, was "
           f"{max(worst[r] for r in rungs):.2f} for the rungs and {worst.get('cublas', float('nan')):.2f} for "
           f"cuBLAS on the same inputs ({ref.device}): far inside the bound, and the same for every rung, "
           f"because at these sizes it is dominated by the final rounding to fp32, not by the order of the sums.")
    glue_md(names[1], err)


# --------------------------------------------------------------------------------------
# The ladder
# --------------------------------------------------------------------------------------

def phase8a_ladder() -> None:
    figs, texts = ["fig-phase8a-ladder"], ["phase8a-ladder-text", "phase8a-ladder-source"]
    results = all_results()
    if not results:
        _missing(figs, texts, "the HGEMM ladder")
        return
    glue_figure(figs[0], _ladder_figure(results))
    glue_md("phase8a-ladder-source", " ".join(r.provenance for r in results))
    glue_md("phase8a-ladder-text", _ladder_text(results))


def _ladder_figure(results: list[Results]):
    fig, axes = plt.subplots(1, len(results), figsize=(4.6 * len(results), 3.6), sharey=True, squeeze=False)
    top = max(_row(r, "6_wgmma_tma")["cublas_tflops"] for r in results) * 1.3
    for ax, res in zip(axes[0], results, strict=True):
        rows = [_row(res, k) for k, _, _ in RUNGS]
        bars = ax.barh([label for _, label, _ in RUNGS], [r["tflops"] for r in rows],
                       color=[c for _, _, c in RUNGS])
        cublas = rows[0]["cublas_tflops"]
        ax.axvline(cublas, color="black", ls="--", lw=1.2)
        ax.text(cublas, 0.5, " cuBLAS", va="center", ha="left", fontsize=9)
        for bar, row in zip(bars, rows, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {row['ratio']:.2f}",
                    va="center", fontsize=8)
        ax.set_title(f"{_short(res)}, bf16, 4096³", fontsize=10)
        ax.set_xlabel("TFLOP/s")
        ax.set_xlim(0, top)
    axes[0][0].invert_yaxis()  # shared: once for all
    fig.tight_layout()
    return fig


def _ladder_text(results: list[Results]) -> str:
    parts = []
    for res in results:
        rows = {k: _row(res, k) for k, _, _ in RUNGS}
        fp16 = {k: _row(res, k, dtype="fp16") for k in ("5_mma_pipelined", "6_wgmma_tma")}
        parts.append(
            f"On the {_short(res)} cuBLAS ran at {rows['1_wmma']['cublas_tflops']:.1f} TFLOP/s; rungs 1 to 6 "
            f"reached {', '.join(format(r['tflops'], '.1f') for r in rows.values())} TFLOP/s, "
            f"{', '.join(format(r['ratio'], '.2f') for r in rows.values())} of it. In fp16 rung 5 reached "
            f"{fp16['5_mma_pipelined']['ratio']:.2f} and rung 6 {fp16['6_wgmma_tma']['ratio']:.2f} of cuBLAS's fp16.")
    ref = results[0]
    at, bt = _row(ref, "6_wgmma_tma", "square_4096_At"), _row(ref, "6_wgmma_tma", "square_4096_Bt")
    f32 = _row(ref, "6_wgmma_tma", "square_4096_fp32out", out="fp32")
    parts.append(
        f"With a transposed operand, the backward pass's two products, rung 6 reached {at['ratio']:.2f} (Aᵀ) and "
        f"{bt['ratio']:.2f} (Bᵀ) of cuBLAS on the same layout ({_short(ref)}); writing an fp32 C instead of a "
        f"16-bit one (twice the bytes out), {f32['tflops']:.1f} TFLOP/s.")
    return " ".join(parts)


# --------------------------------------------------------------------------------------
# The ceilings: why mma.sync tops out below wgmma
# --------------------------------------------------------------------------------------

def phase8a_ceilings() -> None:
    names = ["phase8a-ceilings-table", "phase8a-ceilings-text"]
    results = all_results()
    if not results:
        _missing([], names, "the ceilings")
        return
    lines = ["| instruction | " + " | ".join(f"{_short(r)} bf16 | {_short(r)} fp16" for r in results) + " |",
             "|---|" + "---:|" * (2 * len(results))]
    for which, label in (("mma_sync", "`mma.sync.m16n8k16` (WMMA compiles to it too)"),
                         ("wgmma", "`wgmma.mma_async.m64n256k16`")):
        cells = []
        for r in results:
            c = _raw(r)["ceilings_tflops"]
            cells += [f"{c[f'{which}_bf16']:.1f}", f"{c[f'{which}_fp16']:.1f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    glue_md(names[0], "\n".join(lines) + "\n\nTFLOP/s. " + " ".join(r.provenance for r in results))

    ref = results[0]
    c = _raw(ref)["ceilings_tflops"]
    cublas = _row(ref, "6_wgmma_tma")["cublas_tflops"]
    r5 = _row(ref, "5_mma_pipelined")["tflops"]
    r6 = _row(ref, "6_wgmma_tma")["tflops"]
    glue_md(names[1], (
        f"On the {_short(ref)}, mma.sync's ceiling is {c['mma_sync_bf16'] / c['wgmma_bf16']:.2f} of wgmma's "
        f"(bf16). No mma.sync or WMMA kernel can therefore pass {c['mma_sync_bf16'] / cublas:.2f}× cuBLAS "
        f"({c['mma_sync_bf16']:.1f} / {cublas:.1f} TFLOP/s), however well it is fed, while cuBLAS itself runs at "
        f"{cublas / c['wgmma_bf16']:.2f} of the wgmma ceiling. Rung 5 reached {r5 / c['mma_sync_bf16']:.2f} of "
        f"its instruction's ceiling, rung 6 {r6 / c['wgmma_bf16']:.2f} of its own."))


# --------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------

def _gpt_rows(res: Results, kernel: str, dtype: str = "bf16") -> list[dict]:
    return [r for r in res.rows if r["shape"].startswith("gpt_") and r["kernel"] == kernel
            and r["dtype"] == dtype and r.get("tflops")]


def phase8a_roofline() -> None:
    figs, texts = ["fig-phase8a-roofline"], ["phase8a-roofline-text"]
    results = all_results()
    if not results:
        _missing(figs, texts, "the HGEMM ladder")
        return
    ref = results[0]
    copy = copy_gbps(ref)
    glue_figure(figs[0], _roofline_figure(ref, copy[0] if copy else None))
    c = _raw(ref)["ceilings_tflops"]
    text = (f"Ceilings: the two instructions' measured rates, {c['mma_sync_bf16']:.1f} and "
            f"{c['wgmma_bf16']:.1f} TFLOP/s")
    if copy:
        gbps, path = copy
        text += (f", and the memory roof, {gbps:,.0f} GB/s (a copy on the same card, {_file(path)}), which "
                 f"meets the wgmma ceiling at {c['wgmma_bf16'] * 1e12 / (gbps * 1e9):.0f} FLOP a byte")
    d64 = _gpt_rows(ref, "6_wgmma_tma")
    small = [r for r in d64 if r["shape"].startswith("gpt_d64")]
    if small and copy:
        worst = max(small, key=lambda r: r["tflops"] / min(c["wgmma_bf16"], copy[0] / 1e3 *
                                                            (work(r["m"], r["k"], r["n"])[0] /
                                                             work(r["m"], r["k"], r["n"])[1])))
        f, b = work(worst["m"], worst["k"], worst["n"])
        roof = min(c["wgmma_bf16"], copy[0] / 1e3 * f / b)
        text += (f". The course GPT's products (d_model 64) lie left of the ridge, at {f / b:.0f} FLOP a byte "
                 f"for {worst['m']}×{worst['k']}×{worst['n']}, yet reach only a small part of the roof there "
                 f"(rung 6: {worst['tflops']:.1f} of {roof:.0f} TFLOP/s, {worst['seconds'] * 1e6:.1f} µs for "
                 f"{f / 1e6:.0f} MFLOP): at that size a product is launch and latency, not bandwidth")
    glue_md(texts[0], text + f". {ref.provenance}")


def _roofline_figure(ref: Results, gbps: float | None):
    c = _raw(ref)["ceilings_tflops"]
    fig, ax = plt.subplots(figsize=(8.6, 4.4))
    xs = [2.0 ** e for e in range(2, 15)]
    for key, label, colour in (("wgmma_bf16", "wgmma ceiling", GREEN), ("mma_sync_bf16", "mma.sync ceiling", BLUE)):
        pts = sorted(xs + [c[key] / (gbps / 1e3)]) if gbps else xs  # the ridge itself, so the corner is sharp
        ax.plot(pts, [min(c[key], gbps / 1e3 * x) if gbps else c[key] for x in pts], color=colour, lw=1.3,
                ls="--", marker="")
        above = key.startswith("wgmma")
        ax.text(xs[-1], c[key] * (1.08 if above else 0.8), label, color=colour, ha="right", fontsize=9)
    if gbps:
        ax.text(xs[1], gbps / 1e3 * xs[1] * 1.3, f"copy {gbps:,.0f} GB/s", rotation=33, fontsize=9, color="black")
    # every rung at 4096^3 (one intensity: they differ in time, not in compulsory traffic)
    f, b = work(4096, 4096, 4096)
    for (kernel, label, colour), dx in zip(RUNGS, (0.80, 0.86, 0.92, 0.98, 1.04, 1.10), strict=True):
        row = _row(ref, kernel)
        ax.plot(f / b * dx, row["tflops"], "o", color=colour, ms=6, label=f"{label} (4096³)")
    ax.plot(f / b * 1.17, _row(ref, "6_wgmma_tma")["cublas_tflops"], "*", color="black", ms=9, label="cuBLAS (4096³)")
    # the GPT's shapes: rung 5, rung 6 and cuBLAS
    for kernel, marker, colour, label in (("5_mma_pipelined", "s", BLUE, "rung 5, GPT shapes"),
                                          ("6_wgmma_tma", "D", GREEN, "rung 6, GPT shapes")):
        rows = _gpt_rows(ref, kernel)
        pts = [(work(r["m"], r["k"], r["n"]), r["tflops"]) for r in rows]
        ax.plot([fw / bw for (fw, bw), _ in pts], [t for _, t in pts], marker, color=colour, mfc="none",
                ms=6, ls="", label=label)
    rows = _gpt_rows(ref, "6_wgmma_tma")
    ax.plot([work(r["m"], r["k"], r["n"])[0] / work(r["m"], r["k"], r["n"])[1] for r in rows],
            [r["cublas_tflops"] for r in rows], "x", color="black", ms=6, ls="", label="cuBLAS, GPT shapes")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("FLOP per byte of compulsory traffic (A, B read once, C written once; 16-bit)")
    ax.set_ylabel("TFLOP/s (bf16 in, fp32 accumulate)")
    ax.set_title(f"{_short(ref)}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# The fragment layout of mma.m16n8k16 (16-bit A and B, fp32 C)
# --------------------------------------------------------------------------------------

def fragment_owner(operand: str, lane: int, reg: int) -> tuple[int, int]:
    """(row, col) of element `reg` held by `lane` in an m16n8k16 fragment (PTX ISA, "Matrix Fragments for
    mma.m16n8k16 with floating point type"): A is 16 x 16 (m x k, 8 elements a lane), B 16 x 8 (k x n, 4),
    C/D 16 x 8 (m x n, 4). groupID = lane >> 2, threadID_in_group = lane % 4."""
    g, t = lane >> 2, lane % 4
    if operand == "A":
        row = g + 8 * ((reg >> 1) & 1)
        col = 2 * t + (reg & 1) + 8 * (reg >= 4)
        return row, col
    if operand == "B":
        return 2 * t + (reg & 1) + 8 * (reg >= 2), g
    if operand == "C":
        return g + 8 * (reg >= 2), 2 * t + (reg & 1)
    raise ValueError(f"operand must be 'A', 'B' or 'C', got {operand!r}")


FRAGMENTS = {"A": (16, 16, 8), "B": (16, 8, 4), "C": (16, 8, 4)}  # rows, cols, elements a lane


def fragment_map(operand: str) -> dict[tuple[int, int], tuple[int, int]]:
    """{(row, col): (lane, reg)}, checked: every element of the matrix is held by exactly one lane."""
    rows, cols, per_lane = FRAGMENTS[operand]
    owner: dict[tuple[int, int], tuple[int, int]] = {}
    for lane in range(32):
        for reg in range(per_lane):
            rc = fragment_owner(operand, lane, reg)
            if rc in owner or not (0 <= rc[0] < rows and 0 <= rc[1] < cols):
                raise AssertionError(f"{operand}: element {rc} of lane {lane} reg {reg} is out of the matrix or "
                                     f"already held by {owner.get(rc)}")
            owner[rc] = (lane, reg)
    if len(owner) != rows * cols:
        raise AssertionError(f"{operand}: {len(owner)} elements held, {rows * cols} expected")
    return owner


def phase8a_fragments() -> None:
    colours = [BLUE, ORANGE, GREEN, PURPLE]  # by threadID_in_group
    fig, axes = plt.subplots(1, 3, figsize=(12.5, 5.6), gridspec_kw={"width_ratios": [16, 8, 8]})
    titles = {"A": "A (m × k = 16 × 16), a0…a7", "B": "B (k × n = 16 × 8), b0…b3", "C": "C, D (m × n = 16 × 8), c0…c3"}
    for ax, operand in zip(axes, "ABC", strict=True):
        rows, cols, _ = FRAGMENTS[operand]
        for (r, c), (lane, reg) in fragment_map(operand).items():
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colours[lane % 4], alpha=0.25 + 0.5 * (reg % 2),
                                   edgecolor="white", lw=0.6))
            ax.text(c + 0.5, r + 0.42, f"T{lane}", ha="center", va="center", fontsize=6.2)
            ax.text(c + 0.5, r + 0.8, f"{operand.lower()}{reg}", ha="center", va="center", fontsize=5, color="#333")
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_xticks([x + 0.5 for x in range(cols)], [str(x) for x in range(cols)], fontsize=7)
        ax.set_yticks([y + 0.5 for y in range(rows)], [str(y) for y in range(rows)], fontsize=7)
        ax.grid(False)
        ax.tick_params(length=0)
        ax.set_title(titles[operand], fontsize=10)
        ax.set_xlabel({"A": "k", "B": "n", "C": "n"}[operand])
        ax.set_ylabel({"A": "m", "B": "k", "C": "m"}[operand])
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
    fig.tight_layout()
    glue_figure("fig-phase8a-fragments", fig)


# --------------------------------------------------------------------------------------
# Nsight Compute
# --------------------------------------------------------------------------------------

NCU_METRICS = [  # (pattern of the line in the report, what the chapter calls it)
    ("Duration", "duration under the profiler"),
    ("Registers Per Thread", "registers a thread"),
    ("Achieved Active Warps Per SM", "warps an SM (achieved)"),
    ("sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum", "ldmatrix wavefronts"),
    ("sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum", "ldmatrix bank conflicts"),
    ("sm__inst_executed_pipe_tensor_op_hmma.sum", "tensor-pipe instructions"),
    ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe active (%)"),
    ("Issue Slots Busy", "issue slots busy (%)"),
    ("Compute (SM) Throughput", "compute (SM) throughput (%)"),
    ("DRAM Throughput", "DRAM throughput (%)"),
]
NCU_RUNGS = ("rung3", "rung4", "rung5", "rung6")


def ncu_reports(slug: str) -> dict[str, Path]:
    found = {}
    for rung in NCU_RUNGS:
        path = results_dir() / f"{BENCH}_ncu_{rung}-{slug}.txt"
        if path.exists():
            found[rung] = path
    return found


def ncu_values(path: Path) -> dict[str, str]:
    """The value (and its unit where the report gives one) of each of NCU_METRICS in one report."""
    text = path.read_text()
    values = {}
    for label, _ in NCU_METRICS:
        m = re.search(rf"^\s+{re.escape(label)}\s+(?:(\S+)\s+)?([\d.,]+)\s*$", text, re.M)
        if m:
            unit = m.group(1) if m.group(1) in ("us", "ms") else ""
            values[label] = f"{m.group(2)} {unit.replace('us', 'µs')}".strip()
    return values


def _sm_count(path: Path) -> int | None:
    m = re.search(r"^\s+# SMs\s+SM\s+([\d,]+)\s*$", path.read_text(), re.M)
    return _count(m.group(1)) if m else None


def _count(value: str) -> int:
    return int(value.replace(",", ""))


def phase8a_ncu() -> None:
    names = ["phase8a-ncu-table", "phase8a-ncu-banks", "phase8a-ncu-issue", "phase8a-ncu-rung5"]
    results = all_results()
    reports = ncu_reports(_slug(results[0].path)) if results else {}
    if len(reports) < len(NCU_RUNGS):
        for name in names:
            glue_md(name, "*No Nsight Compute texts of the ladder are committed yet: see "
                          "`benchmarks/phase8a_hgemm_gpu.sh`.*")
        return
    vals = {rung: ncu_values(p) for rung, p in reports.items()}
    lines = ["| | " + " | ".join(f"rung {r[-1]}" for r in NCU_RUNGS) + " |", "|---|" + "---:|" * len(NCU_RUNGS)]
    for label, shown in NCU_METRICS:
        lines.append(f"| {shown} | " + " | ".join(vals[r].get(label, "") for r in NCU_RUNGS) + " |")
    files = ", ".join(_file(reports[r]) for r in NCU_RUNGS)
    glue_md(names[0], "\n".join(lines) + f"\n\n{results[0].device}, bf16, 4096³; from {files}.")

    wav, con = NCU_METRICS[3][0], NCU_METRICS[4][0]
    w3, c3, w4 = _count(vals["rung3"][wav]), _count(vals["rung3"][con]), _count(vals["rung4"][wav])
    glue_md(names[1], (
        f"Rung 3's `ldmatrix` took {w3:,} shared-memory wavefronts, {c3:,} of them ({c3 / w3:.0%}) bank "
        f"conflicts; rung 4, the same instructions on swizzled rows, took {w4:,} wavefronts "
        f"({w3 / w4:.1f}× fewer) and {_count(vals['rung4'][con]):,} conflicts. Its time fell from "
        f"{vals['rung3']['Duration']} to {vals['rung4']['Duration']} under the profiler."))

    inst = NCU_METRICS[5][0]
    h5, h6 = _count(vals["rung5"][inst]), _count(vals["rung6"][inst])
    flops = work(4096, 4096, 4096)[0]
    glue_md(names[2], (
        f"For the same {flops / 1e9:.0f} GFLOP, rung 5 executes {h5:,} tensor instructions ({flops / h5:,.0f} FLOP each: "
        f"one m16n8k16 per warp) and rung 6 {h6:,} ({flops / h6:,.0f} FLOP each: one m64n256k16 for a warpgroup, "
        f"counted once per warp). Rung 5 kept the tensor pipe {vals['rung5'][NCU_METRICS[6][0]]}% active with "
        f"{vals['rung5']['Issue Slots Busy']}% of its issue slots busy; rung 6 kept it "
        f"{vals['rung6'][NCU_METRICS[6][0]]}% active with {vals['rung6']['Issue Slots Busy']}%, and no "
        f"`ldmatrix` at all ({vals['rung6'][wav]} wavefronts): wgmma reads its operands from shared memory "
        f"itself."))

    text5 = reports["rung5"].read_text()
    cpi = re.search(r"Warp Cycles Per Issued Instruction\s+cycle\s+([\d.]+)", text5)
    stall = re.search(r"spends ([\d.]+) cycles being stalled waiting on a fixed latency", text5)
    warps = re.search(r"Theoretical Active Warps per SM\s+warp\s+([\d.]+)", text5)
    if cpi and stall and warps:
        per_sched = float(warps.group(1)) / 4  # an H100 or H200 SM has 4 schedulers (warp schedulers)
        glue_md("phase8a-ncu-rung5", (
            f"With {vals['rung5']['Registers Per Thread']} registers a thread, an SM holds at most {warps.group(1)} "
            f"of rung 5's warps, {per_sched:g} for each of its 4 schedulers; a warp issues once every {cpi.group(1)} "
            f"cycles on average (Nsight Compute attributes {stall.group(1)} of them to waiting on a fixed-latency "
            f"dependency), so a scheduler issues on about {per_sched:g} / {cpi.group(1)} = "
            f"{per_sched / float(cpi.group(1)):.0%} of its cycles, the issue slots busy above: few warps, each "
            f"often waiting."))
    else:
        glue_md("phase8a-ncu-rung5", "")


# --------------------------------------------------------------------------------------
# The GPT's training shapes
# --------------------------------------------------------------------------------------

GPT_LABELS = {
    "qkv_fwd": "q, k, v forward", "fc_fwd": "MLP up, forward", "proj_fwd": "MLP down, forward",
    "fc_dx": "dX = dY·Wᵀ", "fc_dw": "dW = Xᵀ·dY",
}


def phase8a_gpt() -> None:
    names = ["phase8a-gpt-table", "phase8a-gpt-text"]
    results = all_results()
    if not results:
        _missing([], names, "the GPT shapes")
        return
    ref = results[0]
    reports = ncu_reports(_slug(ref.path))
    sms = _sm_count(reports["rung6"]) if "rung6" in reports else None
    r5 = {r["shape"]: r for r in _gpt_rows(ref, "5_mma_pipelined")}
    r6 = {r["shape"]: r for r in _gpt_rows(ref, "6_wgmma_tma")}
    lines = ["| d_model | product | m × k × n | 128×256 tiles | rung 5 | rung 6 | cuBLAS TFLOP/s |",
             "|---|---|---|---:|---:|---:|---:|"]
    for shape, row in r6.items():
        d, what = shape.removeprefix("gpt_d").split("_", 1)
        tiles = math.ceil(row["m"] / 128) * math.ceil(row["n"] / 256)
        lines.append(f"| {d} | {GPT_LABELS[what]} | {row['m']} × {row['k']} × {row['n']} | {tiles} | "
                     f"{r5[shape]['ratio']:.2f} | {row['ratio']:.2f} | {row['cublas_tflops']:.1f} |")
    glue_md(names[0], "\n".join(lines) + f"\n\nbf16; rung 5 and rung 6 as a fraction of cuBLAS. {ref.provenance}")

    big = {s: r for s, r in r6.items() if s.startswith("gpt_d768")}
    lo = min(big.values(), key=lambda r: r["ratio"])
    fwd = big["gpt_d768_fc_fwd"]
    tiles = sorted({math.ceil(r["m"] / 128) * math.ceil(r["n"] / 256) for r in big.values()})
    others = [r for r in big.values() if r is not fwd]
    text = (f"At d_model 768 rung 6 reaches {fwd['ratio']:.2f} of cuBLAS on the MLP's forward product and "
            f"{min(r['ratio'] for r in others):.2f} to {max(r['ratio'] for r in others):.2f} on the other four "
            f"(lowest: {GPT_LABELS[lo['shape'][9:]]}; on the square 4096³ it reached "
            f"{_row(ref, '6_wgmma_tma')['ratio']:.2f}). ")
    if sms:
        waves = ", ".join(f"{t} tiles are {t / sms:.2f} waves" for t in tiles)
        text += (f"The {_short(ref)} has {sms} SMs (Nsight Compute's launch statistics), and rung 6 gives each SM "
                 f"one whole 128 × 256 tile at a time: {waves}. Below one wave some SMs have nothing to do; just past a "
                 f"whole number of waves the last one runs mostly empty. ")
    dw = big["gpt_d768_fc_dw"]
    text += (f"dW = Xᵀ·dY is the worst: {math.ceil(dw['m'] / 128) * math.ceil(dw['n'] / 256)} tiles, each a walk "
             f"along K = {dw['k']}; a split over K (several blocks a tile, summed at the end) is the known cure, "
             f"and rung 6 does not have it.")
    glue_md(names[1], text)


# --------------------------------------------------------------------------------------
# Rung 6 in the lab: the learner's launcher, and what Nsight Compute says of rungs 5 and 6
# --------------------------------------------------------------------------------------

LAB_BENCH, LAB_SCRIPT = "phase8a_wgmma", "benchmarks/phase8a_wgmma.py"
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")


def _lab_row(res: Results, kernel: str, shape: str = SQUARE, dtype: str = "bfloat16") -> dict | None:
    return next((r for r in res.rows if (r["kernel"], r["shape"], r["dtype"]) == (kernel, shape, dtype)), None)


def _lab_text(res: Results) -> str:
    raw = _raw(res)
    parts = []
    for dtype, shown in (("bfloat16", "bf16"), ("float16", "fp16")):
        six, five = _lab_row(res, "wgmma", dtype=dtype), _lab_row(res, "pipeline", dtype=dtype)
        if six and five:
            parts.append(f"{shown}: rung 6 {six['tflops']:.0f} TFLOP/s = {six['ratio']:.2f}× cuBLAS "
                         f"({six['cublas_tflops']:.0f}), rung 5 {five['ratio']:.2f}×")
    text = (f"Measured on the {_short(res)} ({res.date}) with the lab's own files and launcher "
            f"(`hgemm(..., variant=\"wgmma\")`), 4096³, 16-bit in and out: " + "; ".join(parts) + ".")
    maps = raw.get("tensor_map_placement")
    if maps:
        cost = maps["global_over_by_value"] - 1
        text += (f" The same kernel with its two maps passed by value as a `__grid_constant__` parameter (launched "
                 f"through the driver: no writer launch, no fence) ran {maps['by_value_maps']['tflops']:.0f} "
                 f"TFLOP/s against {maps['global_memory_maps']['tflops']:.0f} for the lab's maps in global memory: "
                 f"the writer launch and the fence cost {cost:+.1%} of the time"
                 + (", and both wrote the same C, bit for bit." if maps.get("same_bits") else "."))
    gpt = [r for r in res.rows if r["kernel"] == "wgmma" and r["shape"].startswith("gpt_")]
    if gpt:
        lo, hi = min(gpt, key=lambda r: r["ratio"]), max(gpt, key=lambda r: r["ratio"])
        text += (f" At the GPT's training shapes it ran between {lo['ratio']:.2f}× cuBLAS ({lo['shape']}, "
                 f"{lo['m']} × {lo['k']} × {lo['n']}) and {hi['ratio']:.2f}× ({hi['shape']}).")
    valid = raw.get("validation") or []
    if valid:
        ran = sum(v["ran_rung6"] for v in valid)
        text += (f" Validation: {sum(v['ok'] for v in valid)} of {len(valid)} products within the bound "
                 f"(rung 6 computed {ran} of them, rung 5 the ones whose rows the TMA cannot copy). "
                 f"From {_file(res.path)}.")
    return text


def _ncu_metric(row: dict, *names: str) -> float | None:
    for name in names:
        value = row.get(name)
        if value and isinstance(value[0], (int, float)):
            return float(value[0])
    return None


def _stalls(row: dict) -> list[tuple[str, float]]:
    """Nsight Compute's stall reasons of one kernel, largest first: (reason, cycles per issued instruction)."""
    found = [(STALL.fullmatch(k).group(1), float(v[0])) for k, v in row.items()
             if STALL.fullmatch(k) and isinstance(v[0], (int, float))]
    return sorted(found, key=lambda s: -s[1])


def _ncu_text(path: Path) -> str:
    import json

    data = json.loads(path.read_text())
    rows = {r["rung"]: r for r in data["results"]}
    five, six = rows.get("rung5_pipeline"), rows.get("rung6_wgmma")
    if not (five and six):
        return ""
    # on these cards the hmma counters count wgmma too, and the gmma active-cycles counter reads n/a
    pipe = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
    p5, p6 = _ncu_metric(five, pipe[1], pipe[0]), _ncu_metric(six, *pipe)
    i5, i6 = (_ncu_metric(r, "sm__inst_issued.avg.pct_of_peak_sustained_active") for r in (five, six))
    n5, n6 = (_ncu_metric(r, "smsp__inst_executed.sum") for r in (five, six))
    h5 = _ncu_metric(five, "sm__inst_executed_pipe_tensor_op_hmma.sum")
    g6 = _ncu_metric(six, "sm__inst_executed_pipe_tensor_op_gmma.sum", "sm__inst_executed_pipe_tensor_op_hmma.sum")
    ld5, ld6 = (_ncu_metric(r, "sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum") for r in (five, six))
    c5, c6 = (_ncu_metric(r, "smsp__average_warp_latency_per_inst_issued.ratio") for r in (five, six))
    if None in (p5, p6, i5, i6, n5, n6, h5, g6):
        return ""
    text = (f"Nsight Compute, one launch of each of the lab's rungs 5 and 6 at 4096³ (bf16) on the "
            f"{data['device'].replace('NVIDIA ', '')}: the tensor pipe was active {p5:.1f}% of the time under rung 5 "
            f"and {p6:.1f}% under rung 6, with {i5:.1f}% and {i6:.1f}% of the issue slots busy. Rung 5 executed "
            f"{n5:,.0f} warp instructions, {h5:,.0f} of them `mma.sync` ({n5 / h5:.1f} instructions for each)"
            + (f", and {ld5:,.0f} shared-memory wavefronts of `ldmatrix`" if ld5 else "")
            + f"; rung 6 executed {n6:,.0f} ({n6 / n5:.2f} of rung 5's), {g6:,.0f} of them wgmma"
            + (", and no `ldmatrix`" if ld6 == 0 else "") + ".")
    for row, cpi, label in ((five, c5, "rung 5"), (six, c6, "rung 6")):
        stalls = _stalls(row)
        if stalls and cpi:
            top = ", ".join(f"`{name}` {value:.2f}" for name, value in stalls[:3])
            text += (f" A warp of {label} issued once every {cpi:.2f} cycles; the largest stall reasons, in cycles "
                     f"per issued instruction: {top}.")
    return text + f" From {_file(path)}."


def phase8a_wgmma_lab() -> None:
    """Glue the lab's rung 6 as measured by benchmarks/phase8a_wgmma.py (phase8a_wgmma-<gpu>.json) and its Nsight
    Compute reading (phase8a_wgmma_ncu-<gpu>.json)."""
    found = sorted(every_card(LAB_BENCH), key=lambda r: ("H100" not in r.device, r.device))
    if not found:
        glue_md("phase8a-wgmma-lab", missing_md(LAB_BENCH, LAB_SCRIPT, "an H100 or H200"))
    else:
        glue_md("phase8a-wgmma-lab", _lab_text(found[0]))
    ncu = sorted(results_dir().glob(f"{LAB_BENCH}_ncu-*.json"), key=lambda p: ("h100" not in p.name, p.name))
    text = _ncu_text(ncu[0]) if ncu else ""
    glue_md("phase8a-wgmma-ncu", text or (
        f"*No Nsight Compute reading of the lab's rungs 5 and 6 is committed yet: run `{LAB_SCRIPT} --profile` under "
        f"`ncu --csv` on an H100 or H200, then `{LAB_SCRIPT} --from-ncu` on its output.*"))


# Mixed-precision training (benchmarks/phase8a_amp.py)
# --------------------------------------------------------------------------------------

AMP_BENCH = "phase8a_amp"
# later runs of one model alone (--only mnist, --only gpt) on the same card: their rows replace that model's
AMP_LATER_BENCHES = (("mnist_cnn", "phase8a_amp_mnist", "The CNN"), ("gpt", "phase8a_amp_gpt", "The GPT"))
AMP_SCRIPT = "benchmarks/phase8a_amp.py"
AMP_MODELS = (("gpt", "GPT (Phase 7), one step"), ("mnist_cnn", "MNIST CNN (Phase 6), one step"))
AMP_BARS = [  # (key in the step row, label, colour)
    ("minitorch_float32_captured_seconds", "minitorch fp32, graph", GREY),
    ("minitorch_bfloat16_captured_seconds", "minitorch bf16 autocast, graph", BLUE),
    ("pytorch_float32_captured_seconds", "PyTorch fp32, graph", ORANGE),
    ("pytorch_bfloat16_captured_seconds", "PyTorch torch.autocast bf16, graph", VERMILLION),
    ("pytorch_float32_eager_seconds", "PyTorch fp32, eager", PURPLE),
    ("pytorch_bfloat16_eager_seconds", "PyTorch torch.autocast bf16, eager", GREEN),
]


def amp_results() -> list[Results]:
    return sorted(every_card(AMP_BENCH), key=lambda r: ("H100" not in r.device, r.device))


def phase8a_amp() -> None:
    """The deliverable's figure (step times of both models, both precisions, both frameworks) and its text
    (the accuracy and loss gaps, the ratios), from the first card's JSON."""
    figs, texts = ["fig-phase8a-amp"], ["phase8a-amp-text", "phase8a-amp-source"]
    results = amp_results()
    if not results:
        for name in figs:
            glue_figure(name, missing_figure(AMP_BENCH, "mixed-precision training", AMP_SCRIPT))
        for name in texts:
            glue_md(name, missing_md(AMP_BENCH, AMP_SCRIPT))
        return
    res = results[0]
    provenance = res.provenance
    for model, bench, name in AMP_LATER_BENCHES:
        later = _newer_run(res, bench)
        if later is not None:  # the model's rows from its own, later run on the same card
            rows = [r for r in res.rows if r.get("model") != model] + [r for r in later.rows
                                                                       if r.get("model") == model]
            provenance += f" {name}: {later.provenance}"
            res = dataclasses.replace(res, rows=rows)
    glue_figure(figs[0], _amp_figure(res))
    glue_md("phase8a-amp-source", provenance)
    glue_md("phase8a-amp-text", _amp_text(res))


def _newer_run(res: Results, bench: str) -> Results | None:
    """The newest full-configuration one-model run (``bench``) on res's card, dated no earlier than res, or None."""
    runs = [r for r in every_card(bench) if r.device == res.device and r.date >= res.date
            and json.loads(r.path.read_text()).get("configuration") == "full"]
    return max(runs, key=lambda r: (r.date, r.path.name)) if runs else None


def _amp_rows(res: Results, kind: str) -> dict[str, dict]:
    return {r["model"]: r for r in res.rows if r["kind"] == kind}


def _amp_figure(res: Results):
    steps = _amp_rows(res, "step")
    fig, axes = plt.subplots(1, len(AMP_MODELS), figsize=(11, 3.4), squeeze=False)
    for ax, (model, title) in zip(axes[0], AMP_MODELS, strict=True):
        row = steps[model]
        bars = [(label, row[key] * 1e3, colour) for key, label, colour in AMP_BARS if key in row]
        drawn = ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
        for bar, (_, ms, _) in zip(drawn, bars, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {ms:.3g} ms", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("milliseconds a training step (host time included)")
        ax.set_xlim(0, max(b[1] for b in bars) * 1.35)
        ax.invert_yaxis()
    fig.suptitle(f"{_short(res)}, {res.date}", fontsize=10)
    fig.tight_layout()
    return fig


# how phase8a_amp.py ran minitorch's GPT step (its GPT_WAYS), as the text says it
AMP_WAYS = {"per_parameter": "with AdamW per parameter, as the lab builds it",
            "flat": "with AdamW over one flat buffer, `flat=True`",
            "flat+branches": "with AdamW over one flat buffer, `flat=True`, and the weights' gradients on a side "
                             "branch of the graph, `ops.set_concurrent_weight_grads(True)`",
            "flat+unsplit": "with AdamW over one flat buffer, `flat=True`, and the weights' gradients not split "
                            "along K, `ops.set_split_k(0)`",
            "flat+branches+unsplit": "with AdamW over one flat buffer, `flat=True`, and the weights' gradients on "
                                     "a side branch of the graph, `ops.set_concurrent_weight_grads(True)`, not "
                                     "split along K, `ops.set_split_k(0)`"}


def _torch_adamw(step: dict) -> str:
    return "fused, `fused=True`" if "fused=True" in step.get("pytorch_optimizer", "") else "foreach, its default"


def _amp_kernels_text(res: Results) -> str:
    """Where the GPT's bf16 captured step spends its GPU time, against PyTorch's (the run's kernel rows, from
    ``--profile``), or nothing for a run without them."""
    busy = {r["run"]: r["busy_us_per_step"] for r in res.rows if r["kind"] == "kernel_busy" and r.get("model") == "gpt"}
    ours, theirs = "minitorch_bfloat16_captured", "pytorch_bfloat16_captured"
    if ours not in busy or theirs not in busy:
        return ""
    table = sorted((r for r in res.rows if r["kind"] == "kernel" and r.get("run") == ours),
                   key=lambda r: -r["us_per_step"])
    top = ", ".join(f"{r['calls_per_step']:.0f} launches of `{r['name'].split('<')[0].split('(')[0].replace('void ', '')}` "
                    f"{r['us_per_step']:.0f} µs" for r in table[:3])
    return (f" Split by kernel (`torch.profiler`), the GPT's bf16 step keeps the GPU busy {busy[ours]:.0f} µs a step "
            f"(more than the step's time: the weights' gradients overlap the rest), PyTorch's captured step "
            f"{busy[theirs]:.0f} µs; the largest shares are {top}.")


def _amp_text(res: Results) -> str:
    steps, summary = _amp_rows(res, "step"), _amp_rows(res, "summary")
    gpt = [r for r in res.rows if r["kind"] == "training" and r["model"] == "gpt"]
    cnn = [r for r in res.rows if r["kind"] == "training" and r["model"] == "mnist_cnn"]
    g32, g16 = (next(r for r in gpt if r["precision"] == p) for p in ("float32", "bfloat16"))
    c32, c16 = (next(r for r in cnn if r["precision"] == p) for p in ("float32", "bfloat16"))
    parts = [
        f"On the {_short(res)} ({res.date}), the GPT trained {g32['steps']} steps reached a validation loss of "
        f"{g32['val_loss']:.4f} in float32 and {g16['val_loss']:.4f} under bf16 autocast "
        f"(a gap of {g16['val_loss'] - g32['val_loss']:+.4f}; the bound is 0.02), and the CNN, trained "
        f"{c32['epochs']} epoch{'s' if c32['epochs'] != 1 else ''}, reached {c32['test_accuracy']:.2%} test accuracy "
        f"in float32 and "
        f"{c16['test_accuracy']:.2%} under bf16 autocast "
        f"({100 * (c16['test_accuracy'] - c32['test_accuracy']):+.2f} points; the bound is 0.1)."]
    for model, name in (("gpt", "GPT"), ("mnist_cnn", "CNN")):
        s, st = summary[model], steps[model]
        text = (f" The {name}'s bf16 step replayed from a graph takes {st['minitorch_bfloat16_captured_seconds'] * 1e3:.3g} ms, "
                f"{s['bf16_over_fp32_captured']:.2f}× minitorch's fp32 step")
        if "bf16_over_pytorch_autocast_captured" in s:
            text += f", {s['bf16_over_pytorch_autocast_captured']:.2f}× PyTorch's captured autocast step"
        if "bf16_over_pytorch_autocast_eager" in s:
            text += f" and {s['bf16_over_pytorch_autocast_eager']:.2f}× its eager one"
        if st.get("way") in AMP_WAYS:  # a run that names how minitorch's step ran, and PyTorch's optimizer
            text += f" (minitorch's step {AMP_WAYS[st['way']]}; PyTorch's AdamW {_torch_adamw(st)})"
        parts.append(text + ".")
    parts.append(_amp_kernels_text(res))
    # a run whose config names "bmm" launched each batched product once (grid z); runs before launched once a
    # matrix, thousands of launches more than float32 (256 matrices a product, twelve products a step)
    batched = ("bmm" in json.loads(res.path.read_text()).get("config", {})
               or g16["launches_per_step"] < 2 * g32["launches_per_step"])
    how = ("one `hgemm` launch for the whole batch (grid z), with the conversions of its operands around it"
           if batched else "one `hgemm` launch per matrix of the batch")
    parts.append(
        f" A float32 GPT step replays {g32['launches_per_step']} launches, a bf16 one {g16['launches_per_step']}: "
        f"each of attention's batched products is {how}. The CNN's steps "
        f"replay {c32['launches_per_step']} and {c16['launches_per_step']} launches.")
    return "".join(parts)
