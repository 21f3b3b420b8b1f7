"""grader.checks comparisons (messages the learner reads) and grader.report rendering."""

from __future__ import annotations

import re

import numpy as np
import pytest

from grader import checks
from grader.report import CRASH, FAIL, NOT_MEASURED, PASS, SKIP, CheckResult, PhaseReport, render_report, render_table


def test_equal_arrays_pass_including_nan_and_inf():
    a = np.array([1.0, np.nan, np.inf, -np.inf, -0.0], np.float32)
    checks.assert_close(a, a.astype(np.float64), rtol=0)


def test_first_bad_index_expected_got_and_errors():
    expected = np.arange(10, dtype=np.float64)
    got = expected.astype(np.float32).copy()
    got[3], got[7] = 3.5, 9.0
    with pytest.raises(checks.GradeError) as err:
        checks.assert_close(got, expected, rtol=1e-6, what="fill")
    msg = str(err.value)
    assert "fill: 2 of 10 values differ" in msg
    assert "first bad index 3: expected 3.0, got 3.5" in msg
    assert "max abs error 2, max rel error 0.286" in msg


def test_multidimensional_index_and_never_written():
    expected = np.ones((3, 4))
    got = np.ones((3, 4), np.float32)
    got[1, 2:] = checks.poisoned_host(2)
    with pytest.raises(checks.GradeError, match=r"first bad index \(1, 2\): expected 1.0, got nan \(still NaN: poisoned"):
        checks.assert_close(got, expected)


def test_precision_loss_is_named():
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(1000).astype(np.float32)
    half = exact.astype(np.float16).astype(np.float32)
    with pytest.raises(checks.GradeError) as err:
        checks.assert_close(half, exact.astype(np.float64), rtol=0)
    assert "precision loss" in str(err.value) and "max rel error" in str(err.value)


def test_shape_mismatch():
    with pytest.raises(checks.GradeError, match=r"shape \(3,\), expected \(4,\)"):
        checks.assert_close(np.zeros(3, np.float32), np.zeros(4))


def test_bitwise_catches_negative_zero_and_nan_payload():
    a = np.array([0.0, 1.0], np.float32)
    b = np.array([-0.0, 1.0], np.float32)
    with pytest.raises(checks.GradeError, match=r"first bad index 0: expected -0.0 \(0x80000000\), got 0.0 \(0x00000000\)"):
        checks.assert_bitwise_equal(a, b)
    checks.assert_bitwise_equal(b, b.copy())


def test_odd_sizes_are_odd():
    assert checks.ODD_SIZES[0] == 1 and max(checks.ODD_SIZES) > 1_000_000
    assert all(n % 32 for n in checks.ODD_SIZES)


def test_thresholds_file_has_phase1_keys():
    for key in ("phase1.fill", "phase1.copy", "phase1.transfer"):
        assert 0 < checks.threshold(key) <= 1
    with pytest.raises(KeyError, match="phase1.nope"):
        checks.threshold("phase1.nope")


def test_seed_is_reproducible_from_env(monkeypatch):
    monkeypatch.setattr(checks, "_seed", None)
    monkeypatch.setenv("GRADER_SEED", "1234")
    assert checks.seed() == 1234
    assert np.array_equal(checks.rng("x", 7).random(3), checks.rng("x", 7).random(3))
    assert not np.array_equal(checks.rng("x", 7).random(3), checks.rng("x", 8).random(3))


def test_table_wraps_long_cells():
    text = render_table([["a", "word " * 20]], ["name", "text"], [10, 30])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1  # a rectangle
    assert sum("word" in line for line in lines) >= 3


def _report(*results: str, require_perf: bool = False) -> PhaseReport:
    r = PhaseReport("phase1", "GPU memory", "emu", 7, require_perf=require_perf)
    r.checks = [CheckResult(f"test_{i}", res, reason="why\nmore") for i, res in enumerate(results)]
    return r


def test_passed_rules():
    assert _report(PASS, SKIP, NOT_MEASURED).passed
    assert not _report(PASS, NOT_MEASURED, require_perf=True).passed
    assert not _report(PASS, FAIL).passed
    assert not _report(PASS, CRASH).passed
    assert not _report().passed  # nothing ran: nothing passed


