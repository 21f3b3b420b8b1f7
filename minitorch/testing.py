"""What a lab's check cells need: a verdict against a tolerance, an optional library, a cell that
must wait for an exercise.

- ``report(name, got, want, rtol, atol)`` prints ``OK`` or ``WRONG`` with the evidence (the largest
  error and where, the NaN an unwritten output keeps) and returns the verdict; a lab prints it rather
  than a bare error the learner has to judge.
- ``optional_import("torch", "the race against cuDNN")`` is the module, or None after printing what
  was skipped and how to install it: a comparison with PyTorch never stops a lab.
- ``needs(done, what)`` stops a cell that depends on an exercise not yet written, naming it, instead
  of a ``NameError`` or a result computed from an untrained model.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

# The packages a lab may race against, with the name a learner knows and how it is installed.
_OPTIONAL = {"torch": ("PyTorch", 'pip install -e ".[gpu]"')}


def _host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy array, a device array (CuPy, emulator) or a minitorch Tensor."""
    if hasattr(a, "numpy") and callable(a.numpy):  # a minitorch Tensor
        return np.asarray(a.numpy())
    if isinstance(a, np.ndarray | np.generic | int | float | list | tuple):
        return np.asarray(a)
    from minitorch import backend  # a device array: only the backend knows how to copy it

    return np.asarray(backend.asnumpy(a))


def report(name: str, got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Print ``OK name: ...`` if every element satisfies |got - want| <= atol + rtol * |want| (NaN only
    where want is NaN), else ``WRONG name: ...`` with the worst element; return whether it was OK."""
    g, w = _host(got).astype(np.float64), _host(want).astype(np.float64)
    tolerance = ("tolerance " + " + ".join(([f"{atol:.1e}"] if atol else []) + ([f"{rtol:.0e}·|want|"] if rtol else []))
                 if atol or rtol else "exact")
    if g.shape != w.shape:
        print(f"WRONG {name}: shape {g.shape}, expected {w.shape}")
        return False
    if g.size == 0:
        print(f"OK    {name}: empty, as expected")
        return True
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w))  # a NaN or inf error is bad too
    bad &= ~(np.isnan(g) & np.isnan(w))       # NaN where NaN is expected is right
    bad |= np.isnan(g) != np.isnan(w)
    finite = err[np.isfinite(err)]
    largest = f"largest error {finite.max():.1e}" if finite.size else "no finite error"
    if not bad.any():
        print(f"OK    {name}: {largest} ({tolerance})")
        return True
    at = np.unravel_index(np.argmax(bad), bad.shape)
    where = f" at {tuple(int(i) for i in at)}" if g.ndim else ""
    nans = int(np.isnan(g).sum() - (np.isnan(g) & np.isnan(w)).sum())
    unwritten = f"; {nans} NaN (an element never written?)" if nans else ""
    print(f"WRONG {name}: {int(bad.sum())} of {bad.size} elements off{unwritten}; first{where}: "
          f"got {g[at]:.6g}, want {w[at]:.6g} ({largest}; {tolerance})")
    return False


def optional_import(module: str, what: str) -> ModuleType | None:
    """The module, or None after printing that `what` was skipped because it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        known, install = _OPTIONAL.get(module, (module, f"pip install {module}"))
        print(f"skipped {what}: {known} is not installed here (`{install}` brings it)")
        return None


class ExerciseNotDoneError(RuntimeError):
    """A cell that needs an exercise's result, run before that exercise was done."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of the traceback
        return [f"{type(self).__name__}: {self}"]


def needs(done: bool, what: str) -> None:
    """Stop this cell unless `done`, naming `what` it waits for."""
    if not done:
        raise ExerciseNotDoneError(f"this cell needs {what}: write it and run its cell first")
