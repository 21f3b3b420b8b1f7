"""Learner-facing code lines are at most 88 characters (grader.labs.LINE_LIMIT).

At 1280 px the book's code column shows about 88 characters; on a phone a code block scrolls
anyway, but a lab cell or a book code block must never hide the end of a line (often the comment
that explains it) on a laptop. `make check-book-layout` measures the built book in a browser; this
test checks the sources, fast and without a browser, and names file, cell and line.

What counts as a learner-facing code line:

- every line of every code cell of each lab as `grader labs` generates it from
  ``solutions/<lab>.ipynb`` (every solutions notebook, whatever its phase): hidden tests removed,
  solutions replaced by their TODO stubs, i.e. exactly what the learner sees in ``labs/``. The
  reference solutions between BEGIN/END SOLUTION are never shown to a learner and are not checked;
  the TODO lines generated from their ``HINT:`` lines are (grader.labs wraps them);
- every line inside a code block of a markdown cell of those labs and of the book's pages
  (``book/*.md``): fenced blocks (```` ``` ```` or ``~~~``, any language or none), indented code
  blocks, and MyST's ``{code-block}`` / ``{code}`` / ``{code-cell}`` directives. A ``{code-cell}``
  whose input the page does not show (tag ``remove-input`` or ``remove-cell``) is not checked; one
  with ``hide-input`` is (a reader can unfold it). Directive options (``:tags: ...``, a ``---``
  YAML header) are not code.

Not code lines, hence never flagged: prose, markdown tables (such as Phase 5's GEMM ladder table,
rendered as an HTML table, not as code), and the bodies of other directives (``{figure}``,
``{glue:figure}`` captions and ``:alt:`` texts, admonitions, ``:::`` colon fences): the browser
wraps them. Markdown is parsed with markdown-it-py (the parser MyST itself uses), so a table or a
list is never mistaken for code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from grader import labs

ROOT = Path(__file__).resolve().parent.parent
LIMIT = labs.LINE_LIMIT
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
BOOK_PAGES = sorted((ROOT / "book").glob("*.md"))
CODE_DIRECTIVES = ("{code-block}", "{code}", "{sourcecode}", "{code-cell}")
HIDDEN_INPUT_TAGS = ("remove-input", "remove-cell")
_MD = MarkdownIt("commonmark")


@dataclass(frozen=True)
class LongLine:
    where: str  # "book/x.md:12" or "solutions/x.ipynb cell 4 (code, 'Exercise 2: ...') line 7"
    text: str

    def __str__(self) -> str:
        shown = self.text if len(self.text) <= 120 else self.text[:117] + "..."
        return f"{self.where}: {len(self.text)} > {LIMIT} characters: {shown.strip()}"


def _directive_body(info: str, content: str) -> list[tuple[int, str]] | None:
    """The code lines (offset in the block, text) of a fenced block, or None if it is not code."""
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    name = info.split(maxsplit=1)[0] if info else ""
    if not name.startswith("{"):
        return list(enumerate(lines))  # a plain fence: ```python, ```text, ```
    if name not in CODE_DIRECTIVES:
        return None  # {figure}, {glue:figure}, {note}...: prose the browser wraps
    start, options = 0, ""
    if lines[:1] == ["---"]:  # a YAML header
        end = lines.index("---", 1)
        options, start = "\n".join(lines[1:end]), end + 1
    else:
        while start < len(lines) and re.match(r"^:[\w-]+:", lines[start]):
            options += lines[start] + "\n"
            start += 1
    if name == "{code-cell}" and any(tag in options for tag in HIDDEN_INPUT_TAGS):
        return None
    return [(i, line) for i, line in enumerate(lines) if i >= start]


def markdown_code_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number in `text`, line) of every code line of a markdown document."""
    found = []
    for token in _MD.parse(text):
        if token.type not in ("fence", "code_block") or token.map is None:
            continue
        if token.type == "code_block":
            first = token.map[0] + 1
            body = list(enumerate(text.split("\n")[token.map[0]:token.map[1]]))
        else:
            first = token.map[0] + 2  # the line after the opening fence
            body = _directive_body(token.info.strip(), token.content)
            if body is None:
                continue
        found += [(first + offset, line) for offset, line in body]
    return found


