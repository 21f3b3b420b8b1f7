"""Submissions that lie to the grader from inside: each must fail for the right reason (`grader check`).

The graded tests (the judge) run the learner's Python in a process of its own (grader/learner_process.py):
whatever a launcher module patches, it patches there. Each fixture is the Phase 1 reference solution whose
`memory.py` tries one trick that public kernel leaderboards have seen, on top of a `fill` that is wrong (it
launches the kernel with the wrong value, so a launch is recorded and only the values can tell): patch
`grader.checks`, replace `pytest`, forge the results file (and kill the judge), find the checker's expected
arrays through `gc.get_objects()`, cache a first result, sleep past the timeout. Where the trick works when
the learner's code shares the tests' process (``GRADER_ISOLATION=0``), a control run shows that it does: the
isolation, not luck, is what stops it. Timing tricks are tested on the learner process directly (no
performance check runs without a GPU): `timed_calls` and the performance checks' `time_replayed`. The tests
marked gpu run the same tricks through `grader check --device cuda`, where arrays travel by CUDA IPC handle.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase1_memory.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase1_memory.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
]

HONEST_FILL = '    kernel((blocks_for(n),), (THREADS,), (out, np.float32(value), np.int64(n)))\n'
# A wrong fill that still launches the kernel: launch records cannot tell it; only the values can.
WRONG_FILL = '    kernel((blocks_for(n),), (THREADS,), (out, np.float32(value + 1.0), np.int64(n)))\n'
FILL_TESTS = "test_fill_odd_sizes"


@dataclass(frozen=True)
class Case:
    """One phase's tampered submission: the reference solutions up to `phase`, with `module` (where the tricks go)
    made wrong by replacing `honest` with `wrong`; `tests` select the graded tests that catch it by their values
    (`values_words` in their reason), `one` a single one of them."""

    phase: str
    notebooks: tuple[str, ...]
    module: str
    honest: str
    wrong: str
    tests: str
    one: str
    values_words: str

    @property
    def prefix(self) -> str:
        """The name the selected checks start with."""
        return self.tests.split(" ", 1)[0]


ALL_BEFORE_8 = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
                "phase5_fast", "phase6_cnn", "phase7_gpt")

CASES = {
    "phase1": Case("phase1", ("phase1_memory",), "memory.py", HONEST_FILL, WRONG_FILL, FILL_TESTS,
                   f"{FILL_TESTS} and 31", "values differ"),
    # the tape-level module: it takes and returns Tensors (their graph travels to the learner's process); a
    # gradient doubled at the root still launches every kernel of the backward pass
    "phase3b": Case("phase3b", ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward"),
                    "backprop.py", "    grads = {id(root): grad}\n", "    grads = {id(root): grad * 2.0}\n",
                    "test_gradients_on_the_device and not empty", "test_gradients_on_the_device and transpose",
                    "relative error"),
    # the learner's objects: CachingPool lives in the learner process, the recording raw allocator is called back
    "phase5": Case("phase5", ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward",
                              "phase4_reductions", "phase5_fast"),
                   "pool.py", "            self.hits += 1\n", "            self.hits += 2\n",
                   "test_pool_never_hands_out", "test_pool_never_hands_out", "pool.stats()"),
    # a launcher of the last isolated phase: half the elements launched for (n // 2: none at all for n = 1)
    "phase7": Case("phase7", ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward",
                              "phase4_reductions", "phase5_fast", "phase6_cnn", "phase7_gpt"),
                   "gelu.py", "            (blocks_for(n),), (THREADS,), (x, out, np.int64(n)))\n",
                   "            (blocks_for(n),), (THREADS,), (x, out, np.int64(n // 2)))\n",
                   "test_gelu_forward_values and not 1000003", "test_gelu_forward_values and 257",
                   "gelu_forward, n="),
    # the tensor-core phases (half-precision arrays): a conversion of half the elements (none for n = 1), and an
    # attention computed with the other mask (the same at T = 1, wrong from T = 7)
    "phase8a": Case("phase8a", ALL_BEFORE_8 + ("phase8a_tensor_cores",), "convert.py",
                    '    load_kernel("convert.cu", function)((blocks,), (THREADS,), (*args, np.int64(n)))\n',
                    '    load_kernel("convert.cu", function)((blocks,), (THREADS,), (*args, np.int64(n // 2)))\n',
                    "test_conversions_at_every_length", "test_conversions_at_every_length and 7",
                    "not bit-identical"),
    "phase8b": Case("phase8b", ALL_BEFORE_8 + ("phase8a_tensor_cores", "phase8b_flash"), "flash.py",
                    "            np.int32(bool(causal)))\n",
                    "            np.int32(not causal))\n",
                    "test_forward_rung_values and scalar", "test_forward_rung_values and scalar",
                    "values differ from float64 attention"),
}
PHASES = ["phase1", "phase3b", "phase5", "phase7"]  # every trick, through grader check
# the tensor-core phases: every trick in Phase 8a (its conversions compile fast), the honest reference and the
# patched checks in Phase 8b (each run compiles the attention kernels on the emulator: kept few)
TENSOR_CORE_PHASES = ["phase8a", "phase8b"]


def solution_sources(case: Case = CASES["phase1"]) -> dict[str, str]:
    from grader.labs import learner_files

    files: dict[str, str] = {}
    for notebook in case.notebooks:
        files.update(learner_files(REPO / "solutions" / f"{notebook}.ipynb"))
    return files


def tampered(extra: str, fill_line: str | None = WRONG_FILL, case: Case = CASES["phase1"]) -> dict[str, str]:
    """The case's module made wrong (`fill_line`: the phase-1 line, None: the case's own wrong line), `extra`
    appended."""
    files = solution_sources(case)
    text = files[case.module]
    assert text.count(case.honest) == 1, f"fixture out of date with the {case.phase} solution's {case.module}"
    line = case.wrong if fill_line is None else fill_line
    files[case.module] = text.replace(case.honest, line) + "\n" + extra
    return files


def grade(tmp_path: Path, files: dict[str, str], *, isolation: bool = True, select: str = FILL_TESTS,
          timeout: float = 60, phase: str = "phase1", device: str = "emu") -> dict:
    """`grader check <phase>` of the tests `select` picks (never a pass of the phase: only some tests ran), with the
    learner's code isolated (on a GPU too, whatever tests_step.CUDA_ISOLATED_PHASES says) or not."""
    env = {"GRADER_ISOLATION": "1" if isolation else "0"}
    return grade_workspace(tmp_path, phase, files, "--no-notebook", "-k", select, timeout=timeout, env_extra=env,
                           device=device)


