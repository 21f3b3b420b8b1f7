"""`grader.require(phase)`: refuse to run a lab or deliverable whose prerequisite has not passed."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from grader import progress
from grader.phases import DELIVERABLES, get_phase

SKIP_GATES_ENV = "GRADER_SKIP_GATES"


class PhaseLocked(RuntimeError):  # noqa: N818 - the public name fixed by the course design
    """The previous phase has not passed (or its graded files changed since it passed)."""


def require(phase: str, *, progress_path: Path | None = None) -> None:
    """Raise PhaseLocked, naming the command to run, unless the phase before `phase` has passed.

    ``phase`` may also name a deliverable ('sales', 'mnist', 'shakespeare'), which needs the phase
    that unlocks it to have passed. Instructors (and `grader check --solutions`) set
    GRADER_SKIP_GATES=1 to bypass every gate.
    """
    deliverable = DELIVERABLES.get(phase.strip().lower())
    if deliverable is not None:
        # A deliverable opens with its phase: every phase up to the one that unlocks it has passed.
        target, title, inclusive = get_phase(deliverable.unlocked_by), f"The {deliverable.title} deliverable", True
    else:
        target, title, inclusive = get_phase(phase), None, False
        if target.requires is None:
            return
        title = f"Phase {target.number} ({target.title})"
    if os.environ.get(SKIP_GATES_ENV) == "1":
        warnings.warn(f"{SKIP_GATES_ENV}=1: not checking the phases before {target.name}", stacklevel=2)
        return
    data = progress.load(progress_path)
    required = progress.first_unpassed_before(target.name, data)
    if required is None and inclusive and progress.phase_state(target.name, data) != progress.PASSED:
        required = target.name
    if required is None:
        return
    before = get_phase(required)
    state = progress.phase_state(before.name, data)
    before_title = f"Phase {before.number} ({before.title})"
    command = f"grader check {before.name}"
    if state == progress.STALE:
        changed = progress.changed_since_pass(data["phases"][before.name]["last_pass"])
        names = ", ".join(Path(p).name for p in changed)
        raise PhaseLocked(
            f"{title} is locked: {before_title} passed, but {names} changed since. "
            f"Run `{command}` again in a terminal at the repository root.")
    raise PhaseLocked(
        f"{title} is locked: {before_title} has not passed yet (every phase before it must pass first). "
        f"Run `{command}` in a terminal at the repository root and fix what it reports.")
