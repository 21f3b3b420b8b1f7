"""Step 2 of `grader check`: the phase's graded tests, in a subprocess, restarted after a crash.

grader.pytest_plugin streams each test's start and result to a JSON-lines file; a test that started
and never reported was running when the process died (CRASH) or was killed (TIMEOUT). The tests not
reached yet run again in a fresh process: a crashed CUDA context poisons the whole process.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

from grader import learner_process, paths
from grader.options import CheckOptions
from grader.phases import Phase
from grader.report import CRASH, FAIL, INFO, NOT_MEASURED, PASS, SKIP, TIMEOUT, CheckResult, format_measure
from grader.subprocesses import (
    RESULTS_KEY_ENV,
    exit_description,
    has_pytest_timeout,
    last_launch,
    pytest_command,
    read_events,
    run_isolated,
    tail,
)

PYTEST_TIMEOUT_BANNER = re.compile(r"\+{5,} Timeout \+{5,}")


def _test_name(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def _classify_failure(reason: str) -> str:
    if "KernelFault" in reason or re.search(r"cudaError|CUDA_ERROR", reason):
        return CRASH
    return FAIL


# Emulator and CUDA wording -> the kind of fault (grader.checks.FAULTS), for faults that reached the
# report without passing through checks.launch_checked (which names the kind in its headline).
_FAULT_WORDS = (
    (r"returned before the __syncthreads", "early-return"),
    (r"read-after-write|write-after-read|write-after-write", "read-after-write"),
    (r"uninitialised", "uninitialised-read"),
    (r"did not finish within", "timeout"),
    (r"__syncthreads|barrier", "barrier-divergence"),
    (r"__shfl|__syncwarp|\bmask\b|lanes? ", "warp"),
    (r"cudaErrorInvalidConfiguration|invalid configuration argument", "invalid-configuration"),
    (r"out-of-bounds|IllegalAddress|illegal memory", "out-of-bounds"),
)


def fault_hint(reason: str) -> str | None:
    """What to check for the kernel fault described in `reason`, by its kind; None if it is no fault."""
    from grader.checks import FAULTS

    for headline, fix in FAULTS.values():
        if f": {headline}:" in reason:
            return fix
    if not ("KernelFault" in reason or "BarrierWarning" in reason or re.search(r"cudaError|CUDA_ERROR", reason)):
        return None
    for pattern, kind in _FAULT_WORDS:
        if re.search(pattern, reason):
            return FAULTS[kind][1]
    return None


def _failure_hint(result: str, reason: str, marker_hint: str | None, kernel: str | None,
                  hint_on: str | None = None) -> str:
    where = f" `{kernel.split(':')[-1]}` ({kernel.split(':')[0]})" if kernel else ""
    if "CompileError" in reason:
        return "your kernel does not compile: fix it at the file:line shown, then run the lab cell"
    if "NotWritten" in reason:
        return "run the lab cell that writes this file"
    if "NotImplementedError" in reason or "MINITORCH_TODO" in reason:
        return "finish the TODO in the lab"
    if result == TIMEOUT:
        return f"your kernel{where} never finished: check its loop condition and stride"
    fix = fault_hint(reason)
    if fix is not None:
        return f"your kernel{where}: {fix}"
    from grader.checks import HOST_COPY, HOST_COPY_HINT

    if HOST_COPY in reason:  # the evidence is the copy, whatever the test checks
        return HOST_COPY_HINT
    if result == CRASH:
        return f"your kernel{where} crashed: read the error above"
    if hint_on == "fault":  # advice about a race or a barrier does not explain wrong values
        return ""
    return marker_hint or ""


def graded_test_files(phase: Phase, opts: CheckOptions) -> list[Path]:
    """The test modules to run: ``opts.tests_file`` if given, else the phase's files in grader/tests/
    that exist (a phase may list one that is not written yet); the first one listed if none does."""
    if opts.tests_file:
        return [Path(opts.tests_file).resolve()]
    listed = [(paths.GRADED_TESTS_DIR / name).resolve() for name in phase.test_files]
    return [p for p in listed if p.exists()] or listed[:1]


# Phases whose graded tests never import the learner's Python: it runs in a learner process of its own
# (grader/learner_process.py, ARCHITECTURE.md "Grader"), on the emulator (arrays by value) and on a GPU (arrays by
# CUDA IPC handle, performance timed by the judge: learner_process.time_replayed). On a GPU a phase is listed once its
# graded checks have passed isolated on one (an H100, kernel and performance checks,
# benchmarks/results/grade-isolated-<phase>-*.json): every phase since 2026-11-27; phase 4 once a timing's fresh
# sets became the learner process's own memory, in an allocation of a whole number of 2 MiB (its sum had run at
# 0.65x its references, bars 0.70 and 0.75, on the judge's arena mapped by IPC handle: isolated_sum_*-*.json), 8a and
# 8b with their performance checks then.
ISOLATED_PHASES = ("phase1", "phase2", "phase3a", "phase3b", "phase4", "phase5", "phase6", "phase7", "phase8a",
                   "phase8b")
CUDA_ISOLATED_PHASES = ISOLATED_PHASES


# "0": the learner's code in the tests' own process (the grader's own tests show with it what isolation stops);
# "1": isolated on a GPU too, whatever CUDA_ISOLATED_PHASES says (how a phase is graded isolated on a GPU before it
# joins them); unset: the defaults above. Sandboxed grading (grade-all) removes it: the defaults apply there.
ISOLATION_ENV = "GRADER_ISOLATION"


def device_of(env: dict[str, str]) -> str:
    """The device the graded steps will run on: ``MINITORCH_DEVICE``, else minitorch's default (cuda if usable)."""
    if env.get("MINITORCH_DEVICE"):
        return env["MINITORCH_DEVICE"]
    from minitorch.backend import cuda_available

    return "cuda" if cuda_available() else "emu"