def assert_all_fail_on_values(report: dict, prefix: str = FILL_TESTS, words: str = "values differ") -> None:
    found = results(report, prefix)
    for check in found:
        assert check["result"] == "FAIL", check
        assert words in check["reason"], check


def grade_case(tmp_path: Path, phase: str, extra: str, *, honest: bool = False, isolation: bool = True,
               one: bool = False, timeout: float = 60, device: str = "emu") -> tuple[Case, dict]:
    case = CASES[phase]
    files = tampered(extra, case.honest if honest else None, case)
    return case, grade(tmp_path, files, isolation=isolation, select=case.one if one else case.tests, timeout=timeout,
                       phase=phase, device=device)


# (1) a launcher module that makes the checks it expects to face pass
PATCH_CHECKS = """
import sys
import grader.checks as _checks
_checks.assert_close = lambda *a, **k: None
_checks.assert_bitwise_equal = lambda *a, **k: None
_checks.require_launch = lambda *a, **k: None
_checks.run_without_host_transfers = lambda what, call: call()
for _name, _module in list(sys.modules.items()):  # the graded test modules' own checks (check_gradients, ...)
    if _name.startswith("test_phase"):
        for _attr in dir(_module):
            if _attr.startswith("check_") and callable(getattr(_module, _attr)):
                setattr(_module, _attr, lambda *a, **k: None)
"""

# (2) pytest replaced: every report says passed, pytest.fail does nothing
REWRITE_PYTEST = """
import sys, types
import pytest
import _pytest.reports
_init = _pytest.reports.TestReport.__init__
def _passed(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None
_pytest.reports.TestReport.__init__ = _passed
_fake = types.ModuleType("pytest")
_fake.__dict__.update(sys.modules["pytest"].__dict__)
_fake.fail = _fake.skip = lambda *a, **k: None
sys.modules["pytest"] = _fake
"""

# (3) forged results: a passing result for every collected test in every results file it can find, a passing
# progress file, then the judge killed, so that the forgery would be its last word
FORGE_RESULTS = """
import glob, json, os, signal
def _forge():
    for path in glob.glob(os.path.join(os.getcwd(), "tests-results-*.jsonl")):
        nodeids = []
        for line in open(path):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "collected":
                nodeids = event["nodeids"]
        with open(path, "a") as fh:
            for nodeid in nodeids:
                fh.write(json.dumps({"event": "start", "nodeid": nodeid, "kernel": None}) + "\\n")
                fh.write(json.dumps({"event": "result", "nodeid": nodeid, "outcome": "passed", "when": "call",
                                     "reason": "", "perf": [], "notes": [], "mac": "0" * 64}) + "\\n")
    if os.environ.get("GRADER_PROGRESS"):
        with open(os.environ["GRADER_PROGRESS"], "w") as fh:
            json.dump({"phase1": {"passed": True}}, fh)
    judge = os.getppid() if os.environ.get("GRADER_LEARNER_PROCESS") else os.getpid()
    os.kill(judge, signal.SIGKILL)
_forge()
"""

# (5) the checker's expected arrays, found through the garbage collector and copied into the output where the
# kernel wrote it (emu device memory is host memory): a float64 array of the output's shape holding one value
FIND_EXPECTED = """
import ctypes, gc
_wrong_fill = fill
def fill(out, value):
    _wrong_fill(out, value)
    for obj in gc.get_objects():
        if (isinstance(obj, np.ndarray) and obj.dtype == np.float64 and obj.shape == tuple(out.shape)
                and obj.size and np.all(obj == obj.flat[0])):
            found = np.ascontiguousarray(obj, dtype=np.float32)
            ctypes.memmove(out.ptr, found.ctypes.data, found.nbytes)
"""

# (6) the first result kept and given back for every later call
CACHE_FIRST = """
import ctypes
_cache = {}
_honest_fill = fill
def fill(out, value):
    if "first" not in _cache:
        _honest_fill(out, value)
        _cache["first"] = out  # kept on the device: no copy to the host to be caught
        return
    kernel = load_kernel("memory.cu", "fill")
    kernel((1,), (1,), (out, np.float32(value), np.int64(0)))  # a launch on record, nothing written
    first = _cache["first"]
    ctypes.memmove(out.ptr, first.ptr, 4 * min(first.size, out.size))
"""

# (7) a launcher that never returns
SLEEP = """
import time as _time
def fill(out, value):
    _time.sleep(3600)
def backpropagate(root, grad):
    _time.sleep(3600)
def size_class(nbytes):
    _time.sleep(3600)
def gelu_forward(x, out):
    _time.sleep(3600)
def to_16bit(x, out, dtype):
    _time.sleep(3600)
"""