def lab_long_lines(solution: Path) -> list[LongLine]:
    """The long learner-facing lines of the lab generated from `solution`."""
    lab = json.loads(labs.generate_lab(solution))
    index_of = {c.get("id"): i for i, c in enumerate(json.loads(solution.read_text())["cells"])}
    name = f"solutions/{solution.name}"
    heading, out = "", []
    for position, cell in enumerate(lab["cells"]):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        index = index_of.get(cell["id"], position)
        if cell["cell_type"] == "markdown":
            heading = labs._heading(source) or heading
            lines = markdown_code_lines(source)
            kind = "markdown code block"
        elif cell["cell_type"] == "code":
            lines = list(enumerate(source.split("\n"), 1))
            kind = "code"
        else:
            continue
        where = f"{name} cell {index} ({kind}" + (f", under {heading!r}" if heading else "") + ")"
        out += [LongLine(f"{where} line {n}", line) for n, line in lines if len(line) > LIMIT]
    return out


def page_long_lines(page: Path) -> list[LongLine]:
    text = page.read_text(encoding="utf-8")
    return [LongLine(f"book/{page.name}:{n}", line) for n, line in markdown_code_lines(text) if len(line) > LIMIT]


def _report(found: list[LongLine]) -> str:
    return f"{len(found)} learner-facing line(s) over {LIMIT} characters:\n" + "\n".join(map(str, found))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_lab_cells_fit_the_line_limit(solution: Path) -> None:
    found = lab_long_lines(solution)
    assert not found, _report(found)


@pytest.mark.parametrize("page", BOOK_PAGES, ids=lambda p: p.stem)
def test_book_code_blocks_fit_the_line_limit(page: Path) -> None:
    found = page_long_lines(page)
    assert not found, _report(found)


# ----------------------------------------------------------------- the rules themselves

SAMPLE = """# A page

Prose is never checked, however long its lines are: the browser wraps it, so this line may be as long as it likes.

| rung | kernel | GFLOP/s on a 4096 x 4096 x 4096 SGEMM | fraction of cuBLAS | what changed from the previous rung |
|------|--------|----------------------------------------|--------------------|-------------------------------------|

```python
short = 1
a_code_line_that_is_much_too_long = some_function(argument_one, argument_two, argument_three)
```

```{glue:figure} fig-x
:alt: An alt text may be long, it is prose for a screen reader and not code at all, not even close.
A caption is prose too, and wraps in the browser like any other paragraph of the page, any length.
```

```{code-cell} ipython3
:tags: [remove-input]

figures.draw_a_figure_whose_call_is_long_but_never_shown(to_the_reader=True, width=700, height=400)
```

```{code-cell} ipython3
---
tags: [hide-input]
---
shown_when_unfolded = draw_a_figure_whose_call_is_long_and_can_be_shown(to_the_reader=True, w=7)
```

    an_indented_code_block_is_code_as_well = with_a_line(that_is_too_long, for_the_column, at_all)
"""


def test_only_code_lines_are_counted() -> None:
    lines = {n: line for n, line in markdown_code_lines(SAMPLE)}
    long = sorted(n for n, line in lines.items() if len(line) > LIMIT)
    text = SAMPLE.split("\n")
    assert [text[n - 1] for n in long] == [
        "a_code_line_that_is_much_too_long = some_function(argument_one, argument_two, argument_three)",
        "shown_when_unfolded = draw_a_figure_whose_call_is_long_and_can_be_shown(to_the_reader=True, w=7)",
        "    an_indented_code_block_is_code_as_well = with_a_line(that_is_too_long, for_the_column, at_all)",
    ]
    assert "short = 1" in lines.values() and not any("tags" in line for line in lines.values())


def test_a_long_line_in_a_lab_is_named_by_file_cell_and_line(tmp_path: Path) -> None:
    long_comment = "# " + "a comment that explains the line below it, " * 3
    nb = {"cells": [
        {"cell_type": "markdown", "id": "m0", "metadata": {}, "source": "## Exercise 1: fill"},
        {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "### BEGIN HIDDEN TESTS\nassert True\n### END HIDDEN TESTS\n"},
        {"cell_type": "code", "id": "c2", "metadata": {}, "execution_count": None, "outputs": [],
         "source": f"x = 1\n{long_comment}\ndef f():\n    ### BEGIN SOLUTION\n    return '{'s' * 100}'\n"
                   f"    ### END SOLUTION\n"},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    solution = tmp_path / "phase9_test.ipynb"
    solution.write_text(json.dumps(nb))
    found = lab_long_lines(solution)
    # The hidden-tests cell is dropped from the lab, yet the cell number is the solution's; the
    # over-long reference solution is not shown to learners and is not flagged.
    assert [f.where for f in found] == [
        "solutions/phase9_test.ipynb cell 2 (code, under 'Exercise 1: fill') line 2"]
    assert f"{len(long_comment)} > {LIMIT} characters" in str(found[0])
