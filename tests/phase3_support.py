"""Shared set-up of the framework tests (ops, autograd, nn): the solution files of phases 1 to 3b."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.solution_files import SOLUTIONS, solution_files

PHASE3_NOTEBOOKS = ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase3a_forward.ipynb", "phase3b_backward.ipynb")


def write_solutions(workspace: Path, notebooks: tuple[str, ...] = PHASE3_NOTEBOOKS) -> Path:
    """Write every file of these solution notebooks into the workspace (skip the test if one is missing)."""
    for notebook in notebooks:
        if not (SOLUTIONS / notebook).exists():
            pytest.skip(f"solutions/{notebook} is not written yet")
        for name, text in solution_files(notebook).items():
            (workspace / name).write_text(text)
    return workspace