# Where the learner's module runs: one line a process that imports it
WHERE_AM_I = """
import os as _os
with open({path!r}, "a") as _fh:
    _fh.write(f"{{_os.getpid()}} {{_os.environ.get('GRADER_LEARNER_PROCESS', 'judge')}}\\n")
"""


HONEST_SELECTION = {
    "phase1": "test_fill or test_copy_values or test_tensor_fill or test_results_come_from",
    "phase3b": "test_topological_order_of_a_diamond or test_gradients_on_the_device or test_xor_trains",
    "phase5": "test_pool or test_adam_captured",
    "phase7": "test_gelu_forward_values or test_clip_in_a_captured_graph or test_captured_training_step",
    "phase8a": "test_conversions or test_a_captured_scaled_step",
    "phase8b": "test_forward_rung_values and scalar or test_dropout_mask_bit_for_bit and 64",
}


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES + TENSOR_CORE_PHASES)
def test_honest_reference_passes_isolated(tmp_path, phase):
    case = CASES[phase]
    files = solution_sources(case)
    marker = tmp_path / "imported-by.txt"
    files[case.module] += WHERE_AM_I.format(path=str(marker))
    report = grade(tmp_path, files, select=HONEST_SELECTION[phase], phase=phase)
    assert all(c["result"] in ("PASS", "SKIP", "NOT MEASURED") for c in report["checks"]), report["checks"]
    imports = marker.read_text().splitlines()
    assert imports and all(line.endswith(" 1") for line in imports), imports  # never in the judge


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES + TENSOR_CORE_PHASES)
def test_patching_grader_checks_changes_nothing_the_judge_runs(tmp_path, phase):
    case, report = grade_case(tmp_path, phase, PATCH_CHECKS)
    assert_all_fail_on_values(report, case.prefix, case.values_words)


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_patching_grader_checks_forges_a_pass_without_isolation(tmp_path, phase):
    """The control: the same submission in the tests' own process passes, which is what isolation stops."""
    case, report = grade_case(tmp_path, phase, PATCH_CHECKS, isolation=False)
    assert all(c["result"] == "PASS" for c in results(report, case.prefix))


@pytest.mark.slow
@pytest.mark.parametrize("phase", [*PHASES, "phase8a"])
def test_rewriting_pytest_changes_nothing_the_judge_runs(tmp_path, phase):
    case, report = grade_case(tmp_path, phase, REWRITE_PYTEST)
    assert_all_fail_on_values(report, case.prefix, case.values_words)


@pytest.mark.slow
@pytest.mark.parametrize("phase", [*PHASES, "phase8a"])
def test_forged_results_file_is_not_believed(tmp_path, phase):
    case, report = grade_case(tmp_path, phase, FORGE_RESULTS, honest=True, one=True)
    found = results(report, case.prefix)
    assert found and not any(c["result"] == "PASS" for c in found), found
    for check in found:  # the judge was killed: the learner's process cannot speak for it
        assert check["result"] == "CRASH" and "died" in check["reason"], check


@pytest.mark.slow
def test_expected_arrays_are_not_in_the_learners_process(tmp_path):
    assert_all_fail_on_values(grade(tmp_path, tampered(FIND_EXPECTED)))


@pytest.mark.slow
def test_cached_first_result_fails_the_later_calls(tmp_path):
    report = grade(tmp_path, tampered(CACHE_FIRST, HONEST_FILL))
    found = results(report, FILL_TESTS)
    failed = [c for c in found if c["result"] == "FAIL"]
    assert len(failed) >= len(found) - 1, found
    for check in failed:
        assert "values differ" in check["reason"] or "shape" in check["reason"], check


@pytest.mark.slow
@pytest.mark.parametrize("phase", [*PHASES, "phase8a"])
def test_a_launcher_that_sleeps_is_stopped_and_named(tmp_path, phase):
    t0 = time.monotonic()
    case, report = grade_case(tmp_path, phase, SLEEP, honest=True, one=True, timeout=4)
    assert time.monotonic() - t0 < 120
    found = results(report, case.prefix)
    timed_out = [c for c in found if c["result"] == "TIMEOUT"]
    assert len(timed_out) == 1 and "did not finish within 4 s" in timed_out[0]["reason"], found
    assert all(c["result"] in ("TIMEOUT", "SKIP") for c in found), found


# ---------------------------------------------------------------- the learner process itself (no grader check)


@contextlib.contextmanager
def learner_session(workspace: Path, monkeypatch: pytest.MonkeyPatch, device: str) -> Iterator[Any]:
    """The judge's side of a learner process over `workspace` (holding Phase 1's memory.cu) on `device`, the
    learner's loaders routed there as in the judge; the process stopped and the device given back after."""
    from grader import learner_process
    from minitorch import backend, kernels

    monkeypatch.setenv("MINITORCH_WORKSPACE", str(workspace))
    monkeypatch.setenv("MINITORCH_DEVICE", device)
    previous = backend.get_device()
    backend.set_device(device)
    (workspace / "memory.cu").write_text(solution_sources()["memory.cu"])
    kernels.set_learner_loaders(learner_process.load_module, learner_process.load_kernel)
    try:
        yield learner_process
    finally:
        learner_process.uninstall()
        backend.set_device(previous)


@pytest.fixture
def learner(tmp_path, monkeypatch):
    """The judge's side of a learner process over a workspace of tmp_path, on the emulator."""
    with learner_session(tmp_path, monkeypatch, "emu") as learner_process:
        yield learner_process, tmp_path


PATCH_TIMER = """
import time, numpy as np
import grader.checks as _checks
time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
_checks.time_cuda = lambda *a, **k: 1e-9
_checks.perf_ratio = lambda *a, **k: {"ratio": 1e9}
def slow(seconds):
    start = time.time()
    while time.time() - start < seconds:
        pass
"""


