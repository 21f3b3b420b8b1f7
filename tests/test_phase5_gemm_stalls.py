"""benchmarks/phase5_gemm_stalls.py reads Nsight Compute's raw CSV into the stall reasons the chapter shows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import phase5_gemm_stalls as stalls  # noqa: E402

METRICS = ["smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
           "smsp__average_warp_latency_per_inst_issued.ratio", "launch__registers_per_thread",
           "gpu__time_duration.sum"]


def raw_csv(values: list[str]) -> str:
    head = ["ID", "Process ID", "Process Name", "Kernel Name"] + METRICS
    units = ["", "", "", ""] + ["", "", "", "", "", "register/thread", "msecond"]
    row = ["0", "522", "python3.12", "void sgemm_9_double_buffered<128, 128, 8, 32, 64, 0, 0>(...)"] + values

    def line(cells: list[str]) -> str:
        return ",".join(f'"{c}"' for c in cells)

    return "==PROF== Connected to process 522\n" + "\n".join(map(line, (head, units, row))) + "\n"


def test_stall_reasons_are_read_without_the_not_issued_counters():
    row = stalls.stalls_row("rung9", raw_csv(["0.5", "9.0", "2.25", "1", "3.75", "128", "3.08"]))
    assert row["stalls"] == {"mio_throttle": 2.25, "selected": 1.0, "long_scoreboard": 0.5}
    assert list(row["stalls"]) == ["mio_throttle", "selected", "long_scoreboard"]  # largest first
    assert row["stall_sum"] == pytest.approx(3.75)
    assert row["warp_cycles_per_issued_instruction"] == 3.75 and row["registers_per_thread"] == 128
    assert row["duration"] == {"value": 3.08, "unit": "msecond"}
    assert row["kernel"].startswith("void sgemm_9") and row["label"] == "rung 9"


def test_thousands_separators_and_missing_reports_are_handled():
    row = stalls.stalls_row("rung5", raw_csv(["1,234.5", "n/a", "0", "1", "2", "156", "6.1"]))
    assert row["stalls"]["long_scoreboard"] == 1234.5
    with pytest.raises(ValueError, match="no ncu raw CSV header"):
        stalls.stalls_row("rung5", "==ERROR== the profiled process failed\n")
    with pytest.raises(ValueError, match="no smsp__average_warps_issue_stalled"):
        stalls.stalls_row("rung5", raw_csv(["", "", "", "", "2", "156", "6.1"]).replace("_per_issue_active", "_x"))
