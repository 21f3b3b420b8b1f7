"""Graded tests are run by `grader check` only (it sets GRADER_RUNNING=1).

Without this guard a plain `pytest` at the repository root would grade whatever happens to be in
the learner's workspace and fail for reasons unrelated to the project's own tests.
"""

import os

import pytest

if os.environ.get("GRADER_RUNNING") != "1":
    collect_ignore_glob = ["test_*.py"]


def pytest_configure(config):
    """In an isolated phase the learner's modules and kernels run in a process of their own
    (grader/learner_process.py): routed there before any test loads one."""
    from grader import learner_process

    if learner_process.enabled():
        learner_process.install()


def pytest_unconfigure(config):
    from grader import learner_process

    learner_process.uninstall()


@pytest.fixture(autouse=True)
def _deliverable_saved_as_one_pair(request):
    """A test that reads a saved model grades it only if the model and its record come from one run
    (grader/deliverables.py: PAIRS, READ_BY)."""
    from grader import deliverables

    phase = deliverables.READ_BY.get(f"{request.node.path.name}::{request.node.originalname}")
    if phase is not None:
        from minitorch import kernels

        deliverables.check_saved_pair(kernels.workspace_dir(), deliverables.PAIRS[phase])
    yield


@pytest.fixture(autouse=True)
def _fresh_launch_records():
    from grader import checks

    checks.reset_launches()
    yield


@pytest.fixture(autouse=True)
def _exact_bounds_on_the_emulator(request):
    """The bounds tests of 1-D kernels (`*_past_n`, `*_no_read_past_end`) run the emulator in its check mode: its default guard
    catches a read past the end of an array only beyond the few alignment bytes after it (up to 12), the
    check mode at the first byte. Elsewhere the default mode keeps grading fast (and a tiled kernel's
    missing bound is reported as the out-of-bounds access it is, not as the uninitialised tile it reads)."""
    name = request.node.name.split("[")[0]
    if not (name.endswith("_past_n") or name.endswith("_no_read_past_end")):
        yield
        return
    from minitorch import backend

    if backend.get_device() != "emu":
        yield
        return
    from minitorch import emu

    with emu.check_mode():
        yield



@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A value check that fails (checks.WrongValuesError, or its words re-raised) is followed by the emulator's own
    finding, when it has one: the test's latest launches run again in the emulator's check mode (on a GPU, in a
    subprocess, on copies of their arrays), and a race, a read of shared memory no thread wrote or an
    out-of-bounds access it reports goes into the failure (and so the hint: the report picks the advice for
    that kind of fault), instead of advice chosen by the test's name."""
    from grader import checks
    from minitorch import backend, kernels

    # Never around a timing: a recording turns launch plans off.
    if item.get_closest_marker("perf") is not None or backend.get_device() not in ("emu", "cuda"):
        return (yield)
    with kernels.recording(limit=32) as launches:
        try:
            return (yield)
        except checks.GradeError as err:
            text = str(err)
            if not (isinstance(err, checks.WrongValuesError) or any(w in text for w in checks.WRONG_VALUES_WORDS)):
                raise  # a contract (a launch shape, a count, an error message): its own evidence says it all
            if any(f": {headline}:" in text for headline, _ in checks.FAULTS.values()):
                raise  # the failure is already a kernel fault, reported under its own headline
            try:
                finding = checks.check_mode_finding(launches)
            except Exception:  # noqa: BLE001 - a diagnosis only: without it the failure stands as it is
                finding = None
            if finding is None:
                raise
            raise checks.GradeError(f"{text}\n  {finding}") from None