def test_rendered_report_shows_table_details_and_verdict():
    r = _report(PASS, FAIL)
    r.checks[1].hint = "check i < n"
    r.checks.append(CheckResult("test_perf", PASS, measured="1500 GB/s = 0.91x ref (>= 0.60x)"))
    text = render_report(r)
    assert "| check" in text and "measured vs threshold" in text
    assert "check i < n" in text and "0.91x ref (>= 0.60x)" in text
    assert "Details" in text and "- test_1 [FAIL]" in text
    assert text.rstrip().endswith("phase1: NOT PASSED") and "seed 7" in text
    assert '"passed": false' in r.to_json()


def _launcher(launch_first: bool):
    """A launcher that checks its argument, launching the emulator's fill first when told to (the bug)."""
    from minitorch import emu, kernels

    kernel = kernels.Kernel("memory.cu", "fill", emu.RawModule(code=(
        'extern "C" __global__ void fill(float* out, float v, long long n) '
        "{ if (threadIdx.x < n) out[threadIdx.x] = v; }")).get_function("fill"), None)

    def launch(n: int) -> None:
        if launch_first:
            kernel((1,), (4,), (emu.zeros(4, np.float32), np.float32(1), np.int64(4)))
        if n != 4:
            raise ValueError(f"fill expects 4 elements, got {n}")
    return launch


def test_expect_error_passes_a_clear_error_raised_before_any_launch():
    checks.expect_error("fill of 3", lambda: _launcher(False)(3), ValueError, "4", "3")


@pytest.mark.parametrize("fn, why", [
    (lambda: _launcher(False)(3), "must name what was expected and what came (7 missing)"),
    (lambda: _launcher(False)(4), "expected a ValueError naming 7, got no error"),
])
def test_expect_error_rejects_a_vague_or_missing_error(fn, why):
    with pytest.raises(checks.GradeError, match=re.escape(why)):
        checks.expect_error("fill", fn, ValueError, "7")


def test_expect_error_rejects_a_launch_before_the_error():
    with pytest.raises(checks.GradeError, match=r"a kernel \(memory.cu:fill\) was launched before the ValueError"):
        checks.expect_error("fill of 3", lambda: _launcher(True)(3), ValueError, "4", "3")


# ---------------------------------------------------------------- reported figures: measurements, not checks


