"""Graded tests are run by `grader check` only (it sets GRADER_RUNNING=1).

Without this guard a plain `pytest` at the repository root would grade whatever happens to be in
the learner's workspace and fail for reasons unrelated to the project's own tests.
"""

import os

import pytest

if os.environ.get("GRADER_RUNNING") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def _fresh_launch_records():
    from grader import checks

    checks.reset_launches()
    yield
