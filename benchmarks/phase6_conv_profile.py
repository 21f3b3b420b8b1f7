"""Phase 6: the Nsight Compute profile of the convolution's Winograd and weight-gradient kernels, as JSON.

Reads the CSV that ``ncu --import <report> --csv --page details`` prints for a ``ncu --set full`` run of the
reference kernels on the ResNet layer (64 images, 64 -> 64 channels, 56 x 56, 3 x 3): in launch order,
Winograd F(2x2, 3x3) forward (winograd_input, winograd_gemm, winograd_output), F(4x4, 3x3) forward, F(4x4)
input gradient, then the weight gradient (conv2d_backward_weight_igemm, splitk_reduce). Keeps, per launch, the
metrics the chapter reads (time, the share of peak DRAM bandwidth and of the SMs' throughput, occupancy,
registers, cache hit rates) and writes ``benchmarks/results/phase6_conv_profile-<gpu>.json``, one row a launch
with ``pass`` naming what it belonged to.

    python benchmarks/phase6_conv_profile.py ncu_details.csv "NVIDIA H100 80GB HBM3"
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from common import write_results

# ncu's metric name -> the row's key
METRICS = {"Duration": "duration", "DRAM Throughput": "dram_pct", "Memory Throughput": "memory_pct",
           "Compute (SM) Throughput": "sm_pct", "L1/TEX Cache Throughput": "l1_pct",
           "L2 Cache Throughput": "l2_pct", "Achieved Occupancy": "achieved_occupancy_pct",
           "Theoretical Occupancy": "theoretical_occupancy_pct", "Registers Per Thread": "registers",
           "L1/TEX Hit Rate": "l1_hit_pct", "L2 Hit Rate": "l2_hit_pct", "Executed Ipc Active": "ipc",
           "Block Limit Registers": "block_limit_registers", "Dynamic Shared Memory Per Block": "dynamic_smem",
           "Static Shared Memory Per Block": "static_smem"}
# the launches of the profiled script, in order: which pass each belongs to
PASSES = (["forward winograd"] * 3 + ["forward winograd4"] * 3 + ["input winograd4"] * 3
          + ["weight igemm"] * 2)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def rows_from_csv(path: Path) -> list[dict]:
    launches: dict[str, dict] = {}
    with path.open(newline="") as f:
        for rec in csv.DictReader(line for line in f if line.startswith('"')):
            row = launches.setdefault(rec["ID"], {"kernel": rec["Kernel Name"].split("(")[0],
                                                  "grid": rec["Grid Size"], "block": rec["Block Size"]})
            key = METRICS.get(rec["Metric Name"])
            if key is None or key in row:
                continue
            value, unit = _number(rec["Metric Value"]), rec["Metric Unit"]
            if key == "duration":  # to seconds, whatever unit ncu chose
                value *= {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3,
                          "msecond": 1e-3}.get(unit, 1.0)
                key = "seconds"
            row[key] = value
    rows = [launches[i] for i in sorted(launches, key=int)]
    for row, pass_ in zip(rows, PASSES, strict=False):  # a run cut short has fewer launches
        row["pass"] = pass_
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("csv", type=Path, help="ncu --import <report> --csv --page details")
    parser.add_argument("device", help="the GPU's name, as the benchmarks write it")
    args = parser.parse_args(argv)
    rows = rows_from_csv(args.csv)
    for r in rows:
        print(f"{r.get('pass', '?'):>18} {r['kernel']:>30}: {r.get('seconds', 0) * 1e6:8.1f} us, DRAM "
              f"{r.get('dram_pct', 0):5.1f}%, SM {r.get('sm_pct', 0):5.1f}%, occupancy "
              f"{r.get('achieved_occupancy_pct', 0):5.1f}%, {r.get('registers', 0):.0f} registers")
    write_results("phase6_conv_profile", args.device, rows, tool="ncu --set full",
                  layer={"n": 64, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "stride": 1, "pad": 1})
    return 0


if __name__ == "__main__":
    sys.exit(main())
