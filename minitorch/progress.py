"""A small text progress bar (no dependencies): ``for epoch in progress(range(5000), desc="XOR"): ...``.

It redraws one line with a carriage return (which terminals and Jupyter both honour), at most every
``min_interval`` seconds, and ``write()`` prints a line above it (a loss every 500 epochs).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

__all__ = ["Progress", "progress"]


def _fmt_seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 60 else f"{int(s // 60)}m{int(s % 60):02d}s"


class Progress:
    """Iterate over ``iterable`` while drawing ``desc [#####.....] done/total elapsed<eta``."""

    def __init__(self, iterable: Iterable[T], total: int | None = None, desc: str = "", width: int = 30,
                 file: TextIO | None = None, min_interval: float = 0.2) -> None:
        self.iterable = iterable
        if total is None:
            total = len(iterable) if hasattr(iterable, "__len__") else None  # type: ignore[arg-type]
        self.total, self.desc, self.width = total, desc, width
        self.file = file if file is not None else sys.stdout
        self.min_interval = min_interval
        self.done = 0
        self._start = self._last = 0.0
        self._drawn = False

    def line(self) -> str:
        elapsed = time.perf_counter() - self._start
        head = f"{self.desc} " if self.desc else ""
        if not self.total:
            return f"{head}{self.done} {_fmt_seconds(elapsed)}"
        frac = min(1.0, self.done / self.total)
        filled = int(round(frac * self.width))
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (f"{head}[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{_fmt_seconds(elapsed)}<{_fmt_seconds(eta)}")

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self._last >= self.min_interval:
            self.file.write("\r" + self.line())
            self.file.flush()
            self._last, self._drawn = now, True

    def write(self, text: str) -> None:
        """Print a line of text above the bar."""
        if self._drawn:
            self.file.write("\r" + " " * len(self.line()) + "\r")
        self.file.write(text + "\n")
        self._draw(force=True)

    def __iter__(self) -> Iterator[Any]:
        self._start = time.perf_counter()
        self._draw(force=True)
        for item in self.iterable:
            yield item
            self.done += 1
            self._draw()
        self._draw(force=True)
        self.file.write("\n")
        self.file.flush()


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", **kwargs: Any) -> Progress:
    """A :class:`Progress` over ``iterable``: iterate over it; call ``.write(text)`` to print above the bar."""
    return Progress(iterable, total=total, desc=desc, **kwargs)