def test_a_patched_timer_is_not_the_judges(learner):
    """(4) A launcher module that patches the timers: the judge's clock and timing helpers are its own, and it
    measures the time the learner's call really took."""
    from grader import checks

    learner_process, workspace = learner
    (workspace / "timer.py").write_text(PATCH_TIMER)
    originals = (time.perf_counter, time.monotonic, checks.time_cuda, checks.perf_ratio)
    module = learner_process.load_module("timer.py")
    t0 = time.perf_counter()
    module.slow(0.3)
    elapsed = time.perf_counter() - t0
    assert (time.perf_counter, time.monotonic, checks.time_cuda, checks.perf_ratio) == originals
    assert elapsed >= 0.3


def test_arrays_travel_by_value_and_come_back_in_place(learner):
    from minitorch import backend, kernels

    learner_process, workspace = learner
    (workspace / "memory.py").write_text(solution_sources()["memory.py"])
    module = learner_process.load_module("memory.py")
    assert module.THREADS == 256 and module.__name__ == "minitorch.workspace.memory"
    src = backend.asarray(np.arange(1000, dtype=np.float32))
    dst = backend.zeros(1000)
    kernels.reset_launch_counts()
    with kernels.recording() as launches:
        assert module.copy(src, dst) is None
    np.testing.assert_array_equal(dst.get(), np.arange(1000, dtype=np.float32))
    assert kernels.launch_count("memory.cu", "copy") == 1
    (launch,) = launches
    assert launch.args[0] is src and launch.args[1] is dst and launch.args[2] == np.int64(1000)
    fresh = backend.zeros(1000)
    launch.replay({id(dst): fresh})  # a replay launches in the learner process, into the judge's array
    np.testing.assert_array_equal(fresh.get(), np.arange(1000, dtype=np.float32))
    with pytest.raises(ValueError, match="two float32 arrays"):
        module.copy(src, backend.zeros(3))
    with pytest.raises(TypeError, match="float32"):
        module.fill(backend.zeros(3, np.float64), 1.0)


def test_errors_and_faults_come_back_as_the_course_types(learner):
    from minitorch import backend, kernels
    from minitorch.emu import KernelFault

    learner_process, workspace = learner
    (workspace / "bad.py").write_text(
        "import pytest\n"
        "from minitorch.kernels import load_kernel\n"
        "import numpy as np\n"
        "def skip():\n    pytest.skip('nothing to see')\n"
        "def overrun(out):\n"
        "    load_kernel('memory.cu', 'fill')((4,), (256,), (out, np.float32(1), np.int64(1024)))\n"
        "def leave():\n    raise SystemExit(0)\n")
    module = learner_process.load_module("bad.py")
    with pytest.raises(RuntimeError, match="Skipped: nothing to see"):  # a skip is not passed on as one
        module.skip()
    with pytest.raises(RuntimeError, match="SystemExit"):
        module.leave()
    with pytest.raises(kernels.KernelLaunchError, match="fill") as err:
        module.overrun(backend.zeros(8))
    assert isinstance(err.value.__cause__, KernelFault) and err.value.__cause__.kind == "out-of-bounds"
    with pytest.raises(kernels.KernelNotWrittenError):
        learner_process.load_module("missing.py")
    (workspace / "broken.py").write_text("def f(:\n")
    with pytest.raises(SyntaxError):
        learner_process.load_module("broken.py")


def test_a_dead_learner_process_is_reported_and_restarted(learner):
    learner_process, workspace = learner
    (workspace / "die.py").write_text("import os, signal\ndef die():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
                                      "def ok():\n    return 41 + 1\n")
    module = learner_process.load_module("die.py")
    with pytest.raises(learner_process.LearnerProcessError, match=r"died \(killed by SIGKILL\) while running die.die"):
        module.die()
    assert module.ok() == 42


def test_results_lines_count_only_with_the_judges_mac(tmp_path):
    """(3) A line written into the results file by anyone without the key is dropped, a forged MAC included."""
    import json

    from grader.subprocesses import event_mac, read_events

    key = bytes(range(32))
    real = {"event": "result", "nodeid": "t::a", "outcome": "failed", "reason": "values differ"}
    forged = {"event": "result", "nodeid": "t::b", "outcome": "passed", "reason": ""}
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in (
        {**real, "mac": event_mac(key, real)}, forged, {**forged, "mac": "0" * 64},
        {**forged, "mac": event_mac(b"another key" * 3, forged)}, {**real, "outcome": "passed", "mac": event_mac(key, real)},
    )) + "\n")
    assert read_events(path, key) == [real]
    assert len(read_events(path)) == 5  # without a key (a phase not isolated) every line counts, as before


def test_isolated_phases_are_the_launcher_level_ones():
    from grader.phases import PHASES
    from grader.tests_step import CUDA_ISOLATED_PHASES, ISOLATED_PHASES, isolated
    from minitorch.backend import cuda_available

    by_name = PHASES
    for name in ISOLATED_PHASES:
        assert isolated(by_name[name], {"MINITORCH_DEVICE": "emu"})
        on_cuda = name in CUDA_ISOLATED_PHASES
        assert isolated(by_name[name], {"MINITORCH_DEVICE": "cuda"}) == on_cuda
        # the device left to minitorch's default: a GPU's list where there is one
        assert isolated(by_name[name], {}) == (on_cuda if cuda_available() else True)
        assert not isolated(by_name[name], {"MINITORCH_DEVICE": "cpu"})
        assert not isolated(by_name[name], {"MINITORCH_DEVICE": "emu", "GRADER_ISOLATION": "0"})
        assert not isolated(by_name[name], {"MINITORCH_DEVICE": "cuda", "GRADER_ISOLATION": "0"})
        # "1": isolated on a GPU whatever the list (how a phase is graded isolated there before it joins it)
        assert isolated(by_name[name], {"MINITORCH_DEVICE": "cuda", "GRADER_ISOLATION": "1"})
        assert isolated(by_name[name], {"MINITORCH_DEVICE": "emu", "GRADER_ISOLATION": "1"})
        assert not isolated(by_name[name], {"MINITORCH_DEVICE": "cpu", "GRADER_ISOLATION": "1"})
    assert set(CUDA_ISOLATED_PHASES) <= set(ISOLATED_PHASES)
    assert set(ISOLATED_PHASES) == set(by_name)  # every phase on the emulator


