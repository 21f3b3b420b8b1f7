"""Figures for the book, drawn at build time.

Measured figures read the committed benchmark results in ``benchmarks/results/``
(``<benchmark>-<device-slug>.json``, see ARCHITECTURE.md). When several devices have
results, the newest file (by its ``date`` field, then by name) is used, and every figure
says which device, date and file it shows. No measured number is typed in the book:
the sentences that quote numbers are generated here from the same file (``glue``).

Diagrams (thread indexing, grid-stride loops, copy paths) are drawn with matplotlib so
that the repository holds no binary images.

The chapters call these functions from ``{code-cell}`` cells tagged ``remove-input``;
they run with ``book/`` as the working directory, but nothing here depends on it.
Set ``MINITORCH_BENCH_RESULTS`` to another folder to preview the figures with other
result files.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO_ROOT / "benchmarks" / "results"

# Colours (colour-blind safe, Okabe-Ito) and line styles used consistently across figures.
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, GREY = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#999999")


# --------------------------------------------------------------------------------------
# Notebook set-up and glue
# --------------------------------------------------------------------------------------

def setup() -> None:
    """Call once per chapter: vector figures, deterministic SVG ids, consistent style."""
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg", metadata={"Date": None})  # reproducible SVG
    except ImportError:  # outside IPython
        pass
    plt.rcParams.update({
        "svg.hashsalt": "minitorch-cuda",
        "figure.dpi": 100,
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.frameon": False,
    })


def glue_figure(name: str, fig) -> None:
    """Glue a figure for ``{glue:figure}`` and close it (so it is not shown twice)."""
    from myst_nb import glue

    glue(name, fig, display=False)
    plt.close(fig)


def glue_md(name: str, text: str) -> None:
    """Glue a piece of Markdown for ``{glue:md}`` (inline role or block directive)."""
    from IPython.display import Markdown
    from myst_nb import glue

    glue(name, Markdown(text), display=False)


# --------------------------------------------------------------------------------------
# Committed results
# --------------------------------------------------------------------------------------

@dataclass
class Results:
    benchmark: str
    device: str
    date: str
    software: dict
    rows: list
    path: Path

    @property
    def provenance(self) -> str:
        try:
            shown = self.path.relative_to(REPO_ROOT)
        except ValueError:
            shown = self.path
        return f"Measured on {self.device}, {self.date} (`{shown.as_posix()}`)."


def results_dir() -> Path:
    return Path(os.environ.get("MINITORCH_BENCH_RESULTS", DEFAULT_RESULTS))


def _load(path: Path, benchmark: str) -> Results:
    data = json.loads(path.read_text())
    for key in ("benchmark", "device", "date", "results"):
        if key not in data:
            raise ValueError(f"{path}: missing key {key!r}")
    if data["benchmark"] != benchmark:
        raise ValueError(f"{path}: benchmark is {data['benchmark']!r}, expected {benchmark!r}")
    if not isinstance(data["results"], list) or not data["results"]:
        raise ValueError(f"{path}: 'results' must be a non-empty list")
    return Results(benchmark, str(data["device"]), str(data["date"]),
                   dict(data.get("software") or {}), data["results"], path)


def every_card(benchmark: str) -> list[Results]:
    """Every ``<benchmark>-*.json`` in the results folder (one a GPU), in file-name order."""
    return [_load(p, benchmark) for p in sorted(results_dir().glob(f"{benchmark}-*.json"))]


def latest(benchmark: str) -> Results | None:
    """The newest ``<benchmark>-*.json`` in the results folder, or None if there is none."""
    loaded = every_card(benchmark)
    if not loaded:
        return None
    return max(loaded, key=lambda r: (r.date, r.path.name))


def _series(rows, keys: dict, required=("bytes", "gbps", "seconds")) -> dict[int, dict]:
    """Rows matching ``keys``, as {bytes: {"gbps": median, "seconds": median}}."""
    acc: dict[int, list] = {}
    for row in rows:
        if all(row.get(k) == v for k, v in keys.items()):
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"result row {row} lacks {missing}")
            acc.setdefault(int(row["bytes"]), []).append(row)
    return {
        b: {k: statistics.median(float(r[k]) for r in rs) for k in required if k != "bytes"}
        for b, rs in sorted(acc.items())
    }


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------

def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def fmt_gbps(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _bytes_axis(ax, sizes, max_ticks: int = 6) -> None:
    ax.set_xscale("log", base=2)
    lo, hi = min(sizes), max(sizes)
    step = 4
    while True:
        ticks, t = [], 1
        while t <= hi:
            if t >= lo:
                ticks.append(t)
            t *= step
        if len(ticks) <= max_ticks:
            break
        step *= 4
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([fmt_bytes(t) for t in ticks], rotation=0)
    ax.set_xlabel("transfer size")


# Which script writes which results file.
SCRIPTS = {"phase1_transfer": "phase1_memory.py", "phase1_kernels": "phase1_memory.py",
           "phase1_alloc": "phase1_memory.py"}


def missing_figure(benchmark: str, what: str, script: str, where: str = "a GPU"):
    """What a figure shows while no result of `benchmark` is committed: which script to run, and where."""
    fig, ax = plt.subplots(figsize=(7, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.5,
            f"No committed measurement of {what} yet.\n"
            f"Run {script} on {where}; it writes benchmarks/results/{benchmark}-<device>.json.",
            ha="center", va="center", fontsize=10, color=VERMILLION)
    return fig


def missing_md(benchmark: str, script: str, where: str = "a GPU") -> str:
    return (f"*No measurement is committed for this yet: run `python {script}` on {where} and commit "
            f"`benchmarks/results/{benchmark}-<device>.json`.*")


def _placeholder(benchmark: str, what: str):
    return missing_figure(benchmark, what, f"benchmarks/{SCRIPTS[benchmark]}")


def _missing_md(benchmark: str) -> str:
    return missing_md(benchmark, f"benchmarks/{SCRIPTS[benchmark]}")


# --------------------------------------------------------------------------------------
# Phase 1: allocation, cudaMalloc/cudaFree vs CuPy's pool
# --------------------------------------------------------------------------------------

_ALLOC_STYLE = {"cudaMalloc": dict(color=VERMILLION, marker="o", label="cudaMalloc + cudaFree"),
                "cupy_pool": dict(color=BLUE, marker="s", label="CuPy memory pool (warm)")}


def phase1_alloc(fig_name: str = "fig-phase1-alloc",
                 text_name: str = "phase1-alloc-text",
                 caption_name: str = "phase1-alloc-source") -> None:
    """Glue the allocate-and-free time figure, its provenance line and a summary sentence."""
    res = latest("phase1_alloc")
    if res is None:
        glue_figure(fig_name, _placeholder("phase1_alloc", "allocation times"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase1_alloc"))
        return
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    data, sizes = {}, []
    for allocator, style in _ALLOC_STYLE.items():
        s = _series(res.rows, {"allocator": allocator}, required=("bytes", "seconds"))
        data[allocator] = s
        if s:
            xs = list(s)
            sizes += xs
            ax.plot(xs, [s[b]["seconds"] * 1e6 for b in xs], ms=4, **style)
    if not data.get("cudaMalloc") or not data.get("cupy_pool"):
        raise ValueError(f"{res.path}: needs rows for cudaMalloc and cupy_pool")
    _bytes_axis(ax, sizes)
    ax.set_xlabel("allocation size")
    ax.set_yscale("log")
    ax.set_ylabel("allocate + free (µs, log scale)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _alloc_text(data["cudaMalloc"], data["cupy_pool"]))


def _alloc_text(raw, pool) -> str:
    common = sorted(set(raw) & set(pool))
    big = common[-1]
    slow = [b for b in common if raw[b]["seconds"] >= 3 * pool[b]["seconds"]]
    text = (f"Allocating and freeing {fmt_bytes(big)} took {fmt_time(raw[big]['seconds'])} with "
            f"`cudaMalloc` and `cudaFree`, and {fmt_time(pool[big]['seconds'])} from CuPy's pool")
    first = slow[0] if slow else None
    if first is not None and slow == common[common.index(first):]:
        text += (f"; from {fmt_bytes(first)} up, the raw calls took at least "
                 f"{min(raw[b]['seconds'] / pool[b]['seconds'] for b in slow):.0f}× as long as "
                 f"the pool.")
        below = common[:common.index(first)]
        if below:
            times = [raw[b]["seconds"] for b in below] + [pool[b]["seconds"] for b in below]
            text += (f" Below {fmt_bytes(first)}, both took between {fmt_time(min(times))} and "
                     f"{fmt_time(max(times))}.")
    else:
        text += "."
    return text + (" These times were measured with nothing else running on the GPU, so they do "
                   "not include the wait for queued kernels that `cudaFree` adds in a real program.")


# --------------------------------------------------------------------------------------
# Phase 1: host <-> device transfers
# --------------------------------------------------------------------------------------

_MEMORY_STYLE = {"pinned": dict(color=BLUE, marker="o"),
                 "pageable": dict(color=ORANGE, marker="s")}


def phase1_transfer(fig_name: str = "fig-phase1-transfer",
                    text_name: str = "phase1-transfer-text",
                    caption_name: str = "phase1-transfer-source") -> None:
    """Glue the H2D/D2H bandwidth figure, its provenance line and a summary paragraph."""
    res = latest("phase1_transfer")
    if res is None:
        glue_figure(fig_name, _placeholder("phase1_transfer", "host-device transfers"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase1_transfer"))
        return

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    data = {}
    for ax, direction, title in zip(axes, ("h2d", "d2h"),
                                    ("host → device (H2D)", "device → host (D2H)"), strict=True):
        sizes = []
        for memory in ("pinned", "pageable"):
            s = _series(res.rows, {"direction": direction, "memory": memory})
            data[direction, memory] = s
            if s:
                xs = list(s)
                sizes += xs
                ax.plot(xs, [s[b]["gbps"] for b in xs], label=memory, ms=4,
                        **_MEMORY_STYLE[memory])
        if not sizes:
            raise ValueError(f"{res.path}: no rows with direction={direction!r}")
        _bytes_axis(ax, sizes)
        ax.set_title(title)
    axes[0].set_ylabel("bandwidth (GB/s)")
    axes[0].set_ylim(bottom=0)
    axes[0].legend(title="host memory", loc="upper left")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _transfer_text(data))


def _transfer_text(data) -> str:
    parts = []
    for direction, name in (("h2d", "Host-to-device"), ("d2h", "Device-to-host")):
        pinned, pageable = data.get((direction, "pinned")), data.get((direction, "pageable"))
        if not pinned or not pageable:
            continue
        p = max(v["gbps"] for v in pinned.values())
        q = max(v["gbps"] for v in pageable.values())
        if p >= 1.1 * q:
            cmp = f"pinned {p / q:.1f}× faster"
        elif q >= 1.1 * p:
            cmp = f"pageable {q / p:.1f}× faster"
        else:
            cmp = "within 10% of each other"
        parts.append(f"{name} copies reached {fmt_gbps(p)} GB/s from pinned memory and "
                     f"{fmt_gbps(q)} GB/s from pageable memory ({cmp}).")
    if not parts:
        raise ValueError("phase1_transfer results lack pinned/pageable pairs")
    pinned = data.get(("h2d", "pinned")) or data.get(("d2h", "pinned"))
    small = min(pinned)
    best = max(v["gbps"] for v in pinned.values())
    parts.append(
        f"The smallest pinned copy, {fmt_bytes(small)}, took {fmt_time(pinned[small]['seconds'])}: "
        f"an effective {fmt_gbps(pinned[small]['gbps'])} GB/s, "
        f"{best / pinned[small]['gbps']:.0f}× less than the best. At that size the time goes to "
        f"the fixed cost of a copy, not to the link."
    )
    return " ".join(parts)


# --------------------------------------------------------------------------------------
# Phase 1: fill / copy kernels vs CuPy
# --------------------------------------------------------------------------------------

_KERNEL_STYLE = {
    "fill": dict(color=BLUE, marker="o", ls="-", label="fill (reference memory.cu)"),
    "cupy_fill": dict(color=BLUE, marker="", ls="--", label="CuPy fill"),
    "copy": dict(color=GREEN, marker="s", ls="-", label="copy (reference memory.cu)"),
    "cupy_copy": dict(color=GREEN, marker="", ls="--", label="CuPy copy"),
}


def phase1_kernels(fig_name: str = "fig-phase1-kernels",
                   text_name: str = "phase1-kernels-text",
                   caption_name: str = "phase1-kernels-source") -> None:
    """Glue the fill/copy bandwidth figure, its provenance line and a summary paragraph."""
    res = latest("phase1_kernels")
    if res is None:
        glue_figure(fig_name, _placeholder("phase1_kernels", "the fill/copy kernels"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase1_kernels"))
        return

    fig, ax = plt.subplots(figsize=(9, 3.6))
    data, sizes = {}, []
    for kernel, style in _KERNEL_STYLE.items():
        s = _series(res.rows, {"kernel": kernel})
        data[kernel] = s
        if s:
            xs = list(s)
            sizes += xs
            ax.plot(xs, [s[b]["gbps"] for b in xs], ms=4, **style)
    if not sizes:
        raise ValueError(f"{res.path}: no kernel rows")
    best_kernel, best = max(((k, v["gbps"]) for k, s in data.items() for v in s.values()),
                            key=lambda kv: kv[1])
    ax.axhline(best, color=GREY, lw=1, ls=":")
    ax.annotate(f"best measured: {fmt_gbps(best)} GB/s", xy=(min(sizes), best),
                xytext=(0, 4), textcoords="offset points", color="#555555", fontsize=9)
    _bytes_axis(ax, sizes, max_ticks=9)
    ax.set_xlabel("bytes moved per launch (read + written)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_ylim(0, best * 1.15)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, _kernels_text(data))


def _ratio_text(mine: float, theirs: float) -> str:
    r = mine / theirs
    if r >= 1.05:
        return f"{r:.1f}× the bandwidth of"
    return f"{100 * r:.0f}% of the bandwidth of"


def _kernels_text(data) -> str:
    parts = []
    for mine, theirs in (("fill", "cupy_fill"), ("copy", "cupy_copy")):
        a, b = data.get(mine), data.get(theirs)
        if not a or not b:
            continue
        common = sorted(set(a) & set(b))
        big, small = common[-1], common[0]
        parts.append(
            f"At {fmt_bytes(big)}, `{mine}` reached {fmt_gbps(a[big]['gbps'])} GB/s, "
            f"{_ratio_text(a[big]['gbps'], b[big]['gbps'])} CuPy's own {mine} "
            f"({fmt_gbps(b[big]['gbps'])} GB/s); at {fmt_bytes(small)} it took "
            f"{fmt_time(a[small]['seconds'])}, CuPy's {fmt_time(b[small]['seconds'])}."
        )
    if not parts:
        raise ValueError("phase1_kernels results lack kernel/CuPy pairs")
    copy = data.get("copy") or data.get("cupy_copy")
    sizes = list(copy)
    peak = max(v["gbps"] for v in copy.values())
    half = next(b for b in sizes if copy[b]["gbps"] >= peak / 2)
    flat = []  # the small sizes whose time stays within 2x of the smallest size's time
    for b in sizes:
        if copy[b]["seconds"] > 2 * copy[sizes[0]]["seconds"]:
            break
        flat.append(b)
    text = f"`copy` reached half of its best bandwidth only from {fmt_bytes(half)} on."
    if len(flat) >= 3:
        times = [copy[b]["seconds"] for b in flat]
        text += (f" From {fmt_bytes(flat[0])} to {fmt_bytes(flat[-1])} its time hardly changed "
                 f"({fmt_time(min(times))} to {fmt_time(max(times))}): at those sizes the fixed "
                 f"cost of a launch, not memory, sets the time.")
    parts.append(text)
    return " ".join(parts)


def phase1_grid(fig_name: str = "fig-phase1-grid", text_name: str = "phase1-grid-text",
                caption_name: str = "phase1-grid-source") -> None:
    """Glue the copy-bandwidth-against-grid-size figure, its provenance line and a summary sentence."""
    res = latest("phase1_grid")
    if res is None:
        glue_figure(fig_name, _placeholder("phase1_grid", "copy bandwidth against grid size"))
        glue_md(caption_name, "")
        glue_md(text_name, _missing_md("phase1_grid"))
        return
    rows = sorted((r for r in res.rows if r["kernel"] == "copy"), key=lambda r: r["blocks"])
    [reference] = [r for r in res.rows if r["kernel"] == "cupy_copy"]
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ax.plot([r["blocks"] for r in rows], [r["gbps"] for r in rows], marker="o", ms=4, color="#0072B2",
            label="copy kernel, 256 threads a block")
    ax.axhline(reference["gbps"], color="#D55E00", ls="--", lw=1, label="cupy.copyto")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("blocks in the grid (log scale)")
    ax.set_ylabel("GB/s (read + written)")
    ax.set_ylim(0, max(reference["gbps"], max(r["gbps"] for r in rows)) * 1.15)
    ax.legend(loc="lower center")
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    best = max(rows, key=lambda r: r["gbps"])
    one_each = [r for r in rows if abs(r["elements_per_thread"] - 1) < 1e-9]
    text = (f"With one block per multiprocessor ({rows[0]['blocks']} blocks) the copy reached "
            f"{fmt_gbps(rows[0]['gbps'])} GB/s; the best grid, {best['blocks']} blocks "
            f"({best['elements_per_thread']:g} elements a thread), reached {fmt_gbps(best['gbps'])} GB/s, "
            f"against {fmt_gbps(reference['gbps'])} GB/s for `cupy.copyto`.")
    if one_each:
        text += (f" With one element a thread ({one_each[0]['blocks']} blocks) it fell back to "
                 f"{fmt_gbps(one_each[0]['gbps'])} GB/s.")
    glue_md(text_name, text)


def phase1_link_vs_memory(text_name: str = "phase1-link-vs-memory") -> None:
    """Glue one sentence comparing the host-device link with device memory, both measured."""
    link, mem = latest("phase1_transfer"), latest("phase1_kernels")
    if link is None or mem is None:
        glue_md(text_name, "")
        return
    best_link = max(float(r["gbps"]) for r in link.rows if r.get("memory") == "pinned")
    best_mem = max(float(r["gbps"]) for r in mem.rows
                   if r.get("kernel") in ("copy", "cupy_copy", "fill", "cupy_fill"))
    same = " on the same GPU" if link.device == mem.device else ""
    glue_md(text_name,
            f"On {link.device}, the fastest copy over the link measured {fmt_gbps(best_link)} GB/s, "
            f"while kernels reading and writing device memory{same} reached "
            f"{fmt_gbps(best_mem)} GB/s, {best_mem / best_link:.0f}× more "
            f"({{numref}}`fig-phase1-transfer`, {{numref}}`fig-phase1-kernels`).")


# --------------------------------------------------------------------------------------
# Diagrams
# --------------------------------------------------------------------------------------

_BLOCK_COLOURS = [BLUE, ORANGE, GREEN, PURPLE, VERMILLION]


def _cell(ax, x, y, w=1.0, h=1.0, fc="white", ec="black", text="", tc="black", fs=8,
          hatch=None, alpha=1.0, lw=0.8):
    ax.add_patch(Rectangle((x, y), w, h, fc=fc, ec=ec, hatch=hatch, alpha=alpha, lw=lw))
    if text != "":
        ax.text(x + w / 2, y + h / 2, str(text), ha="center", va="center", fontsize=fs,
                color=tc)


def diagram_thread_indexing(n: int = 21, block: int = 8):
    """One thread per element: blocks of ``block`` threads, global index, bounds check."""
    grid = -(-n // block)
    total = grid * block
    fig, ax = plt.subplots(figsize=(9, 2.9))
    ax.set_xlim(-2.6, total + 0.5)
    ax.set_ylim(-2.4, 4.2)
    ax.axis("off")
    for b in range(grid):
        c = _BLOCK_COLOURS[b % len(_BLOCK_COLOURS)]
        x0 = b * block
        ax.add_patch(Rectangle((x0 + 0.05, 2.0), block - 0.1, 1.0, fc=c, alpha=0.18, ec=c))
        ax.text(x0 + block / 2, 3.45, f"blockIdx.x = {b}", ha="center", fontsize=9,
                color=c, weight="bold")
        for t in range(block):
            _cell(ax, x0 + t + 0.1, 2.1, 0.8, 0.8, fc="white", ec=c, text=t, fs=8)
            i = x0 + t
            if i < n:
                _cell(ax, i, 0, fc=c, ec="black", alpha=0.55, text=i, fs=8)
            else:
                _cell(ax, i + 0.1, 0.1, 0.8, 0.8, fc="white", ec=GREY, hatch="///", text="",
                      lw=0.6)
            ax.annotate("", xy=(i + 0.5, 1.0), xytext=(i + 0.5, 2.1),
                        arrowprops=dict(arrowstyle="-|>", color=c if i < n else GREY,
                                        lw=0.7, shrinkA=0, shrinkB=1))
    ax.text(-0.3, 2.5, "threadIdx.x", ha="right", va="center", fontsize=9)
    ax.text(-0.3, 0.5, f"out[i], n = {n}", ha="right", va="center", fontsize=9)
    ax.text(total, -0.25, "i ≥ n: no element, the thread returns",
            ha="right", va="top", fontsize=8, color="#555555")
    ax.text(0, -1.5, f"i = blockIdx.x * blockDim.x + threadIdx.x     "
            f"(blockDim.x = {block}, gridDim.x = ⌈{n}/{block}⌉ = {grid})",
            ha="left", va="center", fontsize=9, family="monospace")
    fig.tight_layout()
    return fig


def diagram_grid_stride(n: int = 27, block: int = 4, grid: int = 2):
    """A fixed grid of grid*block threads sweeping an array of n elements, stride by stride."""
    stride = grid * block
    passes = -(-n // stride)
    fig, ax = plt.subplots(figsize=(9.5, 2.4))
    ax.set_xlim(-0.3, n + 0.3)
    ax.set_ylim(-2.4, 2.7)
    ax.axis("off")
    for i in range(n):
        t = i % stride
        b, tt = divmod(t, block)
        c = _BLOCK_COLOURS[b % len(_BLOCK_COLOURS)]
        _cell(ax, i, 0, fc=c, alpha=0.25 + 0.45 * (tt / max(1, block - 1)), text=i, fs=8)
        ax.text(i + 0.5, -0.3, f"b{b}\nt{tt}", ha="center", va="top", fontsize=6.5,
                color=c, linespacing=0.9)
    for p in range(passes):
        x0, x1 = p * stride, min(n, (p + 1) * stride)
        ax.plot([x0 + 0.1, x0 + 0.1, x1 - 0.1, x1 - 0.1], [-1.05, -1.2, -1.2, -1.05],
                color="black", lw=0.8)
        ax.text((x0 + x1) / 2, -1.3, f"pass {p}", ha="center", va="top", fontsize=8)
    # the path of one thread: block 0, thread 1
    i = 1
    while i + stride < n:
        ax.add_patch(FancyArrowPatch((i + 0.5, 1.0), (i + stride + 0.5, 1.0),
                                     connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                     mutation_scale=9, color="black", lw=0.8))
        i += stride
    ax.text(0, 2.35, f"gridDim.x = {grid}, blockDim.x = {block}, stride = gridDim.x * "
            f"blockDim.x = {stride}, n = {n}", fontsize=9, family="monospace", ha="left")
    ax.text(0, -2.05, "under each element: the block (b) and thread (t) that write it; "
            "arrows: the elements visited by thread 1 of block 0 "
            "(i, i + stride, i + 2·stride, … while i < n)", fontsize=8, ha="left",
            color="#333333")
    fig.tight_layout()
    return fig


def diagram_copy_paths():
    """Pageable vs pinned host-to-device copy: staging buffer and DMA."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.9))
    for ax, pinned in zip(axes, (False, True), strict=True):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 6)
        ax.axis("off")
        # host side
        ax.add_patch(Rectangle((0.2, 0.3), 4.4, 5.0, fc="#f2f2f2", ec=GREY))
        ax.text(2.4, 5.55, "host (CPU, DRAM)", ha="center", fontsize=9, weight="bold")
        ax.add_patch(Rectangle((6.0, 0.3), 3.8, 5.0, fc="#eaf2fa", ec=BLUE))
        ax.text(7.9, 5.55, "device (GPU, HBM)", ha="center", fontsize=9, weight="bold")
        _cell(ax, 6.6, 2.0, 2.6, 1.2, fc="white", ec=BLUE, text="device array", fs=9)
        if pinned:
            _cell(ax, 0.8, 2.0, 3.2, 1.2, fc="#dbeedb", ec=GREEN, text="pinned array",
                  fs=9)
            ax.annotate("", xy=(6.6, 2.6), xytext=(4.0, 2.6),
                        arrowprops=dict(arrowstyle="-|>", color=GREEN, lw=2))
            ax.text(5.3, 2.85, "DMA", ha="center", fontsize=9, color=GREEN)
            ax.set_title("pinned: one DMA transfer", fontsize=10)
        else:
            _cell(ax, 0.8, 3.6, 3.2, 1.1, fc="white", ec=ORANGE, text="pageable array",
                  fs=9)
            _cell(ax, 0.8, 0.9, 3.2, 1.1, fc="#dbeedb", ec=GREEN,
                  text="pinned staging buffer", fs=8.5)
            ax.annotate("", xy=(2.4, 2.0), xytext=(2.4, 3.6),
                        arrowprops=dict(arrowstyle="-|>", color=ORANGE, lw=2))
            ax.text(2.55, 2.8, "CPU copy,\nchunk by chunk", fontsize=8, va="center",
                    color=ORANGE)
            ax.annotate("", xy=(6.6, 2.4), xytext=(4.0, 1.45),
                        arrowprops=dict(arrowstyle="-|>", color=GREEN, lw=2))
            ax.text(5.25, 2.35, "DMA", ha="center", fontsize=9, color=GREEN)
            ax.set_title("pageable: CPU copy to a staging buffer, then DMA", fontsize=10)
        ax.text(5.3, 0.05, "PCIe or NVLink-C2C", ha="center", fontsize=7.5, color="#555555")
    fig.tight_layout()
    return fig
