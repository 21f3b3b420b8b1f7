"""The appendix's table of the emulator's speed (benchmarks/emu_speed.py): drawn from the committed JSON."""

from __future__ import annotations

import json
from pathlib import Path

from IPython.display import Markdown, display


def show(results: Path = Path("../benchmarks/results")) -> None:
    files = sorted(results.glob("emu_speed-*.json"))
    if not files:
        raise FileNotFoundError("no benchmarks/results/emu_speed-*.json: run benchmarks/emu_speed.py")
    speed = max((json.loads(f.read_text()) | {"_file": f.name} for f in files),
                key=lambda d: (d["date"], d["_file"]))
    before_file = results / speed["_file"].replace("emu_speed-", "emu_speed_before-")
    before = json.loads(before_file.read_text()) if before_file.exists() else None


    def pick(doc, kind, workers, **match):
        for r in doc["results"]:
            if r["kind"] == kind and r["workers"] == workers and all(r.get(k) == v for k, v in match.items()):
                return r
        return None


    workers = sorted({r["workers"] for r in speed["results"]})
    table = ["| measurement | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in workers) + " |",
             "|---|" + "--:|" * len(workers)]
    lines = [
        ("empty launches per second", lambda w: pick(speed, "launch", w, kernel="empty"),
         lambda r: f"{r['launches_per_second']:,.0f}"),
        ("launches per second, 4 arguments", lambda w: pick(speed, "launch", w, kernel="empty_args"),
         lambda r: f"{r['launches_per_second']:,.0f}"),
        ("elementwise `axpy`, GB/s", lambda w: pick(speed, "elementwise", w),
         lambda r: f"{r['gb_per_second']:.2f}"),
        ("tiled SGEMM 512³, GFLOP/s", lambda w: pick(speed, "sgemm", w, size=512,
                                                      kernel="sgemm_tiled (16x16 tiles, 2 barriers a tile)"),
         lambda r: f"{r['gflop_per_second']:.2f}"),
        ("`ops.matmul` 512³ (Phase 5), GFLOP/s", lambda w: pick(speed, "sgemm", w,
                                                                kernel="ops.matmul (Phase 5 reference)"),
         lambda r: f"{r['gflop_per_second']:.2f}"),
        ("MNIST step (batch 64)", lambda w: pick(speed, "mnist", w),
         lambda r: f"{r['step_seconds'] * 1e3:.0f} ms (CPU {r['step_cpu_seconds'] * 1e3:.0f} ms)"),
        ("MNIST epoch (60,000 images)", lambda w: pick(speed, "mnist", w),
         lambda r: f"{r['mnist_epoch_seconds']:.0f} s (CPU {r['mnist_epoch_cpu_seconds']:.0f} s)"),
        ("GPT step, the lab's model", lambda w: pick(speed, "gpt", w, config="lab (full)"),
         lambda r: f"{r['step_seconds'] * 1e3:.0f} ms (CPU {r['step_cpu_seconds'] * 1e3:.0f} ms)"),
        ("GPT step, the emulator's reduced model", lambda w: pick(speed, "gpt", w, config="reduced (emulator lab)"),
         lambda r: f"{r['step_seconds'] * 1e3:.0f} ms (CPU {r['step_cpu_seconds'] * 1e3:.0f} ms)"),
    ]
    for label, row, fmt in lines:
        table.append(f"| {label} | " + " | ".join("–" if row(w) is None else fmt(row(w)) for w in workers) + " |")
    display(Markdown("\n".join(table)))
    loads = sorted({round(r["load_average_before"], 1) for r in speed["results"]})
    text = [f"Measured on {speed['device']}, {speed['date']} (`benchmarks/results/{speed['_file']}`); "
            f"the machine's load average was {loads[0]} to {loads[-1]} while it ran."]
    if loads[-1] > speed.get("cpu_count", 1):
        text.append("Other programs kept its cores busy, so the wall-clock times are longer than on an idle "
                    "machine; the CPU times are the emulator's own.")
    mnist = pick(speed, "mnist", 1)
    if before is not None and mnist is not None and pick(before, "mnist", 1) is not None:
        old = pick(before, "mnist", 1)
        text.append(f"Before the emulator's speed work (`{before_file.name}`, same machine), one MNIST step took "
                    f"{old['step_cpu_seconds'] * 1e3:.0f} ms of CPU time on one worker; now "
                    f"{mnist['step_cpu_seconds'] * 1e3:.0f} ms "
                    f"({old['step_cpu_seconds'] / mnist['step_cpu_seconds']:.1f}× less).")
        gpt, old_gpt = pick(speed, "gpt", 1, config="lab (full)"), pick(before, "gpt", 1, config="lab (full)")
        if gpt is not None and old_gpt is not None:
            text.append(f"A step of the lab's GPT took {old_gpt['step_cpu_seconds']:.1f} s of CPU time before and "
                        f"{gpt['step_cpu_seconds']:.1f} s now "
                        f"({old_gpt['step_cpu_seconds'] / gpt['step_cpu_seconds']:.1f}× less).")
    display(Markdown(" ".join(text)))
    display(Markdown("\n".join(f"- {n}" for n in speed.get("notes", []))))
    profile_file = results / speed["_file"].replace("emu_speed-", "emu_profile-")
    if profile_file.exists():
        profile = json.loads(profile_file.read_text())["results"][0]
        text = (f"A `perf record` profile of the timed MNIST steps (`{profile_file.name}`, one worker): "
                + ", ".join(f"{part} {pct:.0f}%" for part, pct in profile["shares_percent"].items()) + ".")
        if "kernel_samples_after_a_division_percent" in profile:
            text += (f" {profile['kernel_samples_after_a_division_percent']:.0f}% of all the samples are kernel code "
                     "waiting for an integer division (on the instruction right after a `div` or `idiv`).")
        display(Markdown(text))
    if mnist is not None and mnist.get("kernels"):
        total = sum(k["cpu_seconds"] for k in mnist["kernels"])
        shaped = "shapes" in mnist["kernels"][0]
        rows = ["| kernel (one MNIST step, one worker) | launches | CPU time | share |"
                + (" launch shapes (grid × block) | runs on |" if shaped else ""),
                "|---|--:|--:|--:|" + ("---|---|" if shaped else "")]
        for k in mnist["kernels"][:8]:
            row = (f"| `{k['kernel']}` | {k['launches']} | {k['cpu_seconds'] * 1e3:.1f} ms "
                   f"| {100 * k['cpu_seconds'] / total:.0f}% |")
            if shaped:
                shapes = "; ".join(f"{tuple(s['grid'])} × {tuple(s['block'])}" for s in k["shapes"])
                runs = "split at its barriers" if k.get("split") else "fibers" if k["fibers"] else "a plain loop"
                row += f" {shapes} | {runs} |"
            rows.append(row)
        display(Markdown("\n".join(rows)))