def test_the_judge_maps_the_emulator_runtime_from_a_sealed_copy_of_the_pinned_library():
    """The judge runs no library file the learner's code can rewrite: the emulator's runtime is loaded from a
    sealed in-memory copy, and only when it matches the digest `grader check` took before the notebook ran."""
    import subprocess
    import sys

    from grader import learner_process

    digest, _, path = learner_process.runtime_pin()[learner_process.RUNTIME_SHA256_ENV].partition(":")
    assert Path(path).is_file()
    probe = ("import sys\nfrom minitorch.emu import rt\n"
             "try:\n    print(rt.load_sealed(sys.argv[1], sys.argv[2]))\nexcept RuntimeError as err:\n"
             "    print('refused:', err)\n"
             "print(any('memfd:minitorch_emu_rt' in line for line in open('/proc/self/maps')))\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    good = subprocess.run([sys.executable, "-c", probe, digest, path], capture_output=True, text=True, env=env, timeout=120)
    assert good.stdout.split() == ["True", "True"], good.stdout + good.stderr
    bad = subprocess.run([sys.executable, "-c", probe, "0" * 64, path], capture_output=True, text=True, env=env, timeout=120)
    assert bad.stdout.startswith("refused:") and "changed since it was built" in bad.stdout, bad.stdout + bad.stderr
    assert bad.stdout.rstrip().endswith("False")


POOL = """
class CachingPool:
    def __init__(self, raw_malloc, raw_free):
        self.raw_malloc, self.raw_free, self.free_blocks = raw_malloc, raw_free, []
    def malloc(self, nbytes):
        return self.free_blocks.pop() if self.free_blocks else self.raw_malloc(nbytes)
    def free(self, handle):
        self.free_blocks.append(handle)
    def release(self):
        for handle in self.free_blocks:
            try:
                self.raw_free(handle)
            except Exception:
                pass  # swallowed: the judge's callback error must stand all the same
        self.free_blocks = []
        return 1
"""


def test_objects_stay_in_the_learner_process_and_call_the_judge_back(learner):
    """pool.py's CachingPool: made and called in the learner process; the raw allocator it is given is the judge's
    own function, called back from there; an error that function raises fails the call even if the learner's
    code swallows it."""
    learner_process, workspace = learner
    (workspace / "pool.py").write_text(POOL)
    calls = []

    def raw_malloc(nbytes):
        calls.append(("malloc", nbytes))
        return 0x1000 * len(calls)

    def raw_free(handle):
        calls.append(("free", handle))
        raise ValueError(f"raw_free({handle:#x}): not allocated")

    pool = learner_process.load_module("pool.py").CachingPool(raw_malloc, raw_free)
    assert isinstance(pool, learner_process.RemoteObject) and "CachingPool" in repr(pool)
    a = pool.malloc(100)
    assert a == 0x1000 and calls == [("malloc", 100)]
    assert pool.free(a) is None and pool.malloc(7) == a and len(calls) == 1  # served from the learner's cache
    pool.free(a)
    with pytest.raises(ValueError, match="raw_free\\(0x1000\\): not allocated"):
        pool.release()
    assert calls[-1] == ("free", 0x1000)


def test_tensors_travel_with_their_tape(learner):
    """A Tensor-valued call: the graph of the tensors passed (data, requires_grad, grad_fn with its inputs and saved
    tensors) is rebuilt in the learner process; the grads its code sets come back onto the judge's own tensors."""
    import minitorch

    learner_process, workspace = learner
    (workspace / "tape.py").write_text(
        "def order(root):\n"
        "    seen, out, stack = set(), [], [root]\n"
        "    while stack:\n"
        "        t = stack.pop()\n"
        "        if id(t) not in seen:\n"
        "            seen.add(id(t)); out.append(t)\n"
        "            stack += list(t.grad_fn.inputs) if t.grad_fn else []\n"
        "    return out\n"
        "def grad_to_leaves(root, scale):\n"
        "    for t in order(root):\n"
        "        if t.grad_fn is None and t.requires_grad:\n"
        "            t.grad = t.detach() * scale\n")
    a = minitorch.tensor(np.array([1.0, 2.0], np.float32), device="cpu", requires_grad=True)
    b = minitorch.tensor(np.array([3.0, 4.0], np.float32), device="cpu")
    c = a * b
    root = c + a
    module = learner_process.load_module("tape.py")
    listed = module.order(root)
    assert [id(t) for t in listed][:1] == [id(root)] and {id(t) for t in listed} == {id(root), id(c), id(a), id(b)}
    module.grad_to_leaves(root, 2.0)
    assert b.grad is None and c.grad is None
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0])
    assert a.grad is not a and a.grad.requires_grad is False


