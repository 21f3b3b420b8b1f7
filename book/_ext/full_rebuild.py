"""Re-read every page on every build, so that an incremental build never hides a warning.

Sphinx normally re-reads only the pages whose source changed since the last build; the
warnings of the other pages are not emitted again, and a second ``jupyter-book build``
reports success over a book that has problems. The chapters' figures also depend on files
Sphinx does not track (``benchmarks/results/*.json``, ``book/figures.py``), so an
unchanged chapter would keep stale figures. Marking every page outdated makes each build
equivalent to a clean one (``jupyter-book build --all``); the book is small, so this is cheap.
CI and ``make book`` build from a clean ``_build`` anyway.
"""

from __future__ import annotations


def _all_pages(app, env, added, changed, removed):
    return sorted(set(env.found_docs) - set(added) - set(changed) - set(removed))


def setup(app):
    app.connect("env-get-outdated", _all_pages)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
