"""Counts a lab states in prose match the code they describe (a number in prose comes from somewhere)."""

from __future__ import annotations

import json
import re
import types

from tests.solution_files import SOLUTIONS, solution_files


def test_lab5_autotune_prose_counts_the_candidates():
    gemm = types.ModuleType("gemm_solution")
    exec(compile(solution_files("phase5_fast.ipynb")["gemm.py"], "gemm.py", "exec"), gemm.__dict__)
    rung7, rung9 = len(gemm.candidates("autotuned")), len(gemm.candidates("double_buffered"))
    cells = json.loads((SOLUTIONS / "phase5_fast.ipynb").read_text())["cells"]
    prose = next("".join(c["source"]) for c in cells
                 if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("### Autotuning"))
    said = re.search(r"compiles (\d+)\s+instantiations.*?= (\d+) of rung 7.*?= (\d+) of rung 9", prose, re.S)
    assert said, "Lab 5's autotuning cell no longer says how many instantiations it compiles"
    assert tuple(map(int, said.groups())) == (rung7 + rung9, rung7, rung9), (
        f"the lab says {said.groups()}; candidates() yields {rung7} of rung 7 and {rung9} of rung 9")
