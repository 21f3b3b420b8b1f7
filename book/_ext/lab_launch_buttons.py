"""Show the Colab/Binder launch buttons on lab pages only.

sphinx-book-theme adds launch buttons to every page that is a notebook, and the
chapters are MyST notebooks (they execute cells that draw figures). Colab cannot
open a MyST markdown file, and a chapter is not something to run anyway, so this
extension removes the launch-button group from every page outside ``labs/``.
"""

from __future__ import annotations

LAB_PREFIX = "labs/"


def _keep_launch_buttons_on_labs_only(app, pagename, templatename, context, doctree):
    if pagename.startswith(LAB_PREFIX):
        return
    buttons = context.get("header_buttons")
    if buttons:
        context["header_buttons"] = [
            b for b in buttons if not (isinstance(b, dict) and b.get("label") == "launch-buttons")
        ]


def setup(app):
    # Run after sphinx-book-theme's own html-page-context handler (default priority 500).
    app.connect("html-page-context", _keep_launch_buttons_on_labs_only, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
