"""Figures of the appendix 'Where a training step's time goes' (benchmarks/overhead.py)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from figures import BLUE, GREY, ORANGE, VERMILLION, _load, glue_figure, glue_md, latest, missing_figure, results_dir

SCRIPT = "benchmarks/overhead.py"
OPS = [("raw_cupy", "raw CuPy launch"), ("kernel_call", "Kernel.__call__"), ("load_and_call", "load_kernel + call"),
       ("ops_add_unplanned", "ops.add, no plan"), ("ops_add", "ops.add"), ("tensor_add", "a + b (autograd)")]


def _by_what(res, kind: str) -> dict:
    return {r["what"]: r for r in res.rows if r["kind"] == kind}


def _spread(device: str) -> str:
    """A sentence on how much the per-op figures move between fresh processes on one device
    (``overhead.py --label runN``), or "" when fewer than two such runs are committed."""
    runs = []
    for path in sorted(results_dir().glob("overhead_run*-*.json")):
        res = _load(path, path.name.split("-", 1)[0])
        ops = _by_what(res, "op")
        if res.device == device and {"raw_cupy", "load_and_call", "tensor_add", "torch_add"} <= ops.keys():
            runs.append((res, {k: v["microseconds"] for k, v in ops.items()}))
    if len(runs) < 2:
        return ""
    add = [o["tensor_add"] / o["torch_add"] for _, o in runs]
    load = [o["load_and_call"] / o["raw_cupy"] for _, o in runs]
    dates = sorted({r.date for r, _ in runs})
    return (f" Host times move between runs: in {len(runs)} fresh processes on the same {device} "
            f"({', '.join(dates)}), `a + b` took {min(add):.2f}–{max(add):.2f}× PyTorch's `x + y` and "
            f"`load_kernel` + call {min(load):.2f}–{max(load):.2f}× the raw launch "
            f"(`benchmarks/results/overhead_run*.json`), so compare only figures measured in one run.")


def overhead() -> None:
    """Glue the per-op and per-step figures and the sentences that quote them."""
    after, before = latest("overhead"), latest("overhead_before")
    if after is None or "raw_cupy" not in _by_what(after, "op"):
        glue_figure("fig-overhead-ops", missing_figure("overhead", "per-op overhead", SCRIPT))
        glue_figure("fig-overhead-step", missing_figure("overhead", "a training step", SCRIPT))
        for name in ("overhead-source", "overhead-text"):
            glue_md(name, "")
        return
    ops_after = _by_what(after, "op")
    ops_before = _by_what(before, "op") if before is not None else {}
    torch = ops_after.get("torch_add", {}).get("microseconds")

    fig, ax = plt.subplots(figsize=(6.4, 3.5))
    labels = [label for _, label in OPS]
    ys = range(len(OPS))
    if ops_before:
        ax.barh([y + 0.2 for y in ys], [ops_before.get(k, {}).get("microseconds", 0) for k, _ in OPS],
                height=0.4, color=GREY, label=f"before ({before.date})")
    ax.barh([y - 0.2 for y in ys], [ops_after.get(k, {}).get("microseconds", 0) for k, _ in OPS], height=0.4,
            color=BLUE, label=f"now ({after.date})")
    if torch:
        ax.axvline(torch, color=ORANGE, ls="--", lw=1.5, label="PyTorch x + y")
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.set_xlabel("microseconds per call (1,024 floats)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    glue_figure("fig-overhead-ops", fig)

    steps = _by_what(after, "step")
    fig, ax = plt.subplots(figsize=(6.4, 2.4))
    eager, graph = steps["minitorch_eager"]["microseconds"], steps["minitorch_graph"]["microseconds"]
    rows = [("minitorch, eager", graph, eager - graph), ("minitorch, graph", graph, 0.0)]
    if "torch_eager" in steps:
        rows.append(("PyTorch, eager", None, steps["torch_eager"]["microseconds"]))
    for y, (_, device, python) in enumerate(rows):
        if device is not None:
            ax.barh(y, device, color=BLUE, label="device work (the graph's replay)" if y == 0 else None)
        ax.barh(y, python, left=device or 0, color=VERMILLION if device is not None else ORANGE,
                label="launch overhead" if y == 0 else None)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("microseconds per XOR training step")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    glue_figure("fig-overhead-step", fig)

    glue_md("overhead-source", after.provenance
            + (f" Before: {before.provenance[0].lower()}{before.provenance[1:]}" if before else ""))
    text = (f"On {after.device}, a raw CuPy launch of the 1,024-float `add` takes "
            f"{ops_after['raw_cupy']['microseconds']:.1f} µs of host time and `a + b` on two tensors "
            f"{ops_after['tensor_add']['microseconds']:.1f} µs")
    if "tensor_add_unplanned" in ops_after:
        text += (f" ({ops_after['tensor_add_unplanned']['microseconds']:.1f} µs when the launcher's Python runs "
                 f"on every call)")
    if ops_before:
        text += f"; it took {ops_before['tensor_add']['microseconds']:.0f} µs before any of this work"
    if torch:
        text += f"; PyTorch's `x + y` takes {torch:.1f} µs"
    text += (f". One XOR training step launches {steps['minitorch_eager']['launches']} kernels: eager, it takes "
             f"{eager:.0f} µs; captured into a graph, {graph:.0f} µs")
    if "torch_eager" in steps:
        text += f", against {steps['torch_eager']['microseconds']:.0f} µs for PyTorch eager"
    glue_md("overhead-text", text + "." + _spread(after.device))
