"""What one `grader check` run is asked to do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.phases import Phase

DEFAULT_TIMEOUT_S = 120.0


@dataclass
class CheckOptions:
    phase: Phase
    device: str | None = None  # None: minitorch's default (cuda if usable, else emu)
    solutions: bool = False
    notebook: Path | None = None
    workspace: Path | None = None
    run_notebook: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S  # per notebook cell and per graded test
    step_timeout_s: float | None = None  # whole step; default derived from timeout_s
    require_perf: bool = False
    sanitize: bool = False
    seed: int | None = None
    record: bool = True
    keep_temp: bool = False
    select: str | None = None  # pytest -k expression: grade only some tests (never records a pass)
    tests_file: Path | None = None  # default grader/tests/<phase.tests>; the project's tests use synthetic ones
