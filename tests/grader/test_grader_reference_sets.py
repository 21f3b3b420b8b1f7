"""Issue #27: when the learner's calls are timed over fresh sets of arrays (its code in its own process), the
performance check's reference is timed over as many fresh sets (grader.checks.time_reference_over_sets), not on
the same arrays again and again; in the learner's process both keep checks.time_cuda."""

from __future__ import annotations

import numpy as np
import pytest

from grader import checks
from minitorch import kernels


def _is_numpy(v):
    return isinstance(v, np.ndarray)


def _copy_reference(n: int):
    src, dst = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    return (lambda: np.copyto(dst, src)), src, dst


def test_arrays_in_closure_finds_the_arrays_of_nested_closures_only():
    ref, src, dst = _copy_reference(5)
    scale = 2.0

    def outer():
        ref()
        return scale

    found = checks.arrays_in_closure(outer, _is_numpy)
    assert sorted(found) == sorted([id(src), id(dst)])  # not the float, not np (a global), not the function


def test_rebound_references_each_work_on_their_own_set():
    ref, src, dst = _copy_reference(7)
    arrays = checks.arrays_in_closure(ref, _is_numpy)
    reps = 5
    sets = [{key: np.full_like(a, -1.0) for key, a in arrays.items()} for _ in range(reps)]
    for i, s in enumerate(sets):
        s[id(src)][:] = src + 10 * i
    seen = []

    def wrapped():  # the reference the timing calls: which arrays does each call reach?
        seen.append(tuple(cell.cell_contents.__array_interface__["data"][0]
                          for cell in ref.__closure__ if _is_numpy(cell.cell_contents)))
        ref()

    calls = [checks.rebind_closure(wrapped, s) for s in sets]
    for call in calls:
        call()
    assert np.all(dst == 0)  # the original arrays are left alone
    assert len(set(seen)) == reps  # each call its own set
    for i, s in enumerate(sets):
        np.testing.assert_array_equal(s[id(dst)], src + 10 * i)


def _fake_perf(monkeypatch, *, elsewhere: bool, sets):
    calls = []
    monkeypatch.setattr(checks, "gpu_available", lambda: True)
    monkeypatch.setattr(kernels, "learner_code_elsewhere", lambda: elsewhere)
    monkeypatch.setattr(checks, "time_cuda", lambda fn, **_: calls.append("time_cuda") or 2e-3)
    monkeypatch.setattr(checks, "_time_learner", lambda *a, **k: calls.append("learner") or (1e-3, sets))
    monkeypatch.setattr(checks, "time_reference_over_sets",
                        lambda fn, reps: calls.append(("over_sets", reps)) or (4e-3, reps))
    records = {}
    checks.perf_ratio("x", lambda: None, lambda: None, 1e6, "phase1.fill", records.__setitem__)
    return calls, records["perf"]


def test_isolated_timing_times_the_reference_over_as_many_fresh_sets(monkeypatch):
    calls, record = _fake_perf(monkeypatch, elsewhere=True, sets=37)
    assert calls == ["learner", ("over_sets", 37)]
    assert record["reference_seconds"] == 4e-3 and record["sets"] == 37 and record["reference_sets"] == 37


def test_in_process_timing_is_unchanged(monkeypatch):
    calls, record = _fake_perf(monkeypatch, elsewhere=False, sets=None)
    assert calls == ["time_cuda", "learner"]  # the reference first, on its own arrays, as calibrated
    assert record["reference_seconds"] == 2e-3 and "reference_sets" not in record


def test_isolated_without_fresh_sets_keeps_time_cuda(monkeypatch):
    """A learner's call the replay cannot copy (a Tensor: whole calls timed on the same arrays): nor is the
    reference."""
    calls, record = _fake_perf(monkeypatch, elsewhere=True, sets=None)
    assert calls == ["learner", "time_cuda"]


@pytest.mark.gpu
def test_reference_over_sets_reaches_distinct_device_arrays():
    cupy = pytest.importorskip("cupy")
    n = 1 << 22
    src, dst = cupy.arange(n, dtype=cupy.float32), cupy.zeros(n, cupy.float32)
    seen = []

    def reference():
        seen.append((src.data.ptr, dst.data.ptr))
        cupy.copyto(dst, src)

    seconds, reps = checks.time_reference_over_sets(reference, 16)
    assert 2 <= reps <= 16 and seconds > 0  # 16 on the cuda device; fewer under the emulator's memory budget
    rounds = len(seen) // reps
    assert rounds * reps == len(seen) and rounds >= 2
    assert len(set(seen[:reps])) == reps  # distinct arrays in a round
    assert (src.data.ptr, dst.data.ptr) not in seen
    assert float(dst.sum()) == 0.0  # the reference's own arrays untouched


class _Sized:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_a_timings_arena_is_a_whole_number_of_2_mib():
    """On an H100 a process reading a 22 GB allocation it imported by CUDA IPC handle read it at 0.7x speed when
    the allocation's size was not a multiple of 2 MiB (benchmarks/results/isolated_sum_layout-*.json): the arena
    of a timing's fresh sets is rounded up, and still holds every set (each array 512-byte aligned)."""
    from grader import learner_process

    for sizes in ([1 << 28, 4], [1, 3, 5], [(1 << 21) - 512], [1 << 21]):
        found = {i: _Sized(n) for i, n in enumerate(sizes)}
        for reps in (1, 2, 86, 200):
            laid_out = learner_process._sets_nbytes(found, reps)
            assert laid_out >= reps * sum(-(-n // 512) * 512 for n in sizes)
            arena = learner_process._arena_nbytes(found, reps)
            assert arena % (2 << 20) == 0 and laid_out <= arena < laid_out + (2 << 20)
