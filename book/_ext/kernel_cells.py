"""Highlight ``%%kernel`` code cells as CUDA C, not Python.

myst-nb gives every code cell the notebook's language (Python), so in a ``%%kernel`` cell an
apostrophe in a ``//`` comment (``thread's``) painted the rest of the line as a string. This
re-lexes each literal block whose first line is ``%%kernel`` with a CUDA lexer that also knows
that magic line (plain Pygments CUDA would flag ``%%`` as an error, a warning under ``-W``).
"""

from __future__ import annotations

from docutils import nodes
from pygments.lexer import inherit
from pygments.lexers.c_like import CudaLexer
from pygments.token import Comment

LANGUAGE = "cuda-kernel-cell"


class KernelCellLexer(CudaLexer):
    """CUDA C, with a leading ``%%kernel file.cu`` cell magic shown as a preprocessor line."""

    name = "CUDA kernel cell"
    aliases = [LANGUAGE]
    tokens = {"root": [(r"\A%%kernel[^\n]*\n", Comment.Preproc), inherit]}


def _relex(app, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        if block.astext().lstrip().startswith("%%kernel"):
            block["language"] = LANGUAGE


def setup(app):
    app.add_lexer(LANGUAGE, KernelCellLexer)
    app.connect("doctree-read", _relex)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
