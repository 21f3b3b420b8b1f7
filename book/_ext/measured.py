"""``{measured}`87% <file>``` : a number typed in prose, checked at build time against a committed result.

Most numbers in the chapters are glued from ``benchmarks/results/`` by the figure modules. A number that
sits better in a sentence than in a glued paragraph is written with this role instead: the text shows as
written (``87%``), and the build checks that the file (under ``benchmarks/results/``) holds a number
that rounds to it at the precision shown: ``87%`` needs one within 0.5 of 87, ``0.54`` one within 0.005
of 0.54. ``<file, scale=1e-3>`` multiplies the file's numbers first (a file in GB/s quoted in TB/s);
``<file, near=DRAM Throughput>`` counts only the numbers on the file's lines that contain that text. A
number that no longer matches its file (a re-measured run, a mistyped digit) fails the strict build, and
``tests/test_measured_numbers.py`` checks every role of every chapter without building.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
ROLE = re.compile(r"\{measured\}`([^`<]*?)\s*<([^>`]+)>`")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


@cache
def _file_numbers(name: str, near: str) -> tuple[float, ...]:
    lines = [line for line in (RESULTS / name).read_text().splitlines() if near in line]
    return tuple(float(m.group(0)) for line in lines
                 for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line))


def check(shown: str, target: str) -> str | None:
    """None when the number in ``shown`` is in the file ``target`` names (at its precision), else why not."""
    name, *options = (part.strip() for part in target.split(","))
    settings = dict(option.partition("=")[::2] for option in options)
    if not name or set(settings) - {"scale", "near"} or any(not v for v in settings.values()):
        return f"{{measured}}`{shown} <{target}>`: the target must be '<file>' with 'scale=S' or 'near=TEXT'"
    scale, near = float(settings.get("scale", 1.0)), settings.get("near", "")
    number = _NUMBER.search(shown)
    if number is None:
        return f"{{measured}}`{shown} <{target}>`: the text holds no number"
    digits = number.group(0).replace(",", "")
    value = float(digits)
    decimals = len(digits.split(".")[1]) if "." in digits and "e" not in digits.lower() else 0
    half = 0.5 * 10.0 ** -decimals
    if not (RESULTS / name).is_file():
        return f"{{measured}}`{shown} <{target}>`: benchmarks/results/{name} does not exist"
    if any(abs(x * scale - value) <= half * (1 + 1e-9) for x in _file_numbers(name, near)):
        return None
    where = f" on a line with {near!r}" if near else ""
    times = f" (times {scale:g})" if scale != 1 else ""
    return f"{{measured}}`{shown} <{target}>`: no number{where} in benchmarks/results/{name}{times} rounds to {digits}"


def problems(markdown: str) -> list[str]:
    """Every ``{measured}`` role of a page whose number its file does not hold."""
    return [why for shown, target in ROLE.findall(markdown) if (why := check(shown, target))]


def _role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from docutils import nodes

    match = re.match(r"^(.*?)\s*<([^>]+)>\s*$", text, re.S)
    if not match:
        message = inliner.reporter.error(f"{{measured}} needs 'text <file>', got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    shown, target = match.group(1), match.group(2)
    if why := check(shown, target):
        message = inliner.reporter.error(why, line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.Text(shown)], []


def setup(app):
    app.add_role("measured", _role)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
