"""The files the solution notebooks' ``%%kernel`` / ``%%module`` cells write (for tests)."""

from __future__ import annotations

from pathlib import Path

from grader.labs import learner_files

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"


def solution_files(notebook: str) -> dict[str, str]:
    return learner_files(SOLUTIONS / notebook)


def all_kernel_sources() -> dict[str, str]:
    """Every CUDA C file of every solution notebook, keyed by file name."""
    found: dict[str, str] = {}
    for notebook in sorted(SOLUTIONS.glob("*.ipynb")):
        found.update({k: v for k, v in learner_files(notebook).items() if k.endswith((".cu", ".cuh"))})
    return found