def fill_timing(module, sizes=(1000, 777, 1025, 3000)):
    """checks.time_with_fresh_inputs over the learner's memory.fill: each call a fresh output and value."""
    from grader import checks
    from minitorch import backend

    def make_call(i):
        return (backend.zeros(sizes[i % len(sizes)]), float(i) + 0.5), {}

    def check(i, args, result):
        checks.assert_close(args[0], np.full(sizes[i % len(sizes)], float(i) + 0.5), rtol=0,
                            what=f"fill, timed call {i}")

    return checks.time_with_fresh_inputs(module.fill, make_call, check, reps=4)


def test_timed_calls_are_timed_by_the_judge_on_fresh_inputs(learner):
    """(2, 6) A timing is the judge's clock around the learner process's calls (its patched timer is not read), and
    every timed call's outputs are checked: the first result kept and handed back fails the timed check too."""
    from grader import checks

    learner_process, workspace = learner
    files = solution_sources()
    (workspace / "memory.py").write_text(files["memory.py"] + "\n" + PATCH_TIMER)
    module = learner_process.load_module("memory.py")
    per_call = fill_timing(module)
    assert per_call > 0 and per_call * 4 == learner_process.learner_process().last_seconds  # one request, 4 calls
    (workspace / "memory.py").write_text(files["memory.py"] + "\n" + PATCH_TIMER + "\n" + SLOW_FILL)
    assert fill_timing(learner_process.load_module("memory.py")) >= 0.05  # slept in the learner process: counted
    (workspace / "memory.py").write_text(tampered(CACHE_FIRST, HONEST_FILL)["memory.py"])
    with pytest.raises(checks.GradeError, match="fill, timed call 0"):
        fill_timing(learner_process.load_module("memory.py"))
    assert learner_process.learner_process().last_seconds > 0


SLOW_FILL = """
_fast_fill = fill
def fill(out, value):
    slow(0.05)
    _fast_fill(out, value)
"""


def test_a_callback_that_calls_the_learner_again_is_refused_not_deadlocked(learner):
    """A function of the judge called back by the learner's code may not call the learner's code in turn (one
    request at a time): it fails naming both calls instead of waiting for ever."""
    learner_process, workspace = learner
    (workspace / "pool.py").write_text(POOL)
    module = learner_process.load_module("pool.py")
    inner = module.CachingPool(lambda n: 0x1000, lambda h: None)
    pool = module.CachingPool(lambda n: inner.malloc(n), lambda h: None)
    with pytest.raises(learner_process.LearnerProcessError, match="called from a callback of the grader"):
        pool.malloc(100)
    assert inner.malloc(8) == 0x1000  # the learner process still answers


# What the two cached-copy launchers below share: a cache, the honest copy, and "am I inside the grader's timed
# replays?" (a frame of its _step functions on the stack)
CACHE_HELPERS = """
_cache = {}
_honest_copy = copy
def _timed():
    frame = sys._getframe()
    while frame is not None:
        if "_step" in frame.f_code.co_qualname:
            return True
        frame = frame.f_back
    return False
"""


# A copy that does its work only outside the grader's timed replays: inside them it hands back the first result
CACHE_WHEN_TIMED = """
import ctypes, sys
""" + CACHE_HELPERS + """def copy(src, dst):
    if "first" not in _cache or not _timed():
        _honest_copy(src, dst)
        _cache.setdefault("first", dst.copy())
        return
    ctypes.memmove(dst.ptr, _cache["first"].ptr, 4 * min(_cache["first"].size, dst.size))
"""


# A copy that owes its timed calls' work and pays it later: inside the grader's timed replays it only notes its arrays
# (those it can still reach after the request: on a GPU the timing's sets, which are the learner process's own memory;
# the judge's arrays are unmapped after each request); its next call outside them does the work it owes into those
# arrays. Were a timing's sets read after the calls made again untimed, the owed results would be there by then.
LAZY_WHEN_TIMED = """
import sys
""" + CACHE_HELPERS + """_owed = []
def _reachable_later(a):
    if not type(a).__module__.startswith("cupy"):
        return True  # the emulator: every array here is this process's own
    import grader.learner_process as lp
    arena = lp._arena
    return arena is not None and arena.ptr <= a.data.ptr < arena.ptr + arena.size
def copy(src, dst):
    if _timed():
        if _reachable_later(dst):
            _owed.append((src, dst))
        return
    _honest_copy(src, dst)
    while _owed:
        _honest_copy(*_owed.pop())
"""


def check_owed_work_is_caught(learner_process: Any, workspace: Path, src: Any, dst: Any, reps: int) -> None:
    """time_replayed of LAZY_WHEN_TIMED's copy fails: what the timed calls left is read before any later call."""
    from grader import checks

    (workspace / "memory.py").write_text(solution_sources()["memory.py"] + "\n" + LAZY_WHEN_TIMED)
    module = learner_process.load_module("memory.py")
    with pytest.raises(checks.GradeError, match=r"copy: timed call \d+ \(of \d+\), array 1 .* run again untimed"):
        learner_process.time_replayed(lambda: module.copy(src, dst), what="copy", reps=reps)


def test_work_owed_by_timed_calls_and_done_later_fails(learner):
    from minitorch import backend

    learner_process, workspace = learner
    src, dst = backend.asarray(np.arange(1000, dtype=np.float32)), backend.zeros(1000)
    check_owed_work_is_caught(learner_process, workspace, src, dst, reps=4)


