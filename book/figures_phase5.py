"""Figures of the Phase 5 chapter (the SGEMM ladder), drawn at build time.

Everything measured comes from ``benchmarks/results/phase5_gemm-*.json`` (``benchmarks/phase5_gemm.py``,
GPU: every rung and cuBLAS at 128^3 to 4096^3, the autotuning winners, the host cost of a call) and
from the committed Nsight Compute reports ``benchmarks/results/phase5_gemm_ncu_*-<gpu>.txt``. Without
them the chapter still builds, with a note saying which script to run.
"""

from __future__ import annotations

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

SCRIPT = "benchmarks/phase5_gemm.py"
RUNGS = [  # (variant in the JSON, label, colour)
    ("naive", "1 naive", GREY),
    ("coalesced", "2 coalesced", VERMILLION),
    ("shared", "3 shared memory", ORANGE),
    ("blocktile_1d", "4 1-D blocktiling", PURPLE),
    ("blocktile_2d", "5 2-D blocktiling", PURPLE),
    ("vectorized", "6 float4, A transposed", BLUE),
    ("autotuned", "7 templated tiles", BLUE),
    ("warptiling", "8 warptiling", GREEN),
    ("double_buffered", "9 double buffering", GREEN),
    ("best_tuned", "best, autotuned", "black"),
]


def thresholds() -> dict:
    with open(REPO_ROOT / "grader" / "thresholds.toml", "rb") as fh:
        return tomllib.load(fh)["phase5"]


def _rows(res) -> dict[str, dict[int, dict]]:
    """{kernel: {size: row}}, checked for the fields the figures use."""
    out: dict[str, dict[int, dict]] = {}
    for row in res.rows:
        for key in ("kernel", "size", "gflops", "cublas_gflops", "ratio"):
            if key not in row:
                raise ValueError(f"{res.path}: result row {row} lacks {key!r}")
        out.setdefault(row["kernel"], {})[int(row["size"])] = row
    missing = {"cublas", *(v for v, _, _ in RUNGS)} - set(out)
    if missing:
        raise ValueError(f"{res.path}: no rows for {sorted(missing)}")
    return out


def _no_results(fig_names: list[str], text_names: list[str], what: str) -> None:
    for name in fig_names:
        glue_figure(name, missing_figure("phase5_gemm", what, SCRIPT))
    for name in text_names:
        glue_md(name, missing_md("phase5_gemm", SCRIPT))


def phase5_ladder() -> None:
    """The ladder at 1024^3 and 4096^3 (GFLOP/s of every rung, cuBLAS as a line), GFLOP/s against
    the size, and the text that quotes their numbers."""
    figs, texts = ["fig-phase5-ladder", "fig-phase5-sizes"], [
        "phase5-ladder-text", "phase5-ladder-source", "phase5-autotune-text", "phase5-host-text",
        "phase5-sizes-text"]
    res = latest("phase5_gemm")
    if res is None:
        _no_results(figs, texts, "the SGEMM ladder")
        return
    data = _rows(res)
    raw = json.loads(res.path.read_text())
    glue_figure(figs[0], _ladder_figure(data))
    stale = _stale_best(data, raw.get("autotune") or {})
    glue_figure(figs[1], _sizes_figure(data, stale))
    glue_md("phase5-sizes-text", _stale_text(stale, bool(raw.get("autotune")), data))
    glue_md("phase5-ladder-source", res.provenance)
    glue_md("phase5-ladder-text", _ladder_text(data))
    glue_md("phase5-autotune-text", _autotune_text(raw.get("autotune") or {}, data))
    glue_md("phase5-host-text", _host_text(raw.get("host_us_per_call") or {}))


