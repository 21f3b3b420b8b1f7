"""Append Phase 5's training cells (the fused Adam exercise) to solutions/phase5_fast.ipynb.

Run once at merge: ``.venv/bin/python dev/phase5_training_cells.py``. The headings match the
``KERNEL_FILES`` entries for adam.cu / adam.py. When the notebook does not exist (a helper's branch),
``--stand-in`` makes a minimal one for local testing; never commit it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dev.phase5_training_sources import ADAM_CU, ADAM_PY  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "solutions" / "phase5_fast.ipynb"

INTRO = """## Adam, fused

SGD moves every weight by the same multiple of its gradient. Adam keeps two running averages per
weight, of the gradient (m) and of its square (v), and divides one by the square root of the other,
so each weight gets its own step size. Both averages start at zero and are biased towards it early
on: dividing by 1 - beta**t corrects that (without it the first steps are about 3x too large).
AdamW applies weight decay to the weight directly instead of adding it to the gradient.

One step reads param, grad, m, v and writes param, m, v: 28 bytes per weight. Written as separate
elementwise ops it would move several times that; one fused kernel moves it once."""

CELLS = [
    ("markdown", INTRO),
    ("markdown", "### Exercise: the fused Adam update"),
    ("code", ADAM_CU.rstrip("\n")),
    ("markdown", "### Exercise: launching the Adam update"),
    ("code", ADAM_PY.rstrip("\n")),
    ("code", """import numpy as np
import minitorch
from minitorch import optim

p = minitorch.tensor(np.array([1.0, -2.0, 3.0], dtype=np.float32), requires_grad=True)
opt = optim.Adam([p], lr=0.1)
p.grad = minitorch.tensor(np.array([0.5, -0.5, 2.0], dtype=np.float32))
opt.step()
print(p.numpy())  # each weight moved by ~lr = 0.1 against its gradient's sign"""),
]


def main() -> None:
    stand_in = "--stand-in" in sys.argv
    if NOTEBOOK.exists():
        nb = nbformat.read(NOTEBOOK, as_version=4)
    elif stand_in:
        nb = nbformat.v4.new_notebook()
        nb.cells.append(nbformat.v4.new_markdown_cell("# Phase 5 (stand-in: do not commit)"))
    else:
        sys.exit(f"{NOTEBOOK} does not exist (pass --stand-in to make a local stand-in)")
    sources = {"".join(c.source) for c in nb.cells}
    if any(src.startswith("%%kernel adam.cu") for src in sources):
        sys.exit("the notebook already has the adam.cu cell: nothing to do")
    for kind, text in CELLS:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(make(text))
    nbformat.write(nb, NOTEBOOK)
    print(f"appended {len(CELLS)} cells to {NOTEBOOK}")


if __name__ == "__main__":
    main()