def test_replayed_timing_is_the_judges_on_fresh_inputs(learner):
    """A performance check's timing (learner_process.time_replayed): the judge's clock around one request of replays
    on fresh sets of arrays; a copy that sleeps is counted; one that hands back a kept result when timed fails."""
    from grader import checks
    from minitorch import backend

    learner_process, workspace = learner
    files = solution_sources()
    (workspace / "memory.py").write_text(files["memory.py"] + "\n" + PATCH_TIMER)
    src, dst = backend.asarray(np.arange(1000, dtype=np.float32)), backend.zeros(1000)
    module = learner_process.load_module("memory.py")
    per_call = learner_process.time_replayed(lambda: module.copy(src, dst), what="copy", reps=4)
    assert per_call is not None and per_call > 0
    np.testing.assert_array_equal(dst.get(), np.arange(1000, dtype=np.float32))  # the warm-up's arrays untouched
    (workspace / "memory.py").write_text(files["memory.py"] + "\n" + PATCH_TIMER + "\n" + SLOW_COPY)
    module = learner_process.load_module("memory.py")
    assert learner_process.time_replayed(lambda: module.copy(src, dst), what="copy", reps=2) >= 0.05
    (workspace / "memory.py").write_text(files["memory.py"] + "\n" + CACHE_WHEN_TIMED)
    module = learner_process.load_module("memory.py")
    with pytest.raises(checks.GradeError, match=r"copy: timed call \d+ \(of [23]\), array 1 .* run again untimed"):
        learner_process.time_replayed(lambda: module.copy(src, dst), what="copy", reps=3)
    assert learner_process.time_replayed(lambda: None, what="nothing") is None  # no learner code: the caller times


# A copy whose caller hands it a Tensor (its array as Tensor.data): a call no fresh set can stand in for
TENSOR_COPY = """
def copy_tensor(t, dst):
    copy(t.data, dst)
"""


def test_a_timed_call_handed_a_tensor_is_refused_not_timed_whole(learner):
    """A performance check that hands the learner's code a Tensor gets no figure (UntimeableCallError, before any timing):
    timed whole on the same Tensor, a launcher that keeps its first result would pass (issue #27)."""
    import minitorch
    from minitorch import backend

    learner_process, workspace = learner
    (workspace / "memory.py").write_text(solution_sources()["memory.py"] + "\n" + TENSOR_COPY)
    module = learner_process.load_module("memory.py")
    t, dst = minitorch.from_numpy(np.arange(1000, dtype=np.float32)), backend.zeros(1000)
    with pytest.raises(learner_process.UntimeableCallError, match=r"copy_tensor: .* 1 Tensor\(s\).* fresh sets"):
        learner_process.time_replayed(lambda: module.copy_tensor(t, dst), what="copy_tensor", reps=4)
    np.testing.assert_array_equal(backend.asnumpy(dst), np.arange(1000, dtype=np.float32))  # the call did run
    assert learner_process.time_replayed(lambda: module.copy(t.data, dst), what="copy", reps=2) > 0  # arrays: timed


# A copy of 16-bit floats (float16, or bfloat16's bits in uint16 arrays): honest, and one that hands back the first
# result it made whenever the grader's timed replays call it (found by its caller's frame, as CACHE_WHEN_TIMED)
HALF_CU = """
extern "C" __global__ void copy16(const unsigned short* src, unsigned short* dst, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""
HALF_PY = """
import numpy as np
from minitorch.kernels import load_kernel
def copy(src, dst, dtype):
    n = int(src.size)
    load_kernel("half.cu", "copy16")(((n + 255) // 256,), (256,), (src.view(np.uint16), dst.view(np.uint16),
                                                                   np.int64(n)))
"""
HALF_CACHED = HALF_PY + """
import sys
""" + CACHE_HELPERS + """def copy(src, dst, dtype):
    if "first" not in _cache or not _timed():
        _honest_copy(src, dst, dtype)
        _cache.setdefault("first", dst.copy())
        return
    _honest_copy(_cache["first"], dst, dtype)  # the kept result, copied by the kernel: launches look the same
