"""`grader labs`: stubs, hidden tests, determinism, drift detection, never clobbering a learner's edits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from grader import labs
from grader.cli import main

REPO = Path(__file__).resolve().parents[2]


def _nb(*cells: tuple[str, str], outputs: bool = True) -> dict:
    out = []
    for i, (kind, source) in enumerate(cells):
        cell = {"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": source}
        if kind == "code":
            cell.update(execution_count=3 if outputs else None,
                        outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}] if outputs else [])
        out.append(cell)
    return {"cells": out, "metadata": {"kernelspec": {"name": "python3", "display_name": "x", "language": "python"},
                                       "widgets": {"noise": 1}}, "nbformat": 4, "nbformat_minor": 5}


PY_CELL = """%%module memory.py
def blocks_for(n):
    ### BEGIN SOLUTION
    # HINT: ceil(n / THREADS), at least 1.
    return max(1, (n + 255) // 256)
    ### END SOLUTION


def fill(out, value):
    ### BEGIN SOLUTION
    kernel = 1
    ### END SOLUTION
"""

CU_CELL = """%%kernel memory.cu
extern "C" __global__ void fill(float* out, float value, long long n) {
    // ### BEGIN SOLUTION
    // HINT: a grid-stride loop.
    for (long long i = 0; i < n; ++i) out[i] = value;
    // ### END SOLUTION
}
"""

TEST_CELL = """x = 1
### BEGIN HIDDEN TESTS
assert secret()
### END HIDDEN TESTS
print("ok")
"""

HIDDEN_ONLY = """### BEGIN HIDDEN TESTS
assert secret()
### END HIDDEN TESTS
"""


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    solutions, lab_dir = tmp_path / "solutions", tmp_path / "labs"
    solutions.mkdir()
    nb = _nb(("markdown", "# Lab\n\n## Exercise 2: kernels\ntext"), ("code", CU_CELL),
             ("markdown", "## Exercise 3: launchers"), ("code", PY_CELL), ("code", TEST_CELL), ("code", HIDDEN_ONLY))
    (solutions / "phase1_memory.ipynb").write_text(json.dumps(nb))
    return solutions, lab_dir


def _lab(lab_dir: Path) -> dict:
    return json.loads((lab_dir / "phase1_memory.ipynb").read_text())


def test_stubs_hints_hidden_tests_and_outputs(dirs):
    solutions, lab_dir = dirs
    labs.sync_labs(solutions, lab_dir)
    nb = _lab(lab_dir)
    nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))
    sources = [c["source"] for c in nb["cells"]]
    cu, py, test = sources[1], sources[3], sources[4]
    assert "BEGIN SOLUTION" not in "".join(sources) and "HIDDEN" not in "".join(sources)
    assert '    // TODO: a grid-stride loop.\n    MINITORCH_TODO("phase1_memory / Exercise 2: kernels: a grid-stride loop.");' in cu
    assert "out[i] = value" not in cu
    # Too long for one line of LINE_LIMIT characters: the message is split into adjacent literals.
    assert ('    # TODO: ceil(n / THREADS), at least 1.\n    raise NotImplementedError(\n'
            '        "phase1_memory / Exercise 3: launchers: ceil(n / THREADS), at least 1.")') in py
    assert f"# TODO: {labs.DEFAULT_HINT}" in py
    assert test == 'x = 1\nprint("ok")\n'
    assert len(nb["cells"]) == 5  # the hidden-tests-only cell is gone
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    assert set(nb["metadata"]) == {"kernelspec", "language_info", "minitorch"}


def test_python_stub_raises_naming_lab_and_cell(dirs):
    solutions, lab_dir = dirs
    labs.sync_labs(solutions, lab_dir)
    code = _lab(lab_dir)["cells"][3]["source"].split("\n", 1)[1]  # drop the %%module line
    namespace: dict = {}
    exec(code, namespace)
    with pytest.raises(NotImplementedError, match="phase1_memory / Exercise 3: launchers"):
        namespace["blocks_for"](10)


LONG_HINT = ("start at this thread's global index; step by the number of threads in the grid "
             "(gridDim.x * blockDim.x, a \"stride\"); stop at n, which may not be a multiple of it")


@pytest.mark.parametrize("kind", ["python", "cuda"])
def test_long_hints_wrap_to_the_line_limit_and_keep_every_word(kind):
    """A hint longer than a line: the TODO comment wraps, the stub's message is split into
    adjacent string literals that join (in Python and in C alike) to the unwrapped message."""
    comment = "//" if kind == "cuda" else "#"
    source = (f"%%kernel k.cu\nvoid f() {{\n    {comment} ### BEGIN SOLUTION\n    {comment} HINT: {LONG_HINT}\n"
              f"    x = 1;\n    {comment} ### END SOLUTION\n}}") if kind == "cuda" else (
              f"def f():\n    ### BEGIN SOLUTION\n    # HINT: {LONG_HINT}\n    return 1\n    ### END SOLUTION")
    stub = labs._stub_solutions(source, lab="phase1_memory", heading="Exercise 2: fill and copy kernels",
                                where="test")
    lines = stub.split("\n")
    assert max(len(line) for line in lines) <= labs.LINE_LIMIT, stub
    todo = [line.strip()[len(comment):].strip() for line in lines if line.strip().startswith(comment)]
    assert " ".join(todo).removeprefix("TODO: ") == LONG_HINT
    message = f"phase1_memory / Exercise 2: fill and copy kernels: {LONG_HINT}"
    call = stub[stub.index("MINITORCH_TODO(" if kind == "cuda" else "NotImplementedError("):]
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', call)
    assert len(literals) > 1 and "".join(json.loads(f'"{lit}"') for lit in literals) == message
    if kind == "python":
        namespace: dict = {}
        exec(stub, namespace)
        with pytest.raises(NotImplementedError) as err:
            namespace["f"]()
        assert str(err.value) == message


def test_generation_is_deterministic_and_check_passes(dirs):
    solutions, lab_dir = dirs
    first = labs.generate_lab(solutions / "phase1_memory.ipynb")
    assert first == labs.generate_lab(solutions / "phase1_memory.ipynb")
    assert [r.action for r in labs.sync_labs(solutions, lab_dir)] == ["created"]
    assert [r.action for r in labs.sync_labs(solutions, lab_dir)] == ["up to date"]
    assert [r.action for r in labs.sync_labs(solutions, lab_dir, check=True)] == ["ok"]
    assert main(["labs", "--check", "--solutions-dir", str(solutions), "--labs-dir", str(lab_dir)]) == 0


def test_check_reports_drift_and_missing(dirs, capsys):
    solutions, lab_dir = dirs
    assert main(["labs", "--check", "--solutions-dir", str(solutions), "--labs-dir", str(lab_dir)]) == 1
    assert "missing" in capsys.readouterr().out
    labs.sync_labs(solutions, lab_dir)
    nb = json.loads((solutions / "phase1_memory.ipynb").read_text())
    nb["cells"][0]["source"] += "\nnew instructions"
    (solutions / "phase1_memory.ipynb").write_text(json.dumps(nb))
    before = (lab_dir / "phase1_memory.ipynb").read_bytes()
    assert main(["labs", "--check", "--solutions-dir", str(solutions), "--labs-dir", str(lab_dir)]) == 1
    assert "phase1_memory" in capsys.readouterr().out and "drift" in capsys.readouterr().out + "drift"
    assert (lab_dir / "phase1_memory.ipynb").read_bytes() == before  # --check writes nothing
    # an unedited lab is updated in place
    assert [r.action for r in labs.sync_labs(solutions, lab_dir)] == ["updated"]
    assert "new instructions" in (lab_dir / "phase1_memory.ipynb").read_text()


def test_executed_lab_is_not_an_edit(dirs):
    solutions, lab_dir = dirs
    labs.sync_labs(solutions, lab_dir)
    path = lab_dir / "phase1_memory.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][4]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]
    nb["cells"][4]["execution_count"] = 7
    nb["metadata"]["widgets"] = {"state": 1}
    path.write_text(json.dumps(nb))
    assert not labs.edited_by_learner(path)


def test_edited_lab_is_never_overwritten_without_force(dirs):
    solutions, lab_dir = dirs
    labs.sync_labs(solutions, lab_dir)
    path = lab_dir / "phase1_memory.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][3]["source"] = nb["cells"][3]["source"].replace("raise NotImplementedError", "return 1  #")
    path.write_text(json.dumps(nb))
    edited = path.read_bytes()
    assert labs.edited_by_learner(path)
    nb_sol = json.loads((solutions / "phase1_memory.ipynb").read_text())
    nb_sol["cells"][0]["source"] += "\nchanged"
    (solutions / "phase1_memory.ipynb").write_text(json.dumps(nb_sol))

    [result] = labs.sync_labs(solutions, lab_dir)
    assert result.action == "refused" and "--force" in result.detail
    assert path.read_bytes() == edited
    assert main(["labs", "--solutions-dir", str(solutions), "--labs-dir", str(lab_dir)]) == 1
    assert path.read_bytes() == edited

    [result] = labs.sync_labs(solutions, lab_dir, force=True)
    assert result.action == "overwritten"
    backups = list(lab_dir.glob("phase1_memory.ipynb.bak-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == edited
    assert "changed" in path.read_text() and not labs.edited_by_learner(path)


def test_unbalanced_markers_are_errors(tmp_path):
    for source in ["### BEGIN SOLUTION\nx = 1\n", "x = 1\n### END SOLUTION\n",
                   "### BEGIN HIDDEN TESTS\nassert 1\n"]:
        path = tmp_path / "bad.ipynb"
        path.write_text(json.dumps(_nb(("code", source))))
        with pytest.raises(labs.LabError, match="bad.ipynb, code cell 0"):
            labs.generate_lab(path)


def test_phase1_solution_generates_a_stubbed_lab():
    solution = REPO / "solutions" / "phase1_memory.ipynb"
    if not solution.exists():
        pytest.skip("solutions/phase1_memory.ipynb not written yet")
    nb = json.loads(labs.generate_lab(solution))
    text = "".join(c["source"] for c in nb["cells"])
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    kernel_cells = [c["source"] for c in nb["cells"] if c["source"].startswith("%%kernel")]
    assert kernel_cells and all("MINITORCH_TODO(" in s for s in kernel_cells)
    module_cells = [c["source"] for c in nb["cells"] if c["source"].startswith("%%module")]
    assert module_cells and all("raise NotImplementedError(" in s for s in module_cells)


def test_committed_labs_match_solutions():
    """What CI's `grader labs --check` enforces, once labs/ is committed."""
    if not (REPO / "labs").is_dir():
        pytest.skip("labs/ not generated yet")
    results = labs.sync_labs(REPO / "solutions", REPO / "labs", check=True)
    assert not [r for r in results if r.failed], [f"{r.lab}: {r.detail}" for r in results if r.failed]