def _ladder_figure(data):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    for ax, size in zip(axes, (1024, 4096), strict=True):
        labels = [label for _, label, _ in RUNGS]
        values = [data[v][size]["gflops"] / 1e3 for v, _, _ in RUNGS]
        bars = ax.barh(labels, values, color=[c for _, _, c in RUNGS])
        cublas = data["cublas"][size]["gflops"] / 1e3
        ax.axvline(cublas, color="black", ls="--", lw=1.2)
        ax.text(cublas, len(RUNGS) - 0.4, " cuBLAS", va="bottom", ha="right", fontsize=9)
        for bar, (v, _, _) in zip(bars, RUNGS, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {data[v][size]['ratio']:.2f}", va="center", fontsize=8)
        ax.set_title(f"{size}³")
        ax.set_xlabel("TFLOP/s (fp32)")
        ax.invert_yaxis()
        ax.set_xlim(0, cublas * 1.25)
    fig.tight_layout()
    return fig


def _tuned_choice(autotune: dict, size: int) -> str | None:
    """The kernel today's ``gemm.best()`` runs for a size³ product with this tuning table: the winner of the
    nearest tuned size in ratio, a tie going to the larger (solutions/phase5_fast.ipynb, ``best``)."""
    if not autotune:
        return None
    nearest = min(autotune, key=lambda s: (abs(math.log(size * size / int(s) ** 2)), -int(s)))
    return autotune[nearest].get("kernel")


def _stale_best(data, autotune: dict) -> dict[int, tuple[str, str]]:
    """Sizes whose measured ``best_tuned`` ran other tiles than today's ``best()`` would choose: size ->
    (tiles measured, tiles chosen now). Such a point predates a change of the rule, and is marked so."""
    stale = {}
    for size, row in data.get("best_tuned", {}).items():
        now = _tuned_choice(autotune, size)
        if now and row.get("tiles") and row["tiles"] != now:
            stale[size] = (row["tiles"], now)
    return stale


def _stale_text(stale: dict[int, tuple[str, str]], tuned: bool, data: dict | None = None) -> str:
    if not tuned:
        return "*This run did not autotune: the figure has no autotuned line.*"
    if not stale:
        again = sorted((size, row) for size, row in (data or {}).get("best_tuned", {}).items() if row.get("remeasured"))
        if not again:
            return "Every point of the autotuned line ran the tiles that `best()` chooses for its size today."
        told = "; ".join(f"at {size}³ on {row['remeasured']} (`{row['tiles']}`: {row['ratio']:.2f} of cuBLAS in that "
                         f"run)" for size, row in again)
        return ("Every point of the autotuned line ran the tiles that `best()` chooses for its size today; "
                f"measured again after `best()` changed its choice, with the same tuning table: {told} "
                "(`phase5_gemm.py --remeasure-tuned`).")
    parts = "; ".join(f"at {size}³ it ran `{then}`, where `best()` now runs `{now}`"
                      for size, (then, now) in sorted(stale.items()))
    return (f"The hollow points of the autotuned line are stale: {parts} (a tie between two tuned sizes now goes "
            f"to the larger one). They are not measured again yet: `python {SCRIPT}` on a GPU does it.")


def _sizes_figure(data, stale: dict | None = None):
    stale = stale or {}
    fig, ax = plt.subplots(figsize=(9, 3.9))
    sizes = sorted(data["cublas"])
    ax.plot(sizes, [data["cublas"][s]["gflops"] / 1e3 for s in sizes], color="black", ls="--",
            marker="", lw=1.4, label="cuBLAS (cupy.matmul)")
    for variant, label, colour in RUNGS:
        if variant in ("autotuned", "blocktile_1d", "coalesced"):
            continue  # kept out to keep the plot readable; the bars show them
        xs = sorted(data[variant])
        ax.plot(xs, [data[variant][s]["gflops"] / 1e3 for s in xs], color=colour, marker="o",
                ms=3, label=label, ls=":" if variant == "best_tuned" else "-")
        if variant == "best_tuned" and stale:
            old = sorted(s for s in stale if s in data[variant])
            ax.plot(old, [data[variant][s]["gflops"] / 1e3 for s in old], ls="", marker="o", ms=7,
                    markerfacecolor="white", markeredgecolor=colour, label="stale: measured before best() changed")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{s}" for s in sizes])
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s (fp32)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    return fig


def _ladder_text(data) -> str:
    def r(v: str, s: int) -> str:
        return f"{data[v][s]['ratio']:.2f}"

    t = thresholds()
    shared_x = data["shared"][1024]["gflops"] / data["naive"][1024]["gflops"]
    return (
        f"cuBLAS ran at {data['cublas'][4096]['gflops'] / 1e3:.1f} TFLOP/s at 4096³ and "
        f"{data['cublas'][1024]['gflops'] / 1e3:.1f} at 1024³. At 4096³ the rungs reached "
        f"{', '.join(r(v, 4096) for v, _, _ in RUNGS[:9])} of it, rung 1 to rung 9; the winner of "
        f"`autotune()` {r('best_tuned', 4096)}. Rung 3 ran {shared_x:.0f} times as fast as rung 1 at "
        f"1024³ (the grader asks for {t['shared_vs_naive']:g}); rung 5 reached {r('blocktile_2d', 4096)} "
        f"of cuBLAS (the grader asks for {t['blocktile_2d_4096']:g}) and `variant=\"best\"` "
        f"{r('best_tuned', 4096)} (asked: {t['best_4096']:g}). With a transposed operand, the "
        f"autotuned rung reached {r('best_At_tuned', 4096)} (A transposed) and {r('best_Bt_tuned', 4096)} "
        f"(B transposed) of cuBLAS on the same transposed views (asked: {t['best_transposed_4096']:g}).")


def _autotune_text(tuned: dict, data) -> str:
    if not tuned:
        return "*This run did not autotune (`--no-autotune`).*"
    parts = [f"at {size}³ `{e['kernel']}`" for size, e in sorted(tuned.items(), key=lambda i: int(i[0]))]
    small = min(data["best_tuned"])
    return (f"On this GPU `autotune()` chose {' and '.join(parts)}. With those winners "
            f"`variant=\"best\"` reached {data['best_tuned'][1024]['ratio']:.2f} of cuBLAS at 1024³ "
            f"(rung 9's default tiles: {data['double_buffered'][1024]['ratio']:.2f}) and "
            f"{data['best_tuned'][small]['ratio']:.2f} at {small}³, where cuBLAS itself runs at "
            f"{data['cublas'][small]['gflops']:.0f} GFLOP/s: too little work to fill the GPU.")


def _host_text(us: dict) -> str:
    if not us:
        return ""
    return (f"Measured on the host, one call of `gemm(a, b, out)` (`variant=\"best\"`) took "
            f"{us['gemm_best']:.1f} µs; the same kernel launched through `load_kernel` as every "
            f"launcher of the course does, {us['load_kernel_launch']:.1f} µs; through CuPy alone, "
            f"{us['bare_launch']:.1f} µs (median of 5 × 200 calls).")


# --------------------------------------------------------------------------------------
# The Nsight Compute reports
# --------------------------------------------------------------------------------------

NCU_METRICS = [  # (label in the report, what the chapter calls it)
    ("Duration", "duration (ms)"),
    ("Registers Per Thread", "registers a thread"),
    ("Achieved Active Warps Per SM", "warps an SM (achieved)"),
    ("Executed Instructions", "instructions executed"),
    ("Issued Warp Per Scheduler", "instructions a scheduler issues a cycle"),
    ("Compute (SM) Throughput", "compute (SM) throughput (%)"),
    ("L1/TEX Cache Throughput", "L1/shared throughput (%)"),
    ("DRAM Throughput", "DRAM throughput (%)"),
]


def ncu_reports() -> dict[str, Path]:
    found = {}
    for what in ("rung9", "rung5", "cublas"):
        paths = sorted(results_dir().glob(f"phase5_gemm_ncu_{what}-*.txt"))
        if paths:
            found[what] = paths[-1]
    return found


def _ncu_values(path: Path) -> dict[str, str]:
    text = path.read_text()
    values = {}
    for label, _ in NCU_METRICS:
        m = re.search(rf"^\s+{re.escape(label)}\s+(?:\S+\s+)?([\d.,]+)\s*$", text, re.M)
        if m:
            values[label] = m.group(1)
    return values


def phase5_ncu_table() -> None:
    reports = ncu_reports()
    if not reports:
        glue_md("phase5-ncu-table", "*No Nsight Compute report is committed yet: see "
                "`benchmarks/phase5_gemm.py --profile`.*")
        return
    names = {"rung5": "rung 5", "rung9": "rung 9", "cublas": "cuBLAS"}
    cols = [w for w in ("rung5", "rung9", "cublas") if w in reports]
    vals = {w: _ncu_values(reports[w]) for w in cols}
    lines = ["| | " + " | ".join(names[w] for w in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for label, shown in NCU_METRICS:
        lines.append(f"| {shown} | " + " | ".join(vals[w].get(label, "") for w in cols) + " |")
    files = ", ".join(f"`{reports[w].relative_to(REPO_ROOT).as_posix()}`" for w in cols)
    glue_md("phase5-ncu-table", "\n".join(lines) + f"\n\nFrom {files}.")


# --------------------------------------------------------------------------------------
# Why the warps wait: Nsight Compute's stall reasons (benchmarks/phase5_gemm_stalls.py)
# --------------------------------------------------------------------------------------

STALLS_SCRIPT = "benchmarks/phase5_gemm_stalls.py"
STALL_REASONS = {  # ncu's reason -> what the warp waits for (Nsight Compute's Profiling Guide, in our words)
    "selected": "issuing (one cycle per instruction, by definition)",
    "not_selected": "nothing: ready, but the scheduler picked another warp",
    "long_scoreboard": "data from global memory (a load through L1TEX)",
    "short_scoreboard": "the result of a shared-memory load (or another MIO operation)",
    "mio_throttle": "room in the queue of shared-memory instructions",
    "lg_throttle": "room in the queue of global-memory instructions",
    "barrier": "the other warps of its block at `__syncthreads()`",
    "math_pipe_throttle": "a free arithmetic pipe (FMA)",
    "wait": "a fixed-latency dependency (the result of an arithmetic instruction)",
    "dispatch_stall": "the dispatcher, which held back a selected instruction",
    "no_instruction": "its next instruction (instruction cache)",
    "branch_resolving": "a branch target",
    "drain": "its stores to leave, at exit",
    "membar": "a memory barrier",
    "imc_miss": "the constant cache",
    "tex_throttle": "the texture unit",
    "sleeping": "a sleep or nanosleep",
    "misc": "something else",
}
STALL_COLOURS = [GREEN, GREY, VERMILLION, ORANGE, PURPLE, BLUE, "#56B4E9", "#F0E442"]
STALL_ORDER = ("rung5", "rung9", "cublas")


def _stall_rows(res) -> list[dict]:
    rows = {r["target"]: r for r in res.rows if r.get("kind") == "stalls"}
    for target, row in rows.items():
        if not isinstance(row.get("stalls"), dict) or not row["stalls"]:
            raise ValueError(f"{res.path}: the row of {target!r} has no stall reasons")
    return [rows[t] for t in STALL_ORDER if t in rows] + [r for t, r in rows.items() if t not in STALL_ORDER]


def _shown_reasons(rows: list[dict], most: int = 7) -> list[str]:
    """The reasons worth a colour: the largest over the kernels, the rest summed as 'other'."""
    largest = {}
    for row in rows:
        for reason, value in row["stalls"].items():
            largest[reason] = max(largest.get(reason, 0.0), value)
    return sorted(largest, key=lambda r: -largest[r])[:most]


def phase5_stalls() -> None:
    """Glue the stall-reason figure, its table and the sentences that read them."""
    res = latest("phase5_gemm_stalls")
    if res is None:
        glue_figure("fig-phase5-stalls", missing_figure("phase5_gemm_stalls", "the warp-stall reasons",
                                                        STALLS_SCRIPT, "a GPU with Nsight Compute"))
        for name in ("phase5-stalls-table", "phase5-stalls-text"):
            glue_md(name, missing_md("phase5_gemm_stalls", STALLS_SCRIPT, "a GPU with Nsight Compute"))
        return
    rows = _stall_rows(res)
    shown = _shown_reasons(rows)
    glue_figure("fig-phase5-stalls", _stalls_figure(rows, shown))
    glue_md("phase5-stalls-table", _stalls_table(rows, shown) + f"\n\n{res.provenance}")
    glue_md("phase5-stalls-text", _stalls_text(rows))


def _stalls_figure(rows: list[dict], shown: list[str]):
    fig, ax = plt.subplots(figsize=(9, 0.75 * len(rows) + 1.4))
    labels = [r["label"] for r in rows]
    left = [0.0] * len(rows)
    for reason, colour in zip([*shown, "other"], STALL_COLOURS + [GREY] * 8, strict=False):
        widths = [sum(v for k, v in r["stalls"].items() if k not in shown) if reason == "other"
                  else r["stalls"].get(reason, 0.0) for r in rows]
        ax.barh(labels, widths, left=left, color=colour, label=reason.replace("_", " "),
                hatch="//" if reason == "other" else None, edgecolor="white", lw=0.5)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.1f}", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.12)
    ax.set_xlabel("cycles between two instructions of a warp, by what it waits for")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def _stalls_table(rows: list[dict], shown: list[str]) -> str:
    lines = ["| a warp waits for | " + " | ".join(r["label"] for r in rows) + " |",
             "|---|" + "---:|" * len(rows)]
    for reason in shown:
        lines.append(f"| {STALL_REASONS.get(reason, reason)} (`{reason}`) | "
                     + " | ".join(f"{r['stalls'].get(reason, 0.0):.2f}" for r in rows) + " |")
    lines.append("| everything else | " + " | ".join(
        f"{sum(v for k, v in r['stalls'].items() if k not in shown):.2f}" for r in rows) + " |")
    lines.append("| **cycles between two instructions** | " + " | ".join(f"**{r['stall_sum']:.2f}**" for r in rows)
                 + " |")
    if all("issued_per_scheduler_cycle" in r for r in rows):
        lines.append("| instructions a scheduler issues a cycle | "
                     + " | ".join(f"{r['issued_per_scheduler_cycle']:.2f}" for r in rows) + " |")
    if all("active_warps_per_scheduler" in r for r in rows):
        lines.append("| warps a scheduler holds | "
                     + " | ".join(f"{r['active_warps_per_scheduler']:.2f}" for r in rows) + " |")
    return "\n".join(lines)


def _stalls_text(rows: list[dict]) -> str:
    """What the reasons say, read off the rows: each kernel's cycles between instructions and its longest waits,
    where rung 9 and cuBLAS differ most, what double buffering did to the wait on global memory, and the issue
    rate that warps and waits allow."""
    by = {r["target"]: r for r in rows}
    ready = ("selected", "not_selected")  # issuing, or ready and passed over: not a wait for anything

    def waits(row: dict, n: int = 2) -> str:
        top = [(k, v) for k, v in row["stalls"].items() if k not in ready][:n]
        return " and ".join(f"{STALL_REASONS.get(k, k).split(' (')[0]} (`{k}`, {v:.2f})" for k, v in top)

    text = " ".join(
        f"A warp of {r['label']} issues an instruction every {r['stall_sum']:.2f} cycles: one to issue, "
        f"{r['stalls'].get('not_selected', 0.0):.2f} ready while another warp issued, and its longest waits are for "
        f"{waits(r)}." for r in rows)
    if {"rung9", "cublas"} <= set(by):
        r9, cb = by["rung9"]["stalls"], by["cublas"]["stalls"]
        diff = sorted((k for k in set(r9) | set(cb) if k not in ready), key=lambda k: -(r9.get(k, 0.0) - cb.get(k, 0.0)))
        worse = [k for k in diff[:2] if r9.get(k, 0.0) - cb.get(k, 0.0) >= 0.05]
        if worse:
            text += (" Rung 9 waits longer than cuBLAS on " + " and on ".join(
                f"`{k}` ({r9.get(k, 0.0):.2f} against {cb.get(k, 0.0):.2f} cycles)" for k in worse) + ".")
    if {"rung5", "rung9"} <= set(by):
        before, after = (by[t]["stalls"].get("long_scoreboard", 0.0) for t in ("rung5", "rung9"))
        text += (f" The wait for global memory (`long_scoreboard`) went from {before:.2f} cycles an instruction in "
                 f"rung 5 to {after:.2f} in rung 9, whose loads of the next tile run during the arithmetic.")
    rated = [r for r in rows if {"active_warps_per_scheduler", "issued_per_scheduler_cycle"} <= set(r)]
    if rated:
        text += (" Warps and waits set the issue rate: " + "; ".join(
            f"{r['label']} keeps {r['active_warps_per_scheduler']:.2f} warps on a scheduler, each ready once every "
            f"{r['stall_sum']:.2f} cycles, which allows an issue on {r['active_warps_per_scheduler'] / r['stall_sum']:.2f} "
            f"of its cycles (measured: {r['issued_per_scheduler_cycle']:.2f})" for r in rated) + ".")
    return text


# --------------------------------------------------------------------------------------
# The sweep behind rung 9
# --------------------------------------------------------------------------------------

def phase5_sweep_text() -> None:
    """What the candidates of benchmarks/phase5_gemm_sweep.py measured at 4096^3."""
    res = latest("phase5_gemm_sweep")
    if res is None:
        glue_md("phase5-sweep-text", missing_md("phase5_gemm_sweep",
                                                "benchmarks/phase5_gemm_sweep.py"))
        return
    at = {tuple(r["config"]): r for r in res.rows if r.get("size") == 4096 and "config" in r}
    ladder = {r["kernel"]: r for r in res.rows if r.get("ladder")}

    def ratio(config: tuple) -> str:
        return f"{at[config]['ratio']:.2f}" if config in at else "?"

    def registers(config: tuple) -> str:
        return str(at[config]["registers"]) if config in at and "registers" in at[config] else "?"

    base = (128, 128, 8, 32, 64, 0, 0)
    text = (
        f"Rung 9 as it stood ran at {ratio(base + (2, 0, 0))} of cuBLAS at 4096³ in that run. "
        f"Double-buffering the fragments in registers as well made it slower "
        f"({ratio(base + (2, 1, 0))}), and slower still with the 128-register cap lifted too "
        f"({ratio(base + (1, 1, 0))}: {registers(base + (1, 1, 0))} registers, one block an SM instead of two); "
        f"lifting the cap alone changed nothing (the kernel compiled to {registers(base + (1, 0, 0))} "
        f"registers and ran {ratio(base + (1, 0, 0))}); larger tiles of 128 × 256 "
        f"with 64 × 64 warp tiles reached {ratio((128, 256, 8, 64, 64, 0, 0, 1, 0, 0))}. "
        f"The one change that paid was the unchecked path for interior tiles, once it was "
        f"compiled as its own copy of the loop (the sweep's run-time switch inside one loop, "
        f"{ratio(base + (2, 0, 1))}, did not)."
    )
    if {"blocktile_2d", "sweep5_rolled", "sweep5_bounded"} <= set(ladder):
        text += (
            f" The same run measured rung 5 three ways: with its loops rolled, "
            f"{ladder['sweep5_rolled']['ratio']:.2f}; unrolled as in the lab, "
            f"{ladder['blocktile_2d']['ratio']:.2f}; unrolled and held to 128 registers with "
            f"`__launch_bounds__(256, 2)`, {ladder['sweep5_bounded']['ratio']:.2f}.")
    glue_md("phase5-sweep-text", text + f" {res.provenance}")


# --------------------------------------------------------------------------------------
# variant="best" before autotuning: tiles by size, split-K (benchmarks/phase5_gemm_defaults.py)
# --------------------------------------------------------------------------------------

OLD_DEFAULT = [128, 128, 8, 32, 64]  # rung 9's DEFAULT_CONFIG, what `best` ran untuned before


def phase5_defaults_text() -> None:
    """Glue a table: per product, untuned `best` then (rung 9's default tiles, no split) and now, against cuBLAS."""
    res = latest("phase5_gemm_defaults")
    if res is None:
        glue_md("phase5-defaults-text", missing_md("phase5_gemm_defaults", "benchmarks/phase5_gemm_defaults.py"))
        return
    lines = ["| product | cuBLAS | default tiles, no split | `best` untuned | its tiles × chunks of K |",
             "|---|---:|---:|---:|---|"]
    for row in (r for r in res.rows if r.get("kind") == "best"):
        same = [r for r in res.rows if r.get("kind") == "trial" and r["config"] == OLD_DEFAULT
                and r["splits"] == 1 and all(r[k] == row[k] for k in ("M", "N", "K", "transpose_a", "transpose_b"))]
        op_a, op_b = ("Aᵀ" if row["transpose_a"] else "A"), ("Bᵀ" if row["transpose_b"] else "B")
        old = f"{same[0]['ratio']:.2f}×" if same else "–"
        tiles = "×".join(str(v) for v in row["config"][:2])
        lines.append(f"| {row['M']} × {row['N']} × {row['K']} ({op_a}·{op_b}) | {row['cublas_seconds'] * 1e6:.1f} µs "
                     f"| {old} | **{row['ratio']:.2f}×** | {tiles} × {row['splits']} |")
    glue_md("phase5-defaults-text", "\n".join(lines) + f"\n\nSpeed as a fraction of cuBLAS's (higher is faster). "
            f"{res.provenance}")
