"""`grader labs`: generate labs/<lab>.ipynb from solutions/<lab>.ipynb.

- Python regions ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` become ``# TODO: <hint>`` and
  ``raise NotImplementedError("<lab> / <heading>: <hint>")`` at the same indentation.
- In ``%%kernel`` cells (CUDA C) ``// ### BEGIN SOLUTION`` .. ``// ### END SOLUTION`` become
  ``// TODO: <hint>`` and ``MINITORCH_TODO("...");`` (the magic refuses such a source, unless the file
  defines ``#define MINITORCH_TODO(message)`` itself: then each unwritten kernel refuses to run, named).
- The line right after BEGIN SOLUTION may be ``# HINT: ...`` / ``// HINT: ...``: it becomes the hint.
- ``### BEGIN HIDDEN TESTS`` .. ``### END HIDDEN TESTS`` are removed (a cell left empty is dropped).
- Outputs and execution counts are cleared; metadata is minimal so the output is byte-stable.
- The lab records the sha256 of its generated cells; a lab whose cells no longer match that hash
  was edited by the learner and is never overwritten without ``force`` (and then backed up first).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
DEFAULT_HINT = "write this part (see the instructions above)"
# Learner-facing lines (lab cells, book code blocks) are at most this long: tests/test_line_length.py.
LINE_LIMIT = 88
METADATA_KEY = "minitorch"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


class LabError(ValueError):
    """A malformed solution notebook (unbalanced markers...)."""


@dataclass
class LabResult:
    lab: str
    action: str  # created | updated | up to date | refused | overwritten | ok | drift | missing
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.action in ("refused", "drift", "missing")


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def learner_files(notebook: Path) -> dict[str, str]:
    """The files a notebook's ``%%kernel <file>`` / ``%%module <file>`` cells write, keyed by file name."""
    files: dict[str, str] = {}
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        first, _, body = _source(cell).partition("\n")
        match = re.match(r"%%(kernel|module)\s+(\S+)(?:\s+--\S+)*\s*$", first)  # --arch=sm_90a
        if cell.get("cell_type") == "code" and match:
            files[match.group(2)] = body
    return files


def _marker(line: str, marker: str, comment: str) -> bool:
    stripped = line.strip()
    return stripped == marker or stripped == f"{comment} {marker}" or stripped == f"{comment}{marker}"


def _heading(markdown: str) -> str | None:
    """The last heading of a markdown cell: the one closest to the code cells below it."""
    found = None
    for line in markdown.splitlines():
        if m := re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line):
            found = m.group(1)
    return found


def _strip_hidden_tests(source: str, where: str) -> str:
    out, hidden = [], False
    for line in source.split("\n"):
        if line.strip().endswith(BEGIN_HIDDEN):
            if hidden:
                raise LabError(f"{where}: nested {BEGIN_HIDDEN}")
            hidden = True
        elif line.strip().endswith(END_HIDDEN):
            if not hidden:
                raise LabError(f"{where}: {END_HIDDEN} without {BEGIN_HIDDEN}")
            hidden = False
        elif not hidden:
            out.append(line)
    if hidden:
        raise LabError(f"{where}: {BEGIN_HIDDEN} is never closed")
    return "\n".join(out)


def _stub_solutions(source: str, *, lab: str, heading: str, where: str) -> str:
    is_cuda = source.lstrip().startswith("%%kernel")
    comment = "//" if is_cuda else "#"
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _marker(line, END_SOLUTION, comment):
            raise LabError(f"{where}: {END_SOLUTION} without {BEGIN_SOLUTION}")
        if not _marker(line, BEGIN_SOLUTION, comment):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        hint = DEFAULT_HINT
        j = i + 1
        if j < len(lines) and lines[j].strip().startswith(f"{comment} HINT:"):
            hint = lines[j].strip()[len(comment) + len(" HINT:"):].strip() or DEFAULT_HINT
        while j < len(lines) and not _marker(lines[j], END_SOLUTION, comment):
            if _marker(lines[j], BEGIN_SOLUTION, comment):
                raise LabError(f"{where}: nested {BEGIN_SOLUTION}")
            j += 1
        if j == len(lines):
            raise LabError(f"{where}: {BEGIN_SOLUTION} is never closed")
        out += _todo_lines(indent, comment, hint, f"{lab} / {heading}: {hint}", is_cuda)
        i = j + 1
    return "\n".join(out)


def _todo_lines(indent: str, comment: str, hint: str, message: str, is_cuda: bool) -> list[str]:
    """``// TODO: hint`` and the stub that raises ``message``, each wrapped to LINE_LIMIT characters:
    the comment over several comment lines, the message as adjacent string literals (C and Python
    both join them), so the learner reads every word without scrolling."""
    head = f"{indent}{comment} TODO: "
    lines = textwrap.wrap(hint, LINE_LIMIT - len(head), break_long_words=False, break_on_hyphens=False)
    out = [head + lines[0]] + [f"{indent}{comment}{' ' * (len(head) - len(indent) - len(comment))}{line}"
                               for line in lines[1:]]
    call, end = ("MINITORCH_TODO(", ");") if is_cuda else ("raise NotImplementedError(", ")")
    one_line = f"{indent}{call}{json.dumps(message, ensure_ascii=False)}{end}"
    if len(one_line) <= LINE_LIMIT:
        return out + [one_line]
    inner = indent + " " * 4
    width = LINE_LIMIT - len(inner) - len(end)
    literals, chunk = [], ""
    for word in re.findall(r"\S+\s*", message):   # each word keeps its space: the chunks join exactly
        if chunk and len(json.dumps(chunk + word, ensure_ascii=False)) > width:
            literals.append(json.dumps(chunk, ensure_ascii=False))
            chunk = ""
        chunk += word
    literals.append(json.dumps(chunk, ensure_ascii=False))
    return out + [f"{indent}{call}"] + [inner + lit for lit in literals[:-1]] + [inner + literals[-1] + end]


