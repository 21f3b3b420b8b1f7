"""minitorch.testing, what the labs' check cells print: a verdict against a tolerance that a NaN (an output
never written) cannot pass, an optional comparison that says what it skipped, a cell that names the exercise
it waits for."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from minitorch import testing


def test_report_says_ok_within_the_tolerance(capsys):
    want = np.linspace(-2, 2, 12).reshape(3, 4)
    assert testing.report("conv", want * (1 + 1e-7), want, rtol=1e-5)
    assert capsys.readouterr().out.startswith("OK    conv: largest error")


def test_report_says_wrong_and_where(capsys):
    want = np.zeros((2, 3))
    got = want.copy()
    got[1, 2] = 55.0  # a direct convolution that ignores the stride, say
    assert not testing.report("direct", got, want, rtol=1e-5, atol=1e-4)
    out = capsys.readouterr().out
    assert out.startswith("WRONG direct: 1 of 6 elements off") and "(1, 2)" in out and "got 55" in out


def test_report_catches_a_nan_after_finite_values(capsys):
    """Python's max() ignores a NaN that follows a finite value: the verdict must not."""
    want = np.ones(4)
    got = np.array([1.0, 1.0, np.nan, 1.0])
    assert max([0.0, float("nan")]) == 0.0  # the trap
    assert not testing.report("rung", got, want)
    assert "1 NaN" in capsys.readouterr().out


def test_report_accepts_nan_only_where_nan_is_wanted(capsys):
    assert testing.report("nan", np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    assert not testing.report("nan", np.array([1.0, 1.0]), np.array([np.nan, 1.0]))


def test_report_names_a_wrong_shape(capsys):
    assert not testing.report("y", np.zeros((3, 7, 5, 5)), np.zeros((3, 7, 7, 6)))
    assert "shape (3, 7, 5, 5), expected (3, 7, 7, 6)" in capsys.readouterr().out


def test_report_reads_device_arrays_and_tensors(capsys):
    import minitorch
    from minitorch import backend

    want = np.arange(6, dtype=np.float32)
    assert testing.report("tensor", minitorch.tensor(want), want)
    assert testing.report("array", backend.asarray(want), want)


def test_optional_import_says_what_was_skipped(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert testing.optional_import("torch", "the race against cuDNN") is None
    out = capsys.readouterr().out
    assert "skipped the race against cuDNN: PyTorch is not installed" in out and '.[gpu]' in out


def test_needs_names_the_exercise():
    testing.needs(True, "Exercise 7")
    with pytest.raises(testing.ExerciseNotDoneError, match="needs Exercise 7 .train_step."):
        testing.needs(False, "Exercise 7 (train_step)")
