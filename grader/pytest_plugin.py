"""pytest plugin used by `grader check` in both steps (lab notebook via nbval, graded tests).

It appends one JSON object per line to ``--grader-results`` as things happen, flushing each line,
so that when the process crashes or is killed the grader still knows which test was running:

    {"event": "collected", "nodeids": [...], "kernels": {nodeid: "memory.cu:fill"}}
    {"event": "start", "nodeid", "kernel": "memory.cu:fill" | null, "hint": str | null, "perf": bool}
    {"event": "result", "nodeid", "outcome": "passed"|"failed"|"skipped", "when", "reason", "perf": [...],
     "notes": [...]}  (a test's record_property("note", text): shown under the report's table)
    {"event": "device", "device": "cuda: NVIDIA H100 80GB HBM3" | "emu" | "cpu"}
    {"event": "poisoned", "nodeid", "reason"}   (session stopped: the CUDA context is unusable)

Markers for graded tests: ``kernel(file, function)`` (named when the test crashes or hangs),
``hint(text)`` (shown on failure), ``perf`` (a performance check), ``needs_arch("sm_90a")`` (a check of code
built for one GPU architecture: on any other device it is skipped before it starts, reported NOT MEASURED with
the reason, and never blocks the phase, even with --require-perf; the start event then carries
``"unavailable": reason``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

import pytest

from grader.subprocesses import RESULTS_KEY_ENV, event_mac

# Errors after which a CUDA context (and so the whole process) is unusable.
POISONED_CONTEXT = re.compile(
    r"cudaErrorIllegalAddress|cudaErrorLaunchFailure|cudaErrorIllegalInstruction|cudaErrorMisalignedAddress"
    r"|cudaErrorAssert|cudaErrorHardwareStackError|CUDA_ERROR_ILLEGAL_ADDRESS|CUDA_ERROR_LAUNCH_FAILED"
    r"|CUDA_ERROR_ILLEGAL_INSTRUCTION|CUDA_ERROR_MISALIGNED_ADDRESS|CUDA_ERROR_ASSERT|cudaErrorLaunchTimeout"
)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader")
    group.addoption("--grader-results", default=os.environ.get("GRADER_RESULTS"),
                    help="JSON-lines file receiving per-test results as they happen")
    group.addoption("--grader-device-info", action="store_true",
                    help="record the active minitorch device (graded tests only)")


class _Writer:
    def __init__(self, path: str, key: bytes | None = None) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the session
        self._key = key

    def write(self, **event: Any) -> None:
        if self._key is not None:  # signed: the grader believes no line the learner's process writes here
            event = json.loads(json.dumps(event, default=str))
            event["mac"] = event_mac(self._key, event)
        self._fh.write(json.dumps(event, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())  # the process may die on the next line

    def close(self) -> None:
        self._fh.close()


_writer: _Writer | None = None
_device_written = False


def pytest_configure(config: pytest.Config) -> None:
    global _writer
    config.addinivalue_line("markers", "kernel(file, function): the learner kernel a test launches")
    config.addinivalue_line("markers", "hint(text): advice shown when the test fails")
    config.addinivalue_line("markers", "perf: a performance check (not measured without a GPU)")
    config.addinivalue_line("markers", "needs_arch(arch): runs only on that GPU architecture (sm_90a: Hopper); "
                            "elsewhere NOT MEASURED, never blocking")
    path = config.getoption("grader_results")
    key = os.environ.pop(RESULTS_KEY_ENV, None)  # never passed on to a process this one starts
    if path and _writer is None:
        _writer = _Writer(path, bytes.fromhex(key) if key else None)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _writer
    if _writer is not None:
        _writer.close()
        _writer = None


def _emit(**event: Any) -> None:
    if _writer is not None:
        _writer.write(**event)


def pytest_collection_finish(session: pytest.Session) -> None:
    kernels = {item.nodeid: info["kernel"] for item in session.items if (info := _marker_info(item))["kernel"]}
    _emit(event="collected", nodeids=[item.nodeid for item in session.items], kernels=kernels)


def _marker_info(item: pytest.Item) -> dict[str, Any]:
    kernel = item.get_closest_marker("kernel")
    hint = item.get_closest_marker("hint")
    return {
        "kernel": ":".join(str(a) for a in kernel.args) if kernel else None,
        "hint": hint.args[0] if hint else None,
        # hint(text, on="fault"): the advice is about a kernel fault (a race, a barrier), not wrong values
        "hint_on": hint.kwargs.get("on") if hint else None,
        "perf": item.get_closest_marker("perf") is not None,
    }


def _describe_device() -> str:
    try:
        from grader.checks import device_description

        return device_description()
    except Exception as err:  # noqa: BLE001 - reported, never fatal
        return f"unknown ({type(err).__name__}: {err})"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _device_written
    if not _device_written and item.config.getoption("grader_device_info"):
        _device_written = True
        _emit(event="device", device=_describe_device())
    trace = os.environ.get("MINITORCH_LAUNCH_TRACE")
    if trace:  # minitorch writes each launch there; cleared so a crash names this test's kernel
        with contextlib.suppress(OSError):
            os.unlink(trace)
    unavailable = _unavailable(item)
    if unavailable:
        item.add_marker(pytest.mark.skip(reason=unavailable))
    _emit(event="start", nodeid=item.nodeid, unavailable=unavailable, **_marker_info(item))


def _unavailable(item: pytest.Item) -> str | None:
    """Why this device cannot run a ``needs_arch`` check, decided here from the device alone (before any of the
    test's code runs), or None."""
    marker = item.get_closest_marker("needs_arch")
    if marker is None:
        return None
    from minitorch import kernels

    arch = str(marker.args[0])
    why = kernels.arch_missing(arch)
    return f"not measured: needs an {arch} GPU (Hopper: H100, H200); {why}" if why else None


def _reason(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> str:
    """One readable message: the learner's exception, not pytest's traceback."""
    if report.skipped:
        longrepr = report.longrepr
        text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return text.removeprefix("Skipped: ")
    excinfo = call.excinfo
    if excinfo is None:
        return ""
    exc = excinfo.value
    if type(exc).__name__ == "NbCellError":  # a lab notebook cell (nbval)
        message = ANSI.sub("", str(exc))
        if message.startswith("Timeout"):
            return message + _last_launch()
        for out in getattr(item, "test_outputs", None) or []:  # nbval keeps the cell's outputs
            if out.get("output_type") == "error":
                return f"{out.get('ename')}: {ANSI.sub('', str(out.get('evalue')))}"
        return message
    message = ANSI.sub("", str(exc)).strip()
    name = type(exc).__name__
    text = message if name in ("AssertionError", "GradeError", "Failed") and message else (
        f"{name}: {message}" if message else name)
    cause, seen = exc.__cause__, 0
    while cause is not None and seen < 3:  # e.g. KernelLaunchError caused by the emulator's KernelFault
        text += f"\n(caused by {type(cause).__name__})"
        cause, seen = cause.__cause__, seen + 1
    return text


def _last_launch() -> str:
    """' Last kernel launched: memory.cu:fill grid=(1,) block=(256,).' from minitorch's launch trace."""
    trace = os.environ.get("MINITORCH_LAUNCH_TRACE")
    try:
        text = open(trace, encoding="utf-8").read().strip() if trace else ""
    except OSError:
        text = ""
    return f" Last kernel launched: {text}." if text else ""


def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str, location: Any) -> None:
    """A warning raised while a test ran (pytest records them after the test's result): shown in the report."""
    if nodeid:
        _emit(event="warning", nodeid=nodeid, text=f"{warning_message.category.__name__}: {warning_message.message}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    final = report.when == "call" or (report.when == "setup" and not report.passed) or (
        report.when == "teardown" and report.failed)
    if not final:
        return
    reason = _reason(item, call, report)
    perf = [value for key, value in report.user_properties if key == "perf"]
    notes = [str(value) for key, value in report.user_properties if key == "note"]
    _emit(event="result", nodeid=item.nodeid, outcome=report.outcome, when=report.when,
          reason=reason, perf=perf, notes=notes, duration=round(report.duration, 3))
    if report.failed and POISONED_CONTEXT.search(reason + str(report.longrepr)):
        _emit(event="poisoned", nodeid=item.nodeid, reason=reason)
        item.session.shouldstop = "the CUDA context is unusable after this error; restarting"