def content_sha256(cells: list[dict[str, Any]]) -> str:
    """Hash of what the learner can edit: cell types and sources (not outputs, not metadata)."""
    digest = hashlib.sha256()
    for cell in cells:
        digest.update(cell.get("cell_type", "").encode() + b"\0" + _source(cell).encode() + b"\0")
    return digest.hexdigest()


def generate_lab(solution: Path) -> str:
    """The lab notebook text generated from a solution notebook (deterministic)."""
    solution = Path(solution)
    lab = solution.stem
    nb = json.loads(solution.read_text(encoding="utf-8"))
    heading = lab
    cells = []
    code_index = 0
    for index, cell in enumerate(nb.get("cells", [])):
        kind = cell.get("cell_type")
        source = _source(cell)
        new: dict[str, Any] = {"cell_type": kind, "id": cell.get("id") or f"{lab}-{index}",
                               "metadata": {}, "source": source}
        tags = cell.get("metadata", {}).get("tags")
        if tags:
            new["metadata"]["tags"] = list(tags)
        if kind == "markdown":
            heading = _heading(source) or heading
            if cell.get("attachments"):
                new["attachments"] = cell["attachments"]
        elif kind == "code":
            where = f"{solution.name}, code cell {code_index} ({heading})"
            code_index += 1
            source = _strip_hidden_tests(source, where)
            source = _stub_solutions(source, lab=lab, heading=heading, where=where)
            if not source.strip():
                continue  # the cell only held hidden tests
            new.update(source=source, execution_count=None, outputs=[])
        cells.append(new)
    metadata = {
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
        METADATA_KEY: {
            "generated_from": f"solutions/{solution.name}",
            "note": "Generated by `grader labs`; edit freely, the grader will not overwrite your work.",
            "content_sha256": content_sha256(cells),
        },
    }
    out = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def edited_by_learner(lab_path: Path) -> bool:
    """True when the lab's cells differ from what was generated (or it was not generated)."""
    try:
        nb = json.loads(Path(lab_path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return True
    recorded = nb.get("metadata", {}).get(METADATA_KEY, {}).get("content_sha256")
    return recorded is None or recorded != content_sha256(nb.get("cells", []))


def backup_path(lab_path: Path, now: _dt.datetime | None = None) -> Path:
    stamp = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    candidate = lab_path.with_name(f"{lab_path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        candidate = lab_path.with_name(f"{lab_path.name}.bak-{stamp}-{n}")
        n += 1
    return candidate


def solution_notebooks(solutions_dir: Path, names: list[str] | None = None) -> list[Path]:
    found = sorted(p for p in Path(solutions_dir).glob("*.ipynb") if not p.name.startswith("."))
    if names:
        wanted = {Path(n).stem for n in names}
        missing = wanted - {p.stem for p in found}
        if missing:
            raise LabError(f"no solution notebook for: {', '.join(sorted(missing))} in {solutions_dir}")
        found = [p for p in found if p.stem in wanted]
    return found


def sync_labs(
    solutions_dir: Path,
    labs_dir: Path,
    *,
    names: list[str] | None = None,
    check: bool = False,
    force: bool = False,
) -> list[LabResult]:
    """Generate (or with check=True, only compare) every lab; never clobber a learner's edits."""
    results = []
    labs_dir = Path(labs_dir)
    for solution in solution_notebooks(solutions_dir, names):
        text = generate_lab(solution)
        lab_path = labs_dir / solution.name
        current = lab_path.read_text(encoding="utf-8") if lab_path.exists() else None
        lab = solution.stem
        if check:
            if current is None:
                results.append(LabResult(lab, "missing", f"{lab_path} does not exist"))
            elif current != text:
                results.append(LabResult(lab, "drift", f"{lab_path} differs from solutions/{solution.name}"))
            else:
                results.append(LabResult(lab, "ok"))
            continue
        if current == text:
            results.append(LabResult(lab, "up to date"))
            continue
        if current is None:
            labs_dir.mkdir(parents=True, exist_ok=True)
            lab_path.write_text(text, encoding="utf-8")
            results.append(LabResult(lab, "created", str(lab_path)))
        elif not edited_by_learner(lab_path):
            lab_path.write_text(text, encoding="utf-8")
            results.append(LabResult(lab, "updated", str(lab_path)))
        elif not force:
            results.append(LabResult(
                lab, "refused",
                f"{lab_path} has your edits; not overwritten (use --force to replace it, a backup is kept)"))
        else:
            backup = backup_path(lab_path)
            shutil.copy2(lab_path, backup)
            lab_path.write_text(text, encoding="utf-8")
            results.append(LabResult(lab, "overwritten", f"your version was saved as {backup}"))
    return results
