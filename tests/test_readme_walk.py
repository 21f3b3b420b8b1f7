"""A newcomer's first hour, from the README alone: a fresh clone, the README's commands for the path without
a GPU, and Lab 1 up to its first kernel running. No browser: JupyterLab's server is replaced by a headless
run (nbconvert) of Lab 1's first cells, then of the learner's first `%%kernel` cell and a launch of it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def readme_block(name: str) -> list[str]:
    """The commands of the fenced block after ``<!-- readme-walk: name -->`` in the README."""
    text = (REPO / "README.md").read_text()
    match = re.search(rf"<!-- readme-walk: {name} -->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"README.md has no block marked readme-walk: {name}"
    return [re.sub(r"\s+#.*$", "", line).strip() for line in match.group(1).splitlines() if line.strip()]


def first_hour_notebook(lab: Path, out: Path) -> None:
    """Lab 1's cells before Exercise 2, then its %%kernel cell with a learner's fill and copy, then a launch."""
    from grader.labs import learner_files

    nb = json.loads(lab.read_text())
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if source.startswith("## Exercise 2"):
            break
        cells.append(cell)
    memory_cu = learner_files(REPO / "solutions" / "phase1_memory.ipynb")["memory.cu"]
    launch = ("out = backend.empty((1000,))\n"
              "kernels.load_kernel('memory.cu', 'fill')((4,), (256,), (out, np.float32(2.5), np.int64(1000)))\n"
              "assert (backend.asnumpy(out) == 2.5).all()\n"
              "print('first kernel ran on', DEVICE)\n")
    for source in ("%%kernel memory.cu\n" + memory_cu, launch):
        cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source})
    nb["cells"] = cells
    out.write_text(json.dumps(nb))


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, f"`{command}` failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_readme_gets_a_newcomer_to_a_running_kernel_without_a_gpu(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    setup, no_gpu = readme_block("setup"), readme_block("no-gpu")
    clone_cmd = setup[0].split("&&")
    assert clone_cmd[0].strip().startswith("git clone") and clone_cmd[1].strip() == "cd minitorch-cuda"
    # The clone: of this repository's HEAD, as a learner's clone of the published course.
    run(f"git clone --quiet {REPO} minitorch-cuda", tmp_path, dict(os.environ))
    clone = tmp_path / "minitorch-cuda"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINITORCH_", "GRADER_", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH="", MINITORCH_DATA_DIR=os.environ.get("MINITORCH_DATA_DIR", ""))
    python = Path(sys.executable).resolve()
    steps = [c.replace("python3 ", f"{python} ", 1) if c.startswith("python3 ") else c for c in setup[1:]]
    notebook = tmp_path / "first_hour.ipynb"
    first_hour_notebook(clone / "labs" / "phase1_memory.ipynb", notebook)
    lab = [c for c in no_gpu if c.startswith("jupyter lab ")]
    assert lab == ["jupyter lab labs/phase1_memory.ipynb"], no_gpu
    headless = (f"jupyter lab --version && jupyter nbconvert --to notebook --execute "
                f"--ExecutePreprocessor.timeout=300 --output {tmp_path / 'ran.ipynb'} {notebook}")
    walk = [*steps, *(headless if c in lab else c for c in no_gpu), "grader status"]
    out = run(" && ".join(walk), clone, env)
    ran = json.loads((tmp_path / "ran.ipynb").read_text())
    texts = [o.get("text", "") for c in ran["cells"] for o in c.get("outputs", [])]
    printed = "".join("".join(t) if isinstance(t, list) else t for t in texts)
    assert "first kernel ran on emu" in printed, printed
    assert "wrote memory.cu" in printed and "compiled for 'emu'" in printed, printed
    assert re.search(r"\d+\.\d+\.\d+", out)  # jupyter lab --version
    assert re.search(r"phase1 .*UNLOCKED", out) and re.search(r"phase2 .*LOCKED", out), out  # grader status


def test_readme_gpu_path_installs_cupy_and_what_the_labs_race_against(monkeypatch, capsys):
    """The README's GPU block, as written: its install names an extra of pyproject.toml that brings CuPy and
    PyTorch, its other commands are the ones walked without a GPU above; and a lab on a GPU where PyTorch is
    missing still runs, each race against PyTorch saying what it skipped (no GPU here: the cells run with
    DEVICE = "cuda" and `import torch` failing, which is all they reach without PyTorch)."""
    import ast
    import shlex
    import tomllib

    from minitorch import testing

    gpu, no_gpu = readme_block("gpu"), readme_block("no-gpu")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [shlex.split(c) for c in gpu if c.startswith("pip install")]
    assert installs, f"the README's GPU block installs nothing: {gpu}"
    for words in installs:
        assert words[:4] == ["pip", "install", "-e", words[3]] and words[3].startswith(".["), words
        for extra in words[3][2:-1].split(","):
            packages = extras.get(extra)
            assert packages, f"README installs the extra {extra!r}, which pyproject.toml does not define"
            assert any(p.startswith("cupy-cuda") for p in packages) and any(p.startswith("torch") for p in packages)
    assert [c for c in gpu if not c.startswith("pip install")] == [c for c in no_gpu if c.startswith("jupyter")]

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    ran = 0
    for lab in sorted((REPO / "labs").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(lab.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "torch" not in source or source.startswith("%%"):
                continue
            tree = ast.parse("\n".join(line for line in source.splitlines() if not line.startswith("%")))
            guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                       and any("ImportError" in ast.unparse(h.type or ast.Name("")) for h in t.handlers)
                       for n in ast.walk(t)}
            bare = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import)
                    and any(a.name == "torch" for a in n.names) and id(n) not in guarded]
            assert not bare, f"{lab.name} cell {i} imports torch without a guard (line {bare})"
            if 'optional_import("torch"' in source:
                try:
                    exec(compile(source, f"{lab.name}[{i}]", "exec"), {"DEVICE": "cuda", "testing": testing, "trained": True})
                except ModuleNotFoundError as err:  # past the skip, a cell may go on with CuPy (Phase 8a: fp16
                    if err.name != "cupy":            # against cupy.matmul), which the GPU path brings and this
                        raise                         # machine lacks
                printed = capsys.readouterr().out
                assert printed.startswith("skipped ") and "PyTorch is not installed" in printed, printed
                ran += 1
    assert ran >= 2  # Lab 6's race against cuDNN and its epoch against PyTorch
