"""The grading page (book/grading.md) says what the grader does: every `grader check` option, and the gates
as grader/phases.py defines them (a page that drifts sends a learner to the wrong phase)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from grader.cli import build_parser
from grader.phases import DELIVERABLES, get_phase

PAGE = Path(__file__).resolve().parents[2] / "book" / "grading.md"


def _check_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["check"]


def test_the_page_lists_every_grader_check_option():
    text = PAGE.read_text()
    # Hidden options (help=SUPPRESS: grade-all's sandbox plumbing) are not for learners.
    spellings = [a.option_strings for a in _check_parser()._actions
                 if a.option_strings and a.option_strings[0] not in ("-h", "--help") and a.help != argparse.SUPPRESS]
    assert ["--no-notebook"] in spellings  # the form the Colab instructions use
    # An option is listed when one of its spellings heads a definition (`-k EXPR`, `--notebook PATH`, ...).
    heads = [line for line in text.splitlines() if line.startswith("`")]
    missing = [names for names in spellings
               if not any(re.search(rf"`{re.escape(n)}[ `]", line) for n in names for line in heads)]
    assert not missing, f"book/grading.md does not list these `grader check` options: {missing}"


def test_the_page_states_the_deliverable_gates_as_the_registry_has_them():
    text = " ".join(PAGE.read_text().split())
    stated = dict(re.findall(r'"(\w+)"\)?` (?:needs )?Phase (\w+)', text))
    assert set(stated) == set(DELIVERABLES), f"the page states gates for {sorted(stated)}"
    for name, deliverable in DELIVERABLES.items():
        needs = get_phase(deliverable.unlocked_by)
        assert stated[name] == needs.number, (
            f'book/grading.md: grader.require("{name}") needs Phase {stated[name]} on the page, '
            f"but the gates say {needs.name}")
