"""Phase 5: why the SGEMM rungs' warps wait. Nsight Compute's warp-state statistics of the launches that the
chapter reads (rung 5, rung 9 and cuBLAS's own kernel at 4096^3), as JSON.

For each target, ``ncu`` profiles the second launch of ``phase5_gemm.py --profile`` (the first compiles and
warms up) with the WarpStateStats, SchedulerStats, LaunchStats and Occupancy sections only (a few replays,
not the ~40 passes of ``--set full``), exports the report, and reads it back as the raw page in CSV. From
that, per kernel: the cycles a warp spends between two issued instructions, split by stall reason
(``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: on average how many warps of a
scheduler wait for that reason per issued instruction, which adds up to *Warp Cycles Per Issued
Instruction*), and the scheduler's issue rate, active and eligible warps.

Writes ``benchmarks/results/phase5_gemm_stalls-<gpu>.json`` (``kind: "stalls"`` rows) and keeps the raw
CSV of each target next to it (``phase5_gemm_stalls_<target>-<gpu>.csv``). Usage, on a GPU machine with
``ncu`` on the PATH: ``python benchmarks/phase5_gemm_stalls.py`` (about a minute); ``--from-csv DIR``
parses CSVs already collected (``<target>.csv`` each) without profiling, ``--device NAME`` then names the GPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

from common import RESULTS, ROOT, slug, write_results

SIZE = 4096
# target -> (label in the chapter, phase5_gemm.py --profile arguments, ncu kernel-name regex)
TARGETS = {
    "rung5": ("rung 5", ["blocktile_2d", str(SIZE)], "sgemm_5"),
    # the tiles of the committed full report (rung 9's DEFAULT_CONFIG) so that both read the same kernel
    "rung9": ("rung 9", ["double_buffered", str(SIZE), "--config", "128,128,8,32,64"], "sgemm_9"),
    "cublas": ("cuBLAS", ["cublas", str(SIZE)], "xmma|cutlass|gemm"),
}
SECTIONS = ("WarpStateStats", "SchedulerStats", "LaunchStats", "Occupancy")
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>\w+?)_per_issue_active\.ratio$")
SCALARS = {  # key in the JSON -> ncu metric
    "warp_cycles_per_issued_instruction": "smsp__average_warp_latency_per_inst_issued.ratio",
    "issued_per_scheduler_cycle": "smsp__issue_active.avg.per_cycle_active",
    "active_warps_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
    "eligible_warps_per_scheduler": "smsp__warps_eligible.avg.per_cycle_active",
    "registers_per_thread": "launch__registers_per_thread",
}


def find_ncu() -> str:
    """ncu on the PATH, else in the usual CUDA and Nsight Compute install folders."""
    import glob

    found = shutil.which("ncu") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)
                                             + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)), None)
    if found is None:
        raise SystemExit("ncu (Nsight Compute) is not on the PATH nor in /usr/local/cuda*/bin")
    return found


def profile(target: str, workdir: Path) -> Path:
    """Run ncu on one target; the raw page of its report as CSV (``workdir/<target>.csv``)."""
    _, args, pattern = TARGETS[target]
    ncu = find_ncu()
    report = workdir / target
    command = [ncu, "--kernel-name", f"regex:{pattern}", "--launch-skip", "1", "--launch-count", "1", "-f",
               "-o", str(report)]
    for section in SECTIONS:
        command += ["--section", section]
    command += ["--metrics", "gpu__time_duration.sum"]
    command += [sys.executable, str(ROOT / "benchmarks" / "phase5_gemm.py"), "--profile", *args]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    raw = subprocess.run([ncu, "-i", f"{report}.ncu-rep", "--page", "raw", "--csv"], check=True,
                         capture_output=True, text=True).stdout
    path = workdir / f"{target}.csv"
    path.write_text(raw)
    return path


def read_raw_csv(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The first kernel of ncu's ``--page raw --csv`` output: ({metric: value}, {metric: unit})."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV header (a line starting with \"ID\") in the output")
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(table) < 3:
        raise ValueError("the ncu raw CSV has a header but no kernel")
    header, units, values = table[0], table[1], table[2]
    return dict(zip(header, values, strict=False)), dict(zip(header, units, strict=False))


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def stalls_row(target: str, text: str) -> dict:
    """The JSON row of one target from its raw CSV: stall reasons (cycles per issued instruction) and scalars."""
    values, units = read_raw_csv(text)
    stalls = {}
    for name, value in values.items():
        match = STALL.match(name)
        if match and "not_issued" not in match["reason"] and value not in ("", "n/a"):
            stalls[match["reason"]] = _number(value)
    if not stalls:
        raise ValueError(f"{target}: no smsp__average_warps_issue_stalled_*_per_issue_active.ratio in the report")
    row = {"kind": "stalls", "target": target, "label": TARGETS[target][0] if target in TARGETS else target,
           "kernel": values.get("Kernel Name", ""), "size": SIZE,
           "stalls": dict(sorted(stalls.items(), key=lambda item: -item[1])),
           "stall_sum": sum(stalls.values())}
    for key, metric in SCALARS.items():
        if values.get(metric, "") not in ("", "n/a"):
            row[key] = _number(values[metric])
    if values.get("gpu__time_duration.sum", "") not in ("", "n/a"):
        row["duration"] = {"value": _number(values["gpu__time_duration.sum"]),
                           "unit": units.get("gpu__time_duration.sum", "")}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from-csv", type=Path, help="parse DIR/<target>.csv instead of profiling")
    parser.add_argument("--device", help="the GPU's name (with --from-csv; else asked of the GPU)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/phase5_gemm_stalls"),
                        help="where ncu's reports go (default /tmp/phase5_gemm_stalls)")
    args = parser.parse_args(argv)
    if args.from_csv:
        csvs = {t: args.from_csv / f"{t}.csv" for t in TARGETS if (args.from_csv / f"{t}.csv").exists()}
        device = args.device or "unknown GPU"
    else:
        from common import gpu_name

        args.workdir.mkdir(parents=True, exist_ok=True)
        device = args.device or gpu_name()
        csvs = {}
        for target in TARGETS:  # one failed profile leaves the others
            try:
                csvs[target] = profile(target, args.workdir)
            except subprocess.CalledProcessError as err:
                print(f"{target}: ncu failed ({err})", file=sys.stderr, flush=True)
    for target, path in csvs.items():  # the raw reports first: they can be parsed again (--from-csv)
        shutil.copyfile(path, RESULTS / f"phase5_gemm_stalls_{target}-{slug(device)}.csv")
    rows = [stalls_row(t, path.read_text()) for t, path in csvs.items()]
    if not rows:
        raise SystemExit("no target was profiled")
    for row in rows:
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(row["stalls"].items())[:4])
        print(f"{row['label']}: {row['stall_sum']:.2f} cycles between issues ({top})", flush=True)
    write_results("phase5_gemm_stalls", device, rows, size=SIZE, sections=list(SECTIONS),
                  ncu_launch="the second launch of phase5_gemm.py --profile (--launch-skip 1 --launch-count 1)",
                  metric="smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: warps of a scheduler "
                         "waiting for <reason>, per issued instruction (cycles between a warp's issues)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
