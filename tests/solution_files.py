"""The files the solution notebooks' ``%%kernel`` / ``%%module`` cells write (for tests and benchmarks)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"


def solution_files(notebook: str) -> dict[str, str]:
    files: dict[str, str] = {}
    for cell in json.loads((SOLUTIONS / notebook).read_text())["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        first, _, body = text.partition("\n")
        match = re.match(r"%%(kernel|module)\s+(\S+)\s*$", first)
        if cell["cell_type"] == "code" and match:
            files[match.group(2)] = body
    return files


def all_kernel_sources() -> dict[str, str]:
    """Every CUDA C file of every solution notebook, keyed by file name."""
    found: dict[str, str] = {}
    for notebook in sorted(SOLUTIONS.glob("*.ipynb")):
        found.update({k: v for k, v in solution_files(notebook.name).items() if k.endswith((".cu", ".cuh"))})
    return found