def isolated(phase: Phase, env: dict[str, str]) -> bool:
    """True when `phase`'s graded tests run with the learner's code in a process of its own on their device
    (:func:`device_of`: a GPU left to minitorch's default is a GPU, with the GPU's list of isolated phases)."""
    setting = env.get(ISOLATION_ENV)
    if setting == "0":
        return False
    device = device_of(env)
    if setting == "1" and device == "cuda":
        return phase.name in ISOLATED_PHASES
    return phase.name in {"emu": ISOLATED_PHASES, "cuda": CUDA_ISOLATED_PHASES}.get(device, ())


def run_tests_step(phase: Phase, env: dict[str, str], work: Path, opts: CheckOptions) -> tuple[list[CheckResult], str | None]:
    """Run the graded tests; returns their results and the device they reported."""
    env = dict(env)
    key: bytes | None = None
    if isolated(phase, env):
        # The judge signs each result it streams, under a key the learner's process never sees: a result
        # line the learner writes into the file is not believed.
        key = secrets.token_bytes(32)
        env.update({learner_process.ISOLATE_ENV: "1", RESULTS_KEY_ENV: key.hex()})
    test_paths = graded_test_files(phase, opts)
    rootdir = test_paths[0].parent  # node ids are relative to it (used to re-run the remaining tests)
    use_timeout = has_pytest_timeout()
    per_test = max(1, int(opts.timeout_s))
    step_timeout = opts.step_timeout_s or max(600.0, per_test * 20.0)
    checks: dict[str, CheckResult] = {}
    order: list[str] = []
    device: str | None = None
    collected: list[str] | None = None
    kernel_of: dict[str, str] = {}  # nodeid -> "file:function" from the tests' kernel markers
    hung: dict[str, str] = {}  # "file:function" -> the test in which it hung
    remaining: list[str] | None = None  # None: the whole file
    attempt = 0
    while True:
        attempt += 1
        results_file = work / f"tests-results-{attempt}.jsonl"
        cmd = pytest_command(results_file) + ["--rootdir", str(rootdir), "--grader-device-info"]
        if key is not None:  # neither the working directory nor the user's site-packages on the judge's path:
            cmd[1:1] = ["-P", "-s"]  # both writable by the learner's code, and the judge imports lazily
        if use_timeout:
            cmd += [f"--timeout={per_test}", "--timeout-method=thread"]
        if opts.select:
            cmd += ["-k", opts.select]
        cmd += [str(rootdir / n) for n in remaining] if remaining is not None else [str(p) for p in test_paths]
        rc, output = run_isolated(cmd, env=env, cwd=work, timeout_s=step_timeout)
        events = read_events(results_file, key)
        starts: dict[str, dict[str, Any]] = {}
        finished: set[str] = set()
        poisoned = False
        for ev in events:
            kind = ev["event"]
            if kind == "collected" and collected is None:
                collected = ev["nodeids"]
                kernel_of = ev.get("kernels", {})
            elif kind == "device":
                device = ev["device"]
            elif kind == "start":
                starts[ev["nodeid"]] = ev
            elif kind == "poisoned":
                poisoned = True
            elif kind == "warning" and ev["nodeid"] in checks:
                found = checks[ev["nodeid"]].warnings
                if ev["text"] not in found:
                    found.append(ev["text"])
            elif kind == "result":
                nodeid = ev["nodeid"]
                finished.add(nodeid)
                start = starts.get(nodeid, {})
                check = _result_check(ev, start)
                if nodeid in checks and checks[nodeid].result != PASS:
                    continue  # keep the first failure (teardown errors come after)
                if nodeid not in checks:
                    order.append(nodeid)
                checks[nodeid] = check
        if collected is None:
            checks["<collection>"] = CheckResult(
                "graded tests", CRASH, "tests",
                f"the graded tests could not start ({exit_description(rc)}):\n{tail(output)}",
                hint="read the error above (an import error in your module?)")
            order.append("<collection>")
            break
        unfinished = [n for n in starts if n not in finished]
        if unfinished:
            nodeid = unfinished[-1]
            start = starts[nodeid]
            kernel = start.get("kernel")
            launch = last_launch(work)  # "memory.cu:fill grid=(3,) block=(64,)", cleared at each test start
            if launch:
                kernel = launch.split()[0]
            timed_out = rc is None or bool(PYTEST_TIMEOUT_BANNER.search(output))
            result = TIMEOUT if timed_out else CRASH
            running = f" while running kernel `{kernel.split(':')[-1]}` from {kernel.split(':')[0]}" if kernel else ""
            if launch and " " in launch:
                running += f" ({launch.split(' ', 1)[1]})"
            if timed_out:
                limit = per_test if rc is not None else step_timeout
                reason = f"{_test_name(nodeid)} did not finish within {limit:g} s{running}"
            else:
                reason = f"{_test_name(nodeid)}: the test process died ({exit_description(rc)}){running}"
            reason += "\n" + tail(_relevant_output(output), 2000)
            checks[nodeid] = CheckResult(_test_name(nodeid), result, "tests", reason, nodeid=nodeid, kernel=kernel,
                                         hint=_failure_hint(result, reason, start.get("hint"), kernel,
                                                            start.get("hint_on")))
            order.append(nodeid)
            finished.add(nodeid)
            if result == TIMEOUT and kernel:
                hung.setdefault(kernel, _test_name(nodeid))
        elif rc is None:  # killed while no test was running (collection, teardown): do not retry
            checks["<step>"] = CheckResult("graded tests", TIMEOUT, "tests",
                                           f"the graded tests were still running after {step_timeout:g} s:\n{tail(output)}")
            order.append("<step>")
            break
        # Tests of a kernel that already hung would each wait for the whole timeout: report them unrun.
        for n in collected:
            if n not in checks and kernel_of.get(n) in hung:
                k = kernel_of[n]
                checks[n] = CheckResult(_test_name(n), SKIP, "tests", nodeid=n, kernel=k, reason=(
                    f"not run: kernel `{k.split(':')[-1]}` ({k.split(':')[0]}) hung in {hung[k]}; fix that first"))
                order.append(n)
        done = set(checks)
        remaining = [n for n in collected if n not in done]
        if not remaining or not (unfinished or poisoned or rc is None):
            break
        if attempt > len(collected) + 1:  # cannot happen (each round finishes a test); belt and braces
            break
    return [checks[n] for n in order], device


