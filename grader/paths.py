"""Where things live: repository root, learner workspace, labs, solutions, progress file."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

GRADER_DIR = Path(__file__).resolve().parent
GRADED_TESTS_DIR = GRADER_DIR / "tests"
SANITIZE_CFG = GRADER_DIR / "sanitize.cfg"
PYTEST_INI = GRADER_DIR / "pytest-grader.cfg"
THRESHOLDS_TOML = GRADER_DIR / "thresholds.toml"


def repo_root() -> Path:
    """The course repository: GRADER_ROOT, else the checkout holding this package, else cwd."""
    if env := os.environ.get("GRADER_ROOT"):
        return Path(env).resolve()
    candidate = GRADER_DIR.parent
    if (candidate / "minitorch").is_dir() or (candidate / "solutions").is_dir():
        return candidate
    return Path.cwd().resolve()


def solutions_dir() -> Path:
    return repo_root() / "solutions"


def labs_dir() -> Path:
    return repo_root() / "labs"


def default_workspace() -> Path:
    """Same rule as minitorch.kernels.workspace_dir() (MINITORCH_WORKSPACE, else the package's
    csrc/), found without importing minitorch."""
    if env := os.environ.get("MINITORCH_WORKSPACE"):
        return Path(env).expanduser().resolve()
    try:
        spec = importlib.util.find_spec("minitorch")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve() / "csrc"
    return repo_root() / "minitorch" / "csrc"


def progress_file() -> Path:
    if env := os.environ.get("GRADER_PROGRESS"):
        return Path(env).resolve()
    return repo_root() / ".grader" / "progress.json"