"""


def check_16bit_timing_catches_a_kept_result(learner_process: Any, workspace: Path, dtype: str, n: int,
                                             reps: int = 4) -> float:
    """time_replayed of a 16-bit copy: the honest one is timed; one that hands back a result it kept when timed
    fails the untimed re-run, which needs every timed set's 16-bit inputs to be new (a scale close to 1 rounds
    back to the same bfloat16). Returns the honest copy's seconds."""
    from grader import checks
    from minitorch import backend

    store = np.uint16 if dtype == "bfloat16" else np.float16
    values = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    host = (values.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bfloat16" else values.astype(np.float16)
    src, dst = backend.asarray(host.astype(store)), backend.zeros(n, store)
    (workspace / "half.cu").write_text(HALF_CU)
    (workspace / "half.py").write_text(HALF_PY)
    module = learner_process.load_module("half.py")
    seconds = learner_process.time_replayed(lambda: module.copy(src, dst, dtype), what=f"copy ({dtype})", reps=reps)
    assert seconds is not None and seconds > 0
    np.testing.assert_array_equal(backend.asnumpy(dst), host)  # the warm-up's arrays as the warm-up left them
    (workspace / "half.py").write_text(HALF_CACHED)
    module = learner_process.load_module("half.py")
    with pytest.raises(checks.GradeError, match=rf"copy \({dtype}\): timed call \d+ .* run again untimed"):
        learner_process.time_replayed(lambda: module.copy(src, dst, dtype), what=f"copy ({dtype})", reps=reps)
    return seconds


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_kept_result_fails_a_16bit_timing(learner, dtype):
    learner_process, workspace = learner
    check_16bit_timing_catches_a_kept_result(learner_process, workspace, dtype, 1000)


SLOW_COPY = """
_fast_copy = copy
def copy(src, dst):
    slow(0.05)
    _fast_copy(src, dst)
"""



# A fill that reads its array back (a synchronisation): it cannot be captured into a graph
FILL_READ_BACK = """
_plain_fill = fill
def fill(out, value):
    _plain_fill(out, value)
    out.get()
"""


@pytest.mark.parametrize("capturable", [True, False])
def test_a_prepared_sequence_runs_the_calls_it_kept(learner, capturable):
    """The timed rounds on a GPU send no arguments: the learner process runs the calls it decoded in the untimed
    round (on the same mapped arrays), captured into one graph after that round when they can be (the timed
    rounds then replay it: no launcher's Python between the kernels) and else one by one, until the judge's
    request that closes the mappings forgets them."""
    from grader.learner_process import LearnerProcessError
    from minitorch import backend, kernels

    learner_process, workspace = learner
    extra = "" if capturable else FILL_READ_BACK
    (workspace / "memory.py").write_text(solution_sources()["memory.py"] + extra)
    learner_process.load_module("memory.py")
    out = backend.zeros(100)
    log = [({"op": "call", "file": "memory.py", "name": "fill"}, (out, 2.5), {})]
    kernels.reset_launch_counts()
    learner_process._replay(log, [{}], what="fill", keep_mapped=True, prepare=True)
    assert learner_process.last_replay_answer == {"graph": capturable}
    np.testing.assert_array_equal(out.get(), np.full(100, 2.5, np.float32))
    assert kernels.launch_count("memory.cu", "fill") == 1  # (a capture launches nothing)
    learner_process._replay(log, [], what="fill, prepared", keep_mapped=True, prepared=True)
    assert learner_process.last_replay_answer == {"graph": capturable}
    # ran again there, nothing sent: one by one, a launch counted; a graph's replay is not one of the learner's calls
    assert kernels.launch_count("memory.cu", "fill") == (1 if capturable else 2)
    learner_process._replay([], [], what="done", dry=True)  # (closes the mappings, forgets the calls and graph)
    with pytest.raises((RuntimeError, LearnerProcessError), match="no prepared sequence 'timing'"):
        learner_process._replay(log, [], what="fill, prepared", prepared=True)


def test_the_learner_process_is_stopped_while_the_judge_writes_a_rounds_inputs(learner):
    """While the judge writes a timed round's inputs (into sets the learner process has mapped), that process is
    stopped: no thread of it can start on them before the judge's clock."""
    learner_process, workspace = learner
    (workspace / "pid.py").write_text("import os\ndef pid():\n    return os.getpid()\n")
    pid = learner_process.load_module("pid.py").pid()

    def state() -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    with learner_process.learner_process().paused():
        assert state() == "T"
    assert state() in ("S", "R")
    assert learner_process.load_module("pid.py").pid() == pid  # it answers again


def test_replays_of_records_keep_the_mappings_of_their_call(monkeypatch):
    """On a GPU a record's replay must find the judge's arrays where the recorded call found them (a launcher may
    put a device address into data: rung 6's tensor maps): inside mappings_kept() every request leaves its
    mappings open and each allocation keeps one IPC handle; on leaving, one request closes them. (The requests are
    looked at here, not sent: CUDA IPC needs a GPU; test_grader_tamper_gpu.py runs it.)"""
    from grader import learner_process
    from minitorch import kernels

    sent: list[dict] = []

    def request(header, encoder):
        sent.append(header)
        return {"slots": [], "result": None}, []

    monkeypatch.setattr(learner_process._process, "request", request)
    monkeypatch.setattr(learner_process._process, "alive", lambda: True)
    monkeypatch.setattr(learner_process, "_judge_uses_ipc", lambda: True)
    monkeypatch.setattr(learner_process, "_synchronize_device", lambda: None)
    monkeypatch.setattr(kernels, "learner_code_elsewhere", lambda: True)
    call = {"op": "call", "file": "memory.py", "name": "fill"}
    learner_process._call(dict(call), (), {}, "before")
    with learner_process.mappings_kept():
        assert learner_process._timing_handles == {}  # one handle per allocation while kept
        learner_process._call(dict(call), (), {}, "the call")
        with learner_process.mappings_kept():  # nested: the outer one decides
            learner_process._call({"op": "launch", "file": "memory.cu", "function": "fill", "grid": [1],
                                   "block": [1]}, (), {}, "a replay")
        learner_process._call(dict(call), (), {}, "another replay")
    assert learner_process._timing_handles is None
    learner_process._call(dict(call), (), {}, "after")
    assert [(h["what"], bool(h.get("keep_mapped")), bool(h.get("dry"))) for h in sent] == [
        ("before", False, False), ("the call", True, False), ("a replay", True, False),
        ("another replay", True, False), ("arrays unmapped", False, True), ("after", False, False)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_16bit_result_may_differ_by_an_ulp_between_runs(learner, dtype):
    """The untimed re-run of a timed call: a 16-bit result computed with atomics (FlashAttention's dQ, rounded to
    bfloat16 after float32 atomics) may differ by a unit in the last place between two runs, which a tolerance of
    1e-3 refused in bfloat16 (the H100 run of 10:14: -0.0016479 against -0.0016556, one ulp); a result of other
    inputs still fails."""
    from grader import checks, learner_process
    from minitorch import backend

    values = np.random.default_rng(1).uniform(-1, 1, 1000).astype(np.float32)
    if dtype == "bfloat16":
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
        one_ulp = bits + np.uint16(1)
        other = (np.roll(values, 1).view(np.uint32) >> 16).astype(np.uint16)
    else:
        bits = values.astype(np.float16)
        one_ulp = np.nextafter(bits, np.float16(np.inf))
        other = np.roll(bits, 1)
    learner_process._require_same(backend.asarray(one_ulp), backend.asarray(bits), "dq")
    with pytest.raises(checks.GradeError, match="dq holds"):
        learner_process._require_same(backend.asarray(other), backend.asarray(bits), "dq")