_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
_FRAME_LINE = re.compile(r"  \S+:\d+ in ")
_LIBRARY_PATHS = ("site-packages", "/lib/python3", "pytest_plugin.py", "<frozen")


def _relevant_output(output: str) -> str:
    """What explains a death: the fatal error line and the stack frames of the course's own code.

    pytest-timeout and faulthandler dump every frame, pytest's and pluggy's included; the learner
    needs the few that are theirs (memory.py, the graded test, minitorch).
    """
    start = -1
    for marker in ("+++++", "Fatal Python error", "Segmentation fault", "Aborted"):
        idx = output.find(marker)
        if idx >= 0 and (start < 0 or idx < start):
            start = idx
    text = output[start:] if start >= 0 else output
    lines = text.splitlines()
    keep = [lines[0]] if lines and not lines[0].startswith("+") else []  # the fatal error, not the banner
    for i, line in enumerate(lines):
        m = _FRAME.search(line)
        if m and not any(p in m.group(1) for p in _LIBRARY_PATHS):
            keep.append(f"  {Path(m.group(1)).name}:{m.group(2)} in {m.group(3)}")
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if nxt and not _FRAME.search(nxt):
                keep.append(f"      {nxt}")
    return "\n".join(keep[:24]) if any(_FRAME_LINE.match(k) for k in keep) else tail(text, 1500)


def _result_check(ev: dict[str, Any], start: dict[str, Any]) -> CheckResult:
    nodeid, reason = ev["nodeid"], ev.get("reason", "")
    kernel, perf = start.get("kernel"), ev.get("perf") or []
    measured = format_measure(perf[0]) if perf else ""
    unavailable = False
    if ev["outcome"] == "passed":
        # a check whose only figures are reported, never required, measured something and passed nothing
        result = INFO if perf and all(p.get("reported") for p in perf) else PASS
    elif ev["outcome"] == "skipped":
        # a check this device cannot run (the plugin decided it before the test, from the device alone)
        unavailable = bool(start.get("unavailable"))
        result = NOT_MEASURED if start.get("perf") or unavailable else SKIP
    else:
        result = _classify_failure(reason)
    hint = (_failure_hint(result, reason, start.get("hint"), kernel, start.get("hint_on"))
            if result in (FAIL, CRASH) else "")
    return CheckResult(_test_name(nodeid), result, "tests", reason, measured, hint, nodeid, kernel, perf,
                       notes=list(ev.get("notes") or []), unavailable=unavailable)
