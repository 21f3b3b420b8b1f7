"""Diagnoses that follow the evidence of a failure, not the failing test's name: a causal softmax's output over
scores of size 1e4 is explained by the known mistake it reproduces (computed in float32, as a kernel would), or by
the facts it shows; only the output of a softmax without its maximum subtracted is told to subtract it."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

from grader import paths


@pytest.fixture(scope="module")
def phase7():
    """The graded tests of Phase 7, as a module (their hint/kernel/perf marks are the grader plugin's)."""
    sys.path.insert(0, str(paths.GRADED_TESTS_DIR))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
            module = importlib.import_module("test_phase7")
        yield module
    finally:
        sys.path.remove(str(paths.GRADED_TESTS_DIR))


def scores() -> np.ndarray:
    return (np.random.default_rng(7).standard_normal((2, 33, 33)) * 1e4).astype(np.float32)


def test_each_known_mistake_is_named_by_its_own_output(phase7):
    s = scores()
    mistakes = phase7.softmax_mistakes(s, 0.25, True)
    assert len(mistakes) == 3
    for note, output in mistakes:
        assert phase7.softmax_evidence(output, s, 0.25, True) == note
    no_max, max_over_every_key, masked_after = (note for note, _ in mistakes)
    assert "subtract the row's maximum" in no_max
    assert "subtract the row's maximum" not in max_over_every_key + masked_after
    assert "masked after" in max_over_every_key and "zeroed after" in masked_after


def test_a_kernel_that_writes_its_masked_keys_as_0_is_named_too(phase7):
    """A kernel writes a masked key's 0 without dividing it (the warp and _rows kernels both do): where a row's
    exps all underflowed, its masked keys hold 0, not the 0 / 0 = NaN of the mistake as computed."""
    s = scores()
    masked = ~np.tril(np.ones((33, 33), bool))
    mistakes = phase7.softmax_mistakes(s, 0.25, True)
    assert np.isnan(mistakes[0][1][..., masked]).any()  # no maximum: rows of 0 / 0 at their masked keys too
    for note, output in mistakes:
        assert phase7.softmax_evidence(np.where(masked, 0, output), s, 0.25, True) == note


def test_other_outputs_are_described_by_their_facts(phase7):
    s = scores()
    right = phase7.softmax_reference(s, 0.25, True).astype(np.float32)
    assert phase7.softmax_evidence(right, s, 0.25, True) == ""
    leaked = right.copy()
    leaked[0, 3, 10] = 0.5  # a masked key (j > t) given probability
    assert phase7.softmax_evidence(leaked, s, 0.25, True).startswith("1 probabilities of masked keys (j > t) are not 0")
    unmasked = phase7.softmax_reference(s, 0.25, False).astype(np.float32)
    evidence = phase7.softmax_evidence(unmasked, s, 0.25, True)
    assert "masked keys (j > t) are not 0" in evidence and "do not sum to 1" in evidence, evidence


def test_sum_squares_says_grid_stride_only_for_the_first_grids_share(phase7):
    x = np.random.default_rng(3).standard_normal(9001).astype(np.float32)
    first = float((x[:192].astype(np.float64) ** 2).sum())
    assert "grid-stride loop" in phase7.sum_squares_evidence(first, x, 192)
    assert "grid-stride" not in phase7.sum_squares_evidence(float("nan"), x, 192)
    assert "grid-stride" not in phase7.sum_squares_evidence(3 * first, x, 192)
