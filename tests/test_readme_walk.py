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
