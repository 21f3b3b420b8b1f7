"""Results of a `grader check` run and their plain-text / JSON rendering (no third-party deps)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, SKIP, NOT_MEASURED, CRASH, TIMEOUT = "PASS", "FAIL", "SKIP", "NOT MEASURED", "CRASH", "TIMEOUT"
INFO = "INFO"  # a figure measured and reported, never required (no bar): neither a pass nor a failure


@dataclass
class CheckResult:
    name: str
    result: str
    step: str = "tests"  # "setup" | "notebook" | "tests"
    reason: str = ""
    measured: str = ""
    hint: str = ""
    nodeid: str = ""
    kernel: str | None = None
    perf: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # raised while the check ran, passed or not
    notes: list[str] = field(default_factory=list)  # record_property("note", ...): shown under the table
    # NOT MEASURED because this device lacks what the check needs (an sm_90 GPU for Phase 8a's rung 6, say):
    # never blocking, even with --require-perf, which asks for what the device can measure
    unavailable: bool = False

    def blocking(self, require_perf: bool) -> bool:
        if self.result in (FAIL, CRASH, TIMEOUT):
            return True
        return self.result == NOT_MEASURED and require_perf and not self.unavailable


@dataclass
class PhaseReport:
    phase: str
    title: str
    device: str
    seed: int | None
    checks: list[CheckResult] = field(default_factory=list)
    require_perf: bool = False
    notes: list[str] = field(default_factory=list)
    solutions: bool = False
    workspace: str = ""
    notebook: str = ""

    partial: bool = False  # only some tests ran (-k): never a pass
    isolated: bool = False  # the learner's code ran in a process of its own (grader/learner_process.py)

    @property
    def passed(self) -> bool:
        ran_something = any(c.result == PASS for c in self.checks)
        return ran_something and not self.partial and not any(c.blocking(self.require_perf) for c in self.checks)

    def perf_records(self) -> list[dict[str, Any]]:
        return [p for c in self.checks for p in c.perf]

    def to_json(self) -> str:
        data = asdict(self)
        data["passed"] = self.passed
        return json.dumps(data, indent=2, default=str)


def format_measure(perf: dict[str, Any]) -> str:
    """'412 GB/s = 0.93x ref (>= 0.60x)' from a perf record written by grader.checks.perf_ratio; a reported
    figure has no bar: '295.7 GFLOP/s = 0.07x ref (reported, no bar)'."""
    unit = perf.get("unit", "")
    measured = perf.get("measured")
    ratio = perf.get("ratio")
    threshold = perf.get("threshold")
    parts = []
    if measured is not None:
        parts.append(f"{measured:.4g} {unit}".strip())
    if ratio is not None:
        parts.append(f"{ratio:.2f}x ref")
    text = " = ".join(parts)
    if perf.get("reported") or threshold is None:
        return text + " (reported, no bar)" if perf.get("reported") else text
    if threshold is not None and perf.get("direction") == "at most":  # a bound on the value itself (a loss)
        text += f" (<= {threshold:g})"
    elif threshold is not None and perf.get("direction") == "at least":  # likewise (an accuracy)
        text += f" (>= {threshold:g})"
    elif threshold is not None:
        text += f" (>= {threshold:.2f}x)"
    return text


def render_table(rows: list[list[str]], headers: list[str], max_widths: list[int] | None = None) -> str:
    """A plain-text table; cells wider than max_widths wrap onto continuation lines."""
    max_widths = max_widths or [60] * len(headers)
    wrapped = [[textwrap.wrap(cell, width=w) or [""] for cell, w in zip(row, max_widths, strict=True)] for row in rows]
    widths = [len(h) for h in headers]
    for row in wrapped:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [sep, "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |", sep.replace("-", "=")]
    for row in wrapped:
        height = max(len(lines) for lines in row)
        for k in range(height):
            cells = [(lines[k] if k < len(lines) else "").ljust(w) for lines, w in zip(row, widths, strict=True)]
            out.append("| " + " | ".join(cells) + " |")
    out.append(sep)
    return "\n".join(out)


def _base_name(name: str) -> str:
    return name.split("[", 1)[0]


def _grouped_rows(checks: list[CheckResult]) -> list[tuple[str, CheckResult]]:
    """One row per test function and result: 'test_fill_odd_sizes [6 cases]' instead of six rows."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for c in checks:
        groups.setdefault((_base_name(c.name), c.result), []).append(c)
    rows = []
    for (base, _result), members in groups.items():
        label = members[0].name if len(members) == 1 else f"{base} [{len(members)} cases]"
        rows.append((label, members[0]))
    return rows


def render_report(report: PhaseReport) -> str:
    mode = " (reference solutions)" if report.solutions else ""
    seed = f"seed {report.seed} (reproduce with --seed {report.seed})" if report.seed is not None else ""
    lines = [f"grader check {report.phase}: {report.title}{mode}",
             f"device: {report.device}   {seed}".rstrip()]
    if report.notebook:
        lines.append(f"notebook: {report.notebook}")
    if report.workspace:
        lines.append(f"workspace: {report.workspace}")
    lines.append("")
    rows = []
    for label, c in _grouped_rows(report.checks):
        first_line = c.reason.strip().splitlines()[0] if c.reason.strip() else ""
        measured = c.measured or (first_line if c.result in (SKIP, NOT_MEASURED) else "")
        hint = c.hint if c.result not in (PASS, INFO, SKIP, NOT_MEASURED) else ""
        rows.append([label, c.result, measured, hint])
    if rows:
        lines.append(render_table(rows, ["check", "result", "measured vs threshold", "hint"], [46, 12, 34, 38]))
    # One paragraph per test function and result: its first failing case in full, the others named.
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for c in report.checks:
        if c.blocking(report.require_perf) and c.reason:
            groups.setdefault((_base_name(c.name), c.result), []).append(c)
    if groups:
        lines += ["", "Details (first failure first):"]
        for (_base, result), members in groups.items():
            lines.append(f"- {members[0].name} [{result}]")
            lines += ["    " + line for line in members[0].reason.strip().splitlines()[:20]]
            others = [m.name.removeprefix(_base_name(m.name)) or m.name for m in members[1:]]
            if others:
                lines.append(f"    (also {result} for {', '.join(others[:8])}{' ...' if len(others) > 8 else ''})")
    warned: dict[str, list[str]] = {}  # warning -> the checks that raised it (a passing check's too)
    for c in report.checks:
        for w in c.warnings:
            warned.setdefault(w, []).append(c.name)
    if warned:
        lines += ["", "Warnings (they do not fail the phase, but read them):"]
        for w, names in warned.items():
            where = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            lines.append(f"- in {where}:")
            lines += ["    " + line for line in w.strip().splitlines()[:8]]
    lines += [""] + [f"note: {n}" for n in report.notes]
    if any(c.result == INFO for c in report.checks):
        lines.append(f"note: {INFO} is a figure measured and reported, never required (\"reported\" in "
                     f"grader/thresholds.toml): it neither passes nor fails the phase")
    verdict = "PASSED" if report.passed else "NOT PASSED"
    lines.append(f"{report.phase}: {verdict}")
    return "\n".join(lines).replace("\n\n\n", "\n\n")