def test_no_bar_of_the_thresholds_file_is_zero():
    """A ratio of at least 0.0 cannot fail: a figure that is reported and never required says "reported"
    (and is shown as INFO), it never hides behind a bar of zero."""
    zeros, reported = [], []

    def walk(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif value == checks.REPORTED:
                reported.append(prefix + key)
            elif not isinstance(value, str) and value == 0:
                zeros.append(prefix + key)

    walk(checks.thresholds())
    assert zeros == []
    assert {"phase2.transpose_naive", "phase4.sum_atomic", "phase4.sum_shared",
            "phase7.attention_vs_sdpa"} <= set(reported)
    assert all(checks.is_reported(key) for key in reported)
    assert not checks.is_reported("phase1.fill") and not checks.is_reported("phase1.nope")


def _timed_perf_ratio(monkeypatch, tmp_path, bar: str, learner_s: float, reference_s: float):
    (tmp_path / "t.toml").write_text(f"[phase9]\nfigure = {bar}\n")
    monkeypatch.setenv("GRADER_THRESHOLDS", str(tmp_path / "t.toml"))
    monkeypatch.setattr(checks, "gpu_available", lambda: True)
    times = {"learner": learner_s, "reference": reference_s}
    monkeypatch.setattr(checks, "time_cuda", lambda fn, **_: times[fn()])
    recorded = []
    record = checks.perf_ratio("figure", lambda: "learner", lambda: "reference", 1e9, "phase9.figure",
                               lambda key, value: recorded.append((key, value)))
    return record, recorded


def test_a_reported_figure_is_recorded_without_a_bar_and_never_fails(monkeypatch, tmp_path):
    record, recorded = _timed_perf_ratio(monkeypatch, tmp_path, '"reported"', learner_s=1.0, reference_s=0.01)
    assert recorded == [("perf", record)]
    assert record["reported"] is True and record["threshold"] is None
    assert record["ratio"] == pytest.approx(0.01)   # measured all the same: 1 GB/s against 100 GB/s


def test_a_figure_with_a_bar_is_still_enforced(monkeypatch, tmp_path):
    with pytest.raises(checks.GradeError, match=r"0\.01x .*at least 0\.50x is needed \(phase9\.figure"):
        _timed_perf_ratio(monkeypatch, tmp_path, "0.5", learner_s=1.0, reference_s=0.01)
    record, _ = _timed_perf_ratio(monkeypatch, tmp_path, "0.5", learner_s=1.0, reference_s=0.9)
    assert record["threshold"] == 0.5 and "reported" not in record


def test_value_checks_fail_as_wrong_values_in_words_that_survive_a_re_raise():
    """grader/tests/conftest.py asks the emulator's check mode about value failures only (not a launch shape or
    a count): by their type, or by their words when a test re-raises them as a plain GradeError."""
    with pytest.raises(checks.WrongValuesError) as close:
        checks.assert_close(np.ones(3, np.float32), np.zeros(3))
    with pytest.raises(checks.WrongValuesError) as bitwise:
        checks.assert_bitwise_equal(np.ones(3, np.float32), np.zeros(3, np.float32))
    for err in (close, bitwise):
        assert any(w in str(err.value) for w in checks.WRONG_VALUES_WORDS), err.value


def _float32_adam(p0: np.ndarray, grads: list[np.ndarray], lr: float, wd: float, *, fused: bool = False) -> np.ndarray:
    """Adam with L2 weight decay in float32, as a kernel computes it from the float32 values it is given; `fused`:
    g + wd * p rounded once (a GPU's fused multiply-add), else the product rounded first (the emulator on x86)."""
    f32 = np.float32
    p, m, v = p0.astype(f32), np.zeros(p0.size, f32), np.zeros(p0.size, f32)
    for t, g in enumerate(grads, start=1):
        g = (g.astype(f32) + np.float64(f32(wd)) * p).astype(f32) if fused else g.astype(f32) + f32(wd) * p
        m, v = f32(0.9) * m + f32(0.1) * g, f32(0.999) * v + f32(0.001) * g * g
        c1, c2 = f32(1 - 0.9**t), f32(1 - 0.999**t)
        p = p - f32(lr) * (m / c1) / (np.sqrt(v / c2) + f32(1e-8))
    return p


def test_adam_cases_are_off_the_steep_slope_of_the_first_step(monkeypatch):
    """Phase 5's Adam check on a case whose first gradient nearly cancels its weight decay at one weight
    (|g + wd*p| ~ 1e-7, where g / (|g| + eps) is steep): as drawn, a float32 Adam fails it at that weight (an
    honest kernel failed so on an H200, 2026-11-27); moved off the slope (off_the_steep), it passes, with or
    without a fused multiply-add, and a weight off by 3e-5 still fails."""
    from pathlib import Path

    from minitorch import optim

    monkeypatch.syspath_prepend(str(Path(checks.__file__).parent / "tests"))  # the graded tests' own helpers
    from grader.tests.test_phase5_training import check_adam, off_the_steep

    r = np.random.default_rng(1880)  # drawn as the grader draws: weight 2868 is on the slope
    p0 = r.standard_normal(4099)
    grads = [r.standard_normal(4099) * r.uniform(0.1, 3) for _ in range(6)]
    kw = dict(lr=0.01, weight_decay=0.1)
    with pytest.raises(checks.GradeError, match="first bad index 2868"):
        check_adam(_float32_adam(p0, grads, 0.01, 0.1), p0, grads, "as drawn", optim.Adam, **kw)
    moved = off_the_steep(p0, grads, 0.1, decoupled=False)
    changed = np.flatnonzero(moved[0] != grads[0])
    assert 2868 in changed and changed.size < 41 and np.all(np.abs(moved[0] + 0.1 * p0) >= 1e-3)  # under 1%
    grads = moved
    for fused in (False, True):
        got = _float32_adam(p0, grads, 0.01, 0.1, fused=fused)
        check_adam(got, p0, grads, "off the slope", optim.Adam, **kw)
    got[7] += 3e-5
    with pytest.raises(checks.GradeError, match="1 of 4099 values differ"):
        check_adam(got, p0, grads, "off by 3e-5 at one weight", optim.Adam, **kw)
